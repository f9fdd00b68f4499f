"""Turning captured terminal bytes into the text a model reads.

Blocking command output reached the model in training after camel passed it through rich's ANSI decoder
(`Text.from_ansi(...).plain`); the function here reproduces that conversion for either release line of rich, which
split lines differently (checked against both in the tests). Output of interactive sessions is not converted at all:
the model saw it raw.

- rich up to 14.3.4 splits the text as `str.splitlines()` does: the final line break is dropped, and besides `\n`
  each of `\r`, `\r\n`, VT, FF, FS, GS, RS, NEL, U+2028 and U+2029 breaks a line (`10%\r100%` is two lines).
- rich 15 splits on `\n` alone and keeps a final one; a line keeps what follows its last `\r`.
"""

from __future__ import annotations

import re

# The escape sequences that decoder recognises, in its order: ESC plus one byte in 0-?, an OSC closed by ESC \,
# ESC plus one byte in (@-Z\]^_ , and CSI. An OSC closed by BEL is not among them: only its `ESC ]` goes, its text
# stays and the BEL is dropped with the other control codes. Kept that way because that is what the model saw.
_ESCAPE = re.compile(r"\x1b[0-?]|\x1b\].*?\x1b\\|\x1b(?:[(@-Z\\-_]|\[[0-?]*[ -/]*[@-~])")
_CONTROL = dict.fromkeys([0x07, 0x08, 0x0B, 0x0C, 0x0D])  # BEL, backspace, VT, FF, CR: dropped, never interpreted
_LINES = re.compile(r"(?<=\n)")


def _strip_escapes(line: str) -> str:
    pieces = []
    position = 0
    for match in _ESCAPE.finditer(line):
        if match.start() > position:
            pieces.append(line[position : match.start()])
        # `ESC (` selects a character set: the byte naming the set goes with it
        position = match.end() + 1 if match.group() == "\x1b(" else match.end()
    pieces.append(line[position:])
    return "".join(pieces)


RICH_LINES = ("14", "15")  # the release lines of rich whose conversion `terminal_text` gives


def terminal_text(data: bytes, rich: str = "14") -> str:
    """Plain text of blocking command output, the way the model saw it in training through rich's line `rich`.

    Invalid UTF-8 is dropped; the text is split into lines as that line of rich splits it (above); each keeps only
    what follows its last carriage return, and loses escape sequences and the control codes BEL, BS, VT, FF, CR.
    """
    text = data.decode("utf-8", errors="ignore")
    if rich == "14":
        pieces = text.splitlines()
    else:
        pieces = [line[:-1] if line.endswith("\n") else line for line in _LINES.split(text)]
    return "\n".join(_strip_escapes(line.rsplit("\r", 1)[-1]).translate(_CONTROL) for line in pieces)
