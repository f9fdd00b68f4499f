"""Machine renderer: one JSON event per line on stdout, nothing else."""

from __future__ import annotations

import os
import sys
from typing import Any, TextIO

from oc_repl import signals
from oc_repl.event_json import to_json

# The wire traffic is kept in the transcript; repeating the whole history every turn would swamp readers.
SKIPPED_TYPES = {"request.sent", "response.received"}


def silence(stream: TextIO | None = None) -> None:
    """Point `stream` (stdout) at /dev/null once its reader is gone (`| head -n 1`): what is still buffered can never
    be written, and flushing it again at exit would fail the run's exit status."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, (stream or sys.stdout).fileno())
    os.close(devnull)


class JsonlRenderer:
    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout

    def __call__(self, event: Any) -> None:
        if event.type in SKIPPED_TYPES:
            return
        try:
            self.out.write(to_json(event) + "\n")
            self.out.flush()
        except BrokenPipeError:
            if self.out is not sys.stdout:
                raise  # the caller drops this sink; the run goes on
            # The reader of the event stream is gone (`| head -n 1`): nobody reads what the run does any more, so it
            # stops as Ctrl-C stops it (what it started is killed, the transcript is ended, exit 130).
            silence()
            signals.interrupt("the reader of the event stream is gone")
