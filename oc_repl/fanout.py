"""One event stream to many sinks (transcript, display, notices), a failing display dropped instead of the run."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from oc_repl import events as ev


class Fanout:
    """Sends each event to every sink in order. The transcript comes first; a display that fails (a closed pipe, a
    vanished terminal) is dropped with one error event instead of stopping the run or the record of it."""

    def __init__(self, *sinks: Callable[[Any], None]) -> None:
        self.sinks = list(sinks)

    def prepare(self) -> None:
        """Make the sinks made when first needed (`Later`) now, while there is time (a sandbox starting)."""
        for sink in self.sinks:
            if isinstance(sink, Later):
                sink.prepare()

    def __call__(self, event: Any) -> None:
        failed = []
        for sink in self.sinks:
            try:
                sink(event)
            except (OSError, ValueError) as exc:  # ValueError: writing to a closed file
                failed.append((sink, exc))
        for sink, exc in failed:
            self.sinks.remove(sink)
            self(ev.Error(kind="display", message=f"an output stopped taking events and was dropped: {exc!r}"))


class Later:
    """A sink made when it first gets an event, or when `Fanout.prepare` finds time for it: what it imports (a
    display's rich) then loads while a sandbox starts instead of before it."""

    def __init__(self, make: Callable[[], Callable[[Any], None]]) -> None:
        self._make = make
        self._sink: Callable[[Any], None] | None = None

    def prepare(self) -> None:
        if self._sink is None:
            self._sink = self._make()

    def __call__(self, event: Any) -> None:
        self.prepare()
        self._sink(event)  # type: ignore[misc]  # made just above
