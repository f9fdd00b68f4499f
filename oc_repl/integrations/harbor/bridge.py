"""The bridge between oc-repl's worker thread and the asyncio loop that owns a Harbor environment."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from oc_repl.errors import Deadline, SandboxLost

T = TypeVar("T")


class LoopBridge:
    """Runs an environment's coroutines on the loop that owns it, for code on another thread.

    `stop` asks the worker to stop: the call it waits on (if any) is cancelled, and the next call or `checkpoint`
    raises Deadline, once, which oc-repl handles as its own agent timeout (the running command is killed, the turn
    fails, sessions and sandbox are closed, with calls that now go through). With `worker` set, only that thread is
    stopped so: helper threads of its own (a pty terminal's reader, camel's 20 s wall in exact mode) finish their
    short calls and leave the stop to it. `abandon` refuses every call from then on.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.worker: threading.Thread | None = None
        self._lock = threading.Lock()
        self._pending: dict[concurrent.futures.Future[Any], threading.Thread] = {}
        self._reason = ""
        self._delivered = False
        self._abandoned = False

    def call(self, make: Callable[[], Coroutine[Any, Any, T]]) -> T:
        self.checkpoint()
        if self._abandoned:
            raise SandboxLost("the agent was stopped and the environment is no longer in its hands")
        coroutine = make()
        try:
            future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        except RuntimeError as exc:  # the loop has closed
            coroutine.close()
            raise SandboxLost(f"the environment's event loop is gone: {exc}") from exc
        with self._lock:
            self._pending[future] = threading.current_thread()
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            self.checkpoint()
            raise SandboxLost("the environment call was cancelled") from None
        finally:
            with self._lock:
                self._pending.pop(future, None)

    def _stoppable(self, thread: threading.Thread) -> bool:
        return self.worker is None or thread is self.worker

    def checkpoint(self) -> None:
        """Raise Deadline if a stop was asked for and has not been raised yet (in the worker)."""
        with self._lock:
            if not self._reason or self._delivered or not self._stoppable(threading.current_thread()):
                return
            self._delivered = True
        raise Deadline(self._reason)

    def stop(self, reason: str) -> None:
        self._cancel(reason, everyone=False)

    def abandon(self) -> None:
        self._abandoned = True
        self._cancel("the agent was stopped", everyone=True)

    def _cancel(self, reason: str, everyone: bool) -> None:
        with self._lock:
            self._reason = self._reason or reason
            pending = [future for future, thread in self._pending.items() if everyone or self._stoppable(thread)]
        for future in pending:
            future.cancel()
