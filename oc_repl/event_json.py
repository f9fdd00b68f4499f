"""An event as one line of JSON: how the transcript, `--json` and every record write events (events.py holds them).

This is on every event's path, so it stays plain: dataclass fields read directly, the standard library's encoder.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from oc_repl.record import Record


def to_dict(value: Any) -> dict[str, Any]:
    """The event as JSON-ready data. Nested events and items become dicts; every other value (a request's history
    included) is shared, not copied: dataclasses.asdict would deep-copy the whole conversation once per turn."""
    return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}


def _plain(value: Any) -> Any:
    if isinstance(value, Record):
        return to_dict(value)
    if isinstance(value, list):  # lists of items (file changes, assets) or of plain values
        return [_plain(v) for v in value]
    return value


# Line breaks to Python's str.splitlines (and to JavaScript, for U+2028/9) that JSON leaves unescaped: written as \u
# escapes, a transcript stays one event per line for every reader. They can only occur inside JSON strings.
_BREAKS = "\x85\u2028\u2029"
_LINE_BREAKS = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def to_json(value: Any) -> str:
    """One event as one line of JSON (see `json_text`)."""
    return json_text(to_dict(value))


def json_text(data: Any, escape: bool | None = None) -> str:
    """JSON data as one line. Text that cannot be written as UTF-8 (a lone surrogate a model or a sandbox produced)
    is written with JSON's \\u escapes instead, so a transcript line is always valid. `escape` True: all of it in
    escapes; False: none, a UnicodeEncodeError where that cannot be (for a line written a piece at a time)."""
    line = json.dumps(data, ensure_ascii=bool(escape), separators=(",", ":"))
    try:
        if not escape:
            line.encode("utf-8")
    except UnicodeEncodeError:
        if escape is False:
            raise
        line = json.dumps(data, separators=(",", ":"))
    # translate() to longer replacements is slow on a long line (a request of 16k token ids): most have none of them
    return line.translate(_LINE_BREAKS) if any(c in line for c in _BREAKS) else line
