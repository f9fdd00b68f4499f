"""Make sandbox and model text safe to print on the user's terminal."""

from __future__ import annotations

import re

# CSI, OSC (title, clipboard, hyperlinks), DCS/SOS/PM/APC strings and lone two-byte escapes; then the remaining
# C0/C1 controls except tab and newline. Anything that could move the cursor or talk to the terminal goes.
_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"
    r"|\x1b[@-Z\\-_]"
    r"|\x9b[0-?]*[ -/]*[@-~]"
)
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def sanitize(text: str) -> str:
    return _CONTROLS.sub("", _ESCAPES.sub("", text.replace("\r\n", "\n")))


def fold(text: str, head: int = 20, tail: int = 20) -> str:
    """Long output folded to its first and last lines with a count of what was left out."""
    lines = text.splitlines()
    if len(lines) <= head + tail + 1:
        return text
    hidden = len(lines) - head - tail
    return "\n".join([*lines[:head], f"… {hidden} more lines …", *lines[-tail:]])
