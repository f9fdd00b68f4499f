"""Append-only JSONL transcripts, flushed per event so a crash or Ctrl-C leaves a readable file."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from oc_repl import paths
from oc_repl.events import to_json

# Streamed fragments are noise in a record that already holds every raw reply.
SKIPPED_TYPES = {"item.updated"}


def default_dir() -> Path:
    return paths.state_dir() / "sessions" / time.strftime("%Y/%m/%d")


def default_path(thread_id: str) -> Path:
    return default_dir() / f"{time.strftime('%Y%m%dT%H%M%S')}-{thread_id}.jsonl"


class TranscriptWriter:
    def __init__(self, path: Path, secrets: tuple[str, ...] = ()) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        # Redaction is a second line of defence: secrets are never put into events in the first place.
        self._secrets = tuple(s for s in secrets if s and len(s) >= 8)
        self._file: IO[str] = path.open("a", encoding="utf-8")

    def __call__(self, event: Any) -> None:
        if event.type in SKIPPED_TYPES or self._file.closed:
            return
        line = to_json(event)
        for secret in self._secrets:
            line = line.replace(secret, "[REDACTED]")
        self._file.write(line + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def read_events(path: Path, on_bad_line: Callable[[int, str], None] | None = None) -> Iterator[Any]:
    """Events of a transcript. A last line cut by a crash is skipped; any other bad line raises, or, with
    `on_bad_line`, is reported there (line number, reason) and skipped, as a viewer wants."""
    from oc_repl.events import parse_event

    lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            yield parse_event(line)
        except ValueError as exc:
            if on_bad_line is not None:
                on_bad_line(number, str(exc).splitlines()[0])
            elif number == len(lines):  # unterminated final line
                return
            else:
                raise
