"""Signals: Ctrl-C, SIGTERM and SIGHUP stop a run the same way, and cleanup always runs to its end.

Python turns SIGINT into KeyboardInterrupt in the main thread; SIGTERM and SIGHUP become `Terminated` (a
KeyboardInterrupt too, so everything that stops a command on Ctrl-C stops it here) and an agent deadline becomes
`Deadline`. A SIGINT that was ignored when oc-repl started (a job started in the background) stays ignored.
Only the main thread can handle signals; elsewhere these helpers do nothing.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from oc_repl.errors import Deadline, Terminated

STOPS = (signal.SIGTERM, signal.SIGHUP)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def handled(signums: Iterable[int], handler: Any) -> Iterator[None]:
    """`handler` for each of `signums` while inside, the previous handlers afterwards; nothing outside the main
    thread (only it can handle signals)."""
    if not _main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, handler) for sig in signums}
    try:
        yield
    finally:
        for sig, before in previous.items():
            signal.signal(sig, before)


@contextmanager
def stoppable() -> Iterator[None]:
    """SIGTERM and SIGHUP raise Terminated while inside."""

    def terminate(signum: int, frame: Any) -> None:
        raise Terminated(signal.Signals(signum).name)

    with handled(STOPS, terminate):
        yield


@contextmanager
def deadline(seconds: float | None) -> Iterator[None]:
    """Deadline is raised once `seconds` have passed inside (None or 0: no deadline)."""
    if not seconds or not _main_thread():
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise Deadline(f"{seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class Deferred:
    """The signals that arrived while cleanup ran (see `deferred`)."""

    def __init__(self) -> None:
        self.signals: list[int] = []

    @property
    def interrupted(self) -> bool:
        return bool(self.signals)

    @property
    def terminated(self) -> bool:
        return any(sig in STOPS for sig in self.signals)


_cleanups: list[Deferred] = []  # the cleanups running now, innermost last (main thread only)


@contextmanager
def deferred() -> Iterator[Deferred]:
    """Cleanup that must run to its end: a second Ctrl-C or a SIGTERM meanwhile is only remembered."""
    seen = Deferred()
    if not _main_thread():
        yield seen
        return
    watched = [sig for sig in (signal.SIGINT, *STOPS, signal.SIGALRM) if signal.getsignal(sig) is not signal.SIG_IGN]
    previous = {sig: signal.signal(sig, lambda signum, frame: seen.signals.append(signum)) for sig in watched}
    _cleanups.append(seen)
    try:
        yield seen
    finally:
        _cleanups.remove(seen)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def interrupt(why: str) -> None:
    """Stop as Ctrl-C stops a run, for a reason of oc-repl's own (the reader of its output is gone): also where SIGINT
    is ignored, as in a job started in the background, whose key this is not. From a thread other than the main one
    only a SIGINT that Python handles can do it."""
    handled = callable(signal.getsignal(signal.SIGINT))
    if handled or not _main_thread():
        signal.raise_signal(signal.SIGINT)
    elif _cleanups:
        _cleanups[-1].signals.append(signal.SIGINT)
    else:
        raise KeyboardInterrupt(why)
