"""The client's end of a confined sandbox's first process (local_init.py): requests and their answers over one
socket, the end of each command as it reports it, and the processes it starts for us.

One thread reads the socket for the whole sandbox and hands each answer to the request waiting for it and each end
to the process it belongs to; requests may come from any thread. The first process is inside the sandbox: what it
sends is checked for shape like any input, and a request it does not answer in time is a sandbox error, never a hang.
Messages are marshalled (the first process loads no JSON module, which would cost every sandbox's start): the stream
is made by oc-repl's own code on either side, which no process of the sandbox can trace, signal or replace; the
strings in it that the model chose (command lines, paths) are values, never code.
"""

from __future__ import annotations

import itertools
import marshal
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from typing import Any

from oc_repl.errors import SandboxError, SandboxLost
from oc_repl.sandbox.local_process import CapturedProcess

MAX_MESSAGE = 1 << 20
MAX_FDS = 4
REQUEST_TIMEOUT = 60.0  # a request is answered at once; stopping every process may take a few seconds
KILL_SETTLE = 5.0  # seconds a killed command's end may take to be reported


class _Answer:
    def __init__(self) -> None:
        self.event = threading.Event()
        self.message: dict[str, Any] | None = None
        self.fds: list[int] = []


class Ended:
    """A command's end as the first process reports it: `event` is set once `code` is known."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.code: int | None = None
        self.at = 0.0


class InitChannel:
    def __init__(self, sock: socket.socket, name: str) -> None:
        self._sock = sock
        self._send_lock = threading.Lock()
        self._lock = threading.Lock()
        self._pending: dict[int, _Answer] = {}
        self._ended: dict[int, Ended] = {}
        self._ids = itertools.count(1)
        self._ready = threading.Event()
        self.gone = False
        self._thread = threading.Thread(target=self._read, name=name, daemon=True)
        self._thread.start()

    def wait_ready(self, timeout: float, alive: Callable[[], bool]) -> bool:
        """True once the first process said it is ready; False if it went (or `alive` turned false) first."""
        deadline = time.monotonic() + timeout
        while not self._ready.wait(min(0.05, max(0.0, deadline - time.monotonic()))):
            if time.monotonic() >= deadline or not alive():
                return False
        return not self.gone

    def request(
        self, op: str, fds: Sequence[int] = (), timeout: float = REQUEST_TIMEOUT, **fields: Any
    ) -> tuple[dict[str, Any], list[int]]:
        """The answer to one request and the file descriptors that came with it (the caller's to close)."""
        answer = _Answer()
        with self._lock:
            if self.gone:
                raise SandboxLost("the confined sandbox has ended")
            ident = next(self._ids)
            self._pending[ident] = answer
        data = marshal.dumps({"op": op, "id": ident, **fields})
        try:
            with self._send_lock:
                if fds:
                    socket.send_fds(self._sock, [data], list(fds))
                else:
                    self._sock.send(data)
        except OSError as exc:
            with self._lock:
                self._pending.pop(ident, None)
            raise SandboxLost(f"the confined sandbox has ended: {exc}") from exc
        if not answer.event.wait(timeout):
            with self._lock:
                self._pending.pop(ident, None)
            raise SandboxError(f"the confined sandbox did not answer ({op}) within {timeout:.0f} s")
        message = answer.message
        if message is None:
            raise SandboxLost("the confined sandbox has ended")
        if "error" in message:
            for fd in answer.fds:
                os.close(fd)
            raise SandboxError(str(message["error"]))
        return message, answer.fds

    def ended(self, pid: int) -> Ended:
        with self._lock:
            return self._ended.setdefault(pid, Ended())

    def forget(self, pid: int) -> None:
        with self._lock:
            self._ended.pop(pid, None)

    def _read(self) -> None:
        while True:
            try:
                data, fds, _flags, _addr = socket.recv_fds(self._sock, MAX_MESSAGE, MAX_FDS)
                for fd in fds:
                    os.set_inheritable(fd, False)
            except OSError:
                data, fds = b"", []
            if not data:
                break
            try:
                message = marshal.loads(data)
                op, ident = message.get("op"), message.get("id")
            except (ValueError, EOFError, TypeError, AttributeError):
                message, op, ident = None, None, None
            if op == "ready":
                self._ready.set()
            elif op == "exit" and isinstance(message.get("pid"), int) and isinstance(message.get("code"), int):
                self._end_of(message["pid"], message["code"])
            else:
                with self._lock:
                    answer = self._pending.pop(ident, None) if isinstance(ident, int) else None
                if answer is None:
                    for fd in fds:
                        os.close(fd)
                    continue
                answer.message, answer.fds = message, fds
                answer.event.set()
        self._gone()

    def _end_of(self, pid: int, code: int | None) -> None:
        ended = self.ended(pid)
        if not ended.event.is_set():
            ended.code, ended.at = code, time.monotonic()
            ended.event.set()

    def _gone(self) -> None:
        """The first process is gone, and every process of the sandbox with it."""
        with self._lock:
            self.gone = True
            pending, self._pending = list(self._pending.values()), {}
            ended = list(self._ended)
        self._ready.set()
        for answer in pending:
            answer.event.set()
        for pid in ended:
            self._end_of(pid, -9)

    def close(self) -> None:
        with suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(5)
        self._sock.close()


class ConfinedProcess(CapturedProcess):
    """A command the sandbox's first process started for us: its output comes through a pipe (or the master side
    of a terminal) handed over at the start, its end through the channel."""

    def __init__(
        self,
        channel: InitChannel,
        argv: list[bytes | str],
        *,
        tty: bool,
        cwd: str,
        env: dict[str, str],
        limit: int,
        pass_fds: tuple[int, ...] = (),
        sealed: bool = False,
    ) -> None:
        """`sealed`: a verifier, holding the sandbox's seal (local_init.py)."""
        self._channel = channel
        self._released = False
        fields = {"argv": [os.fsdecode(arg) for arg in argv], "env": env, "cwd": cwd, "tty": tty, "sealed": sealed}
        if tty:
            answer, fds = channel.request("spawn", pass_fds, **fields)
            read_fd = fds[0]
        else:
            read_fd, write_fd = os.pipe()
            try:
                answer, _ = channel.request("spawn", (write_fd, *pass_fds), **fields)
            except BaseException:
                os.close(read_fd)
                raise
            finally:
                os.close(write_fd)
        self._ended = channel.ended(answer["pid"])
        super().__init__(answer["pid"], read_fd, tty, limit)

    def _poll_exit(self, timeout: float) -> bool:
        if self._returncode is not None:
            return True
        if not self._ended.event.wait(max(0.0, timeout)):
            return False
        self._returncode, self._exited_at = self._ended.code, self._ended.at
        return True

    def kill(self) -> None:
        """SIGKILL everything the command started (its session and its groups), then let go of it."""
        with self._lock:
            if self._released:
                return
        with suppress(SandboxError):  # a sandbox that has ended has killed it already
            self._channel.request("kill", pid=self.pid)
        self._poll_exit(KILL_SETTLE)
        self.release()

    def release(self) -> None:
        with self._lock:
            if not self._released:
                self._released = True
                self._channel.forget(self.pid)
        self._close_output()
