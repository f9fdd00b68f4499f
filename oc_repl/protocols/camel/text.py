"""Turning captured terminal bytes into the text a model reads.

Blocking command output reached the model in training after camel passed it through rich's ANSI decoder; the
function here reproduces that conversion (and is checked against rich in the tests). Output of interactive sessions
is not converted at all: the model saw it raw.
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


def terminal_text(data: bytes) -> str:
    """Plain text of blocking command output, the way the model saw it in training.

    Invalid UTF-8 is dropped; each line keeps only what follows its last carriage return (`10%\\r100%` -> `100%`,
    `a\\r\\n` -> an empty line); escape sequences and the control codes BEL, BS, VT, FF are removed. Line breaks are
    kept, including a final one.
    """
    text = data.decode("utf-8", errors="ignore")
    lines = []
    for line in _LINES.split(text):
        line = line[:-1] if line.endswith("\n") else line
        line = line.rsplit("\r", 1)[-1]
        lines.append(_strip_escapes(line).translate(_CONTROL))
    return "\n".join(lines)
