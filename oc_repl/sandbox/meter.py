"""What a sandbox's calls cost: how many were made and the seconds spent in them, and what a trivial one takes.

Each driver counts its own calls where they happen: Harbor's sandbox each environment call (an exec, an upload), the
others each command and file operation through the Sandbox seam (`metered`: an exec's time includes its command's, a
spawn's only the start; a call made inside another is part of it). The latency is the least time of a few trivial
calls, measured when first asked; protocols choose how to wait on the sandbox from it (docs/architecture.md).
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

LATENCY_SAMPLES = 3  # the least of these: one slow call on a loaded machine does not decide
F = TypeVar("F", bound=Callable[..., Any])


class CallMeter:
    def __init__(self) -> None:
        self.calls = 0
        self.seconds = 0.0
        self._lock = threading.Lock()
        self._inside = threading.local()
        self._latency: float | None = None

    @contextmanager
    def timed(self) -> Iterator[None]:
        if getattr(self._inside, "depth", 0):
            yield
            return
        self._inside.depth = 1
        started = time.monotonic()
        try:
            yield
        finally:
            self._inside.depth = 0
            elapsed = time.monotonic() - started
            with self._lock:
                self.calls += 1
                self.seconds += elapsed

    def totals(self) -> tuple[int, float]:
        with self._lock:
            return self.calls, self.seconds

    def known_latency(self, seconds: float) -> None:
        """A trivial call's time, measured by the driver itself (Harbor's setup exec)."""
        self._latency = seconds

    def latency(self, trivial: Callable[[], object]) -> float:
        if self._latency is None:
            times = []
            for _ in range(LATENCY_SAMPLES):
                started = time.monotonic()
                trivial()
                times.append(time.monotonic() - started)
            self._latency = min(times)
        return self._latency


def metered(method: F) -> F:
    """A Sandbox method that counts as one call on its driver's `meter`."""

    @functools.wraps(method)
    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        with self.meter.timed():
            return method(self, *args, **kwargs)

    return counted  # type: ignore[return-value]


class Metered:
    """`call_latency` and `calls` of the Sandbox seam, for a driver that keeps a `meter` and counts with `metered`."""

    meter: CallMeter

    def call_latency(self) -> float:
        return self.meter.latency(lambda: self.exec(":", timeout=30))  # type: ignore[attr-defined]  # a Sandbox's

    def calls(self) -> tuple[int, float]:
        return self.meter.totals()
