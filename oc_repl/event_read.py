"""Events read back: pydantic's reader of every event type (transcripts, `show`, the Python API) and the JSON Schema
of the events (events.schema.json). Writing an event needs neither (oc_repl/event_json.py)."""

from __future__ import annotations

import json
from typing import Annotated, Any

from oc_repl.events import SCHEMA, Event

_adapter: Any = None


def adapter() -> Any:
    """pydantic's reader for every event, built on first use (reading transcripts, the JSON Schema)."""
    global _adapter
    if _adapter is None:
        from pydantic import Field, TypeAdapter

        _adapter = TypeAdapter(Annotated[Event, Field(discriminator="type")])
    return _adapter


def parse_event(line: str | bytes) -> Any:
    """An event read back from its JSON line; ValueError when the line is not one.

    The standard library reads the JSON: it accepts the `\ud800`-style escapes `to_json` writes for lone surrogates,
    which pydantic's own JSON parser refuses."""
    return adapter().validate_python(json.loads(line))


def json_schema() -> dict[str, Any]:
    schema = adapter().json_schema()
    schema["title"] = SCHEMA
    return schema


if __name__ == "__main__":  # python -m oc_repl.event_read > oc_repl/events.schema.json
    print(json.dumps(json_schema(), indent=1, sort_keys=True))
