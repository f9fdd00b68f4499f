"""How a transcript keeps every request without repeating the conversation: each `request.sent` is written against
the thread's previous one (transcript format 2). Its `request` and its `body` are each either written whole, or as

    {"$edit": [head, "middle", tail]}

meaning: the previous request's `request` (or `body`) as JSON text (written as transcripts write JSON: compact, UTF-8),
its first `head` characters, then `middle`, then its last `tail` characters. A conversation that grows at its end
(messages appended, a tool result growing, token ids added) costs a transcript what is new, so a transcript grows with
the turns, not with their square; the text is rebuilt exactly, so the request read back is the one sent, byte for
byte. The first request of a thread (after `thread.started`) is written whole, as is one an edit would not shorten.
Format 1 (every request whole) reads as it is. A reader holds one request's text at a time.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from oc_repl.event_json import json_text

VERSION = 2
EDIT = "$edit"
FIELDS = ("request", "body")
_BLOCK = 4096
_WORTH = 64  # characters an edit must save to be written as one


class Unrebuildable(ValueError):
    """A request written against one the transcript does not hold (a line lost before it)."""


def _common_head(a: str, b: str) -> int:
    """The length of the longest common prefix: compared a block at a time (each comparison in C), then within the
    first block that differs by halving."""
    limit, at = min(len(a), len(b)), 0
    while at + _BLOCK <= limit and a[at : at + _BLOCK] == b[at : at + _BLOCK]:
        at += _BLOCK
    lo, hi = at, min(at + _BLOCK, limit)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[at:mid] == b[at:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _common_tail(a: str, b: str, head: int) -> int:
    """The length of the longest common suffix that does not reach into either text's first `head` characters."""
    room = min(len(a), len(b)) - head
    return _common_head(a[len(a) - room :][::-1], b[len(b) - room :][::-1]) if room > 0 else 0


def edit(before: str, now: str) -> list[Any] | None:
    """`now` written against `before` ([head, middle, tail]), or None when that would not save enough."""
    head = _common_head(before, now)
    tail = _common_tail(before, now, head)
    if head + tail < _WORTH:
        return None
    return [head, now[head : len(now) - tail], tail]


def apply(before: str, written: Any) -> str:
    if not (isinstance(written, list) and len(written) == 3):
        raise Unrebuildable("an edit that is not [head, middle, tail]")
    head, middle, tail = written
    ok = isinstance(head, int) and isinstance(tail, int) and isinstance(middle, str)
    if not ok or head < 0 or tail < 0 or head + tail > len(before):
        raise Unrebuildable("an edit that does not fit the request before it")
    return before[:head] + middle + before[len(before) - tail :]


class Requests:
    """The previous request of the thread being written or read: `write` turns a `request.sent` event's data into
    what the transcript holds, `read` back."""

    def __init__(self) -> None:
        self._text: dict[str, str] = {}  # each field's JSON text, as last written or rebuilt
        self._whole: dict[str, Any] = {}  # a field read whole, written as text only when an edit refers to it

    def start(self) -> None:
        """A thread starts: its first request is written whole."""
        self._text, self._whole = {}, {}

    def write(self, event: dict[str, Any], redact: Callable[[str], str] = lambda text: text) -> dict[str, Any]:
        """`redact`: the transcript's redaction of a JSON text, applied before comparing, so that an edit fits the
        text the file holds."""
        written = dict(event)
        for field in FIELDS:
            if field not in event:
                continue
            text = redact(json_text(event[field]))
            before, self._text[field] = self._text.get(field), text
            changed = edit(before, text) if before is not None else None
            if changed is not None:
                written[field] = {EDIT: changed}
        return written

    def read(self, written: dict[str, Any]) -> dict[str, Any]:
        event = dict(written)
        for field in FIELDS:
            value = written.get(field)
            if isinstance(value, dict) and set(value) == {EDIT}:
                before = self._text.get(field)
                if before is None and field in self._whole:
                    before = json_text(self._whole.pop(field))
                if before is None:
                    raise Unrebuildable(f"a request's {field} written against one the transcript does not hold")
                text = apply(before, value[EDIT])
                try:
                    event[field] = json.loads(text)
                except ValueError as exc:
                    raise Unrebuildable(f"a request's {field} that does not rebuild to JSON ({exc})") from None
                self._text[field] = text
            elif field in written:
                self._text.pop(field, None)
                self._whole[field] = value
        return event
