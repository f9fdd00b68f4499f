"""Append-only JSONL transcripts, flushed per event so a crash or Ctrl-C leaves a readable file. Each request is
written against the one before it in its thread (format 2: oc_repl/transcript_delta.py), so a transcript grows with
the work, not with the square of the turns; the readers here give every request whole."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from oc_repl import paths
from oc_repl.event_json import json_text, to_dict
from oc_repl.private import make_dirs, open_private
from oc_repl.transcript_delta import VERSION, Requests, Unrebuildable

# Streamed fragments are noise in a record that already holds every raw reply.
SKIPPED_TYPES = {"item.updated"}


def default_dir() -> Path:
    return paths.state_dir() / "sessions" / time.strftime("%Y/%m/%d")


def default_path(thread_id: str) -> Path:
    return default_dir() / f"{time.strftime('%Y%m%dT%H%M%S')}-{thread_id}.jsonl"


class TranscriptWriter:
    def __init__(self, path: Path, secrets: tuple[str, ...] = ()) -> None:
        make_dirs(path.parent)
        self.path = path
        self._secrets = secrets  # the API key; the environment's secrets are added on the first event
        self._redact: Any = None
        self._file: IO[str] = open_private(path, "a")
        self._requests = Requests()

    def __call__(self, event: Any) -> None:
        if event.type in SKIPPED_TYPES or self._file.closed:
            return
        if self._redact is None:
            from oc_repl.redact import redactor

            self._redact = redactor(*self._secrets)
        data = to_dict(event)
        if event.type == "thread.started":
            self._requests.start()
            data["transcript"] = VERSION
        elif event.type == "request.sent":
            data = self._requests.write(data, self._redact.json_line)
        self._file.write(self._redact.json_line(json_text(data)) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def numbered_events(path: Path, start: int = 0) -> Iterator[tuple[int, Any]]:
    """(line number, event) for each line of a transcript (from line `start`, a thread's `thread.started`); the event
    of a line that is not one is an oc_repl.safejson.BadInput naming the file and the line (`cut` for an unterminated
    last line)."""
    from oc_repl.event_read import adapter
    from oc_repl.safejson import BadInput, lines

    requests = Requests()
    for number, data in lines(path, start):
        if isinstance(data, BadInput):
            yield number, data
            continue
        kind = data.get("type") if isinstance(data, dict) else None
        try:
            if kind == "thread.started":
                requests.start()
            elif kind == "request.sent":
                data = requests.read(data)
            yield number, adapter().validate_python(data)
        except Unrebuildable as exc:
            yield number, BadInput(path, f"not an oc-repl event ({exc})", number)
        except ValueError as exc:  # pydantic's ValidationError: the first problem, and where it is
            yield number, BadInput(path, _first_error(exc), number)


def _first_error(exc: Any) -> str:
    errors = exc.errors(include_input=False) if hasattr(exc, "errors") else []
    if not errors:
        return "not an oc-repl event"
    where = ".".join(str(part) for part in errors[0].get("loc", ()))
    return f"not an oc-repl event ({where}: {errors[0].get('msg', 'invalid')})"


def read_events(path: Path, on_bad_line: Callable[[int, str], None] | None = None) -> Iterator[Any]:
    """Events of a transcript. A last line cut by a crash is skipped; any other bad line raises
    oc_repl.safejson.BadInput (a ValueError), or, with `on_bad_line`, is reported there (line number, reason) and
    skipped, as a viewer wants."""
    from oc_repl.safejson import BadInput

    for number, event in numbered_events(path):
        if not isinstance(event, BadInput):
            yield event
        elif on_bad_line is not None:
            on_bad_line(number, event.why)
        elif not event.cut:
            raise event
