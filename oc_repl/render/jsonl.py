"""Machine renderer: one JSON event per line on stdout, nothing else."""

from __future__ import annotations

import sys
from typing import Any, TextIO

# The wire traffic is kept in the transcript; repeating the whole history every turn would swamp readers.
SKIPPED_TYPES = {"request.sent", "response.received"}


class JsonlRenderer:
    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout

    def __call__(self, event: Any) -> None:
        if event.type in SKIPPED_TYPES:
            return
        self.out.write(event.model_dump_json() + "\n")
        self.out.flush()
