"""How oc-repl's own scripts answer from a sandbox: lines `@@OCR:<marker>:...@@` between what else runs there prints,
the last `@@OCR:<marker>:done@@`, the marker fresh for each script (`token`), so that nothing the agent prints can pass
for an answer."""

from __future__ import annotations

import secrets
from collections.abc import Callable

TRIES = 3  # runs of a script whose exec came back with nothing at all


def token() -> str:
    return secrets.token_hex(6)


def done(text: str, marker: str) -> bool:
    return f"@@OCR:{marker}:done@@" in text.splitlines()


def until_done(run: Callable[[], str], marker: str) -> str:
    """What the first run that finished printed. A run that printed nothing at all (under load a daemon's exec can
    come back without the output of a script that ran: a sandbox fault, not an answer) is run again, up to TRIES
    times; the scripts that go through here only look, or stop what is left, so a second run does the same. Any
    other text is the answer as it is, for its reader to judge."""
    for _ in range(TRIES - 1):
        text = run()
        if done(text, marker) or text.strip():
            return text
    return run()
