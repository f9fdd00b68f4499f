"""Make sandbox and model text safe to print on the user's terminal, and honest about what it holds.

Nothing is deleted (but the CR of a CR LF line ending in output): every control character (C0, DEL, C1), every
invisible format character (bidi embeddings, overrides and isolates, direction marks, zero-width characters, tag
characters), line and paragraph separators and lone surrogates are written in visible notation, `\\x1b`, `\\u202e`,
... So an escape sequence cannot move the cursor, retitle the window or touch the clipboard, and cannot hide anything
either: ESC ] 0 ; t BEL is shown as `\\x1b]0;t\\x07`, whole, with whatever it carried.
What a person approves is what runs.
"""

from __future__ import annotations

import re
from typing import Any

# Cc, Cf, Cs, Zl and Zp, and the Hangul fillers (letters that draw nothing); tests/render/test_visible.py checks this
# class against unicodedata. Spelled out rather than derived: scanning the code points costs start-up time.
_HIDDEN = (
    "\x00-\x08\x0b-\x1f\x7f-\x9f\xad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u115f\u1160\u180e"
    "\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\u3164\ud800-\udfff\ufeff\uffa0\ufff9-\ufffb"
    "\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0001\U000e0020-\U000e007f"
)
_IN_OUTPUT = re.compile(f"[{_HIDDEN}]")  # tab and newline are not in it
_IN_LINE = re.compile(f"[\t\n{_HIDDEN}]")
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def notation(char: str) -> str:
    """One hidden character as it is shown: `\\t` `\\n` `\\r`, `\\xNN`, `\\uNNNN` or `\\UNNNNNNNN`."""
    code = ord(char)
    if char in _NAMED:
        return _NAMED[char]
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _shown(match: re.Match[str]) -> str:
    return notation(match.group())


def sanitize(text: str) -> str:
    """Text for an output panel, a message or a title: tab and newline stay as they are (a CR before a newline is
    the terminal's line ending and goes), everything else hidden is shown in notation."""
    return _IN_OUTPUT.sub(_shown, text.replace("\r\n", "\n"))


def one_line(text: str) -> str:
    """Text that must read as exactly one line, a command put to a person for approval: tab, newline and CR are
    shown in notation too."""
    return _IN_LINE.sub(_shown, text)


def marked(text: str, style: str = "") -> Any:
    """`one_line(text)` as rich Text, each notation in reverse video: a real newline is told apart from a literal
    backslash and n the model wrote."""
    from rich.text import Text

    shown = Text(style=style)
    end = 0
    for match in _IN_LINE.finditer(text):
        shown.append(text[end : match.start()])
        shown.append(notation(match.group()), style="reverse")
        end = match.end()
    shown.append(text[end:])
    return shown


def fold(text: str, head: int = 20, tail: int = 20) -> str:
    """Long output folded to its first and last lines with a count of what was left out."""
    lines = text.splitlines()
    if len(lines) <= head + tail + 1:
        return text
    hidden = len(lines) - head - tail
    return "\n".join([*lines[:head], f"… {hidden} more lines …", *lines[-tail:]])
