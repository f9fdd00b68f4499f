"""Output capture shared by every sandbox driver: a capped buffer, and what drains a process into it (one pump for every
reader of an fd, a thread for any other)."""

from __future__ import annotations

import fcntl
import os
import selectors
import struct
import termios
import threading
import time
from collections.abc import Callable
from contextlib import suppress


def gap_marker(dropped: int) -> bytes:
    """What stands in for output dropped from the middle of a read, so a reader sees that something is missing."""
    return f"\n[... {dropped} bytes of output dropped ...]\n".encode()


class CappedBuffer:
    """Unread output, never more than about `limit` bytes of it.

    The first limit/2 and the last limit/2 bytes written since the previous read are kept; the middle is dropped and
    counted. Each `read()` takes everything kept so far, so session viewers get "what is new since the last look",
    and a viewer that falls behind loses the middle of what it missed instead of growing the client's memory.
    """

    def __init__(self, limit: int) -> None:
        if limit < 2:
            raise ValueError("the output limit must be at least 2 bytes")
        self.limit = limit
        self._half = limit // 2
        self._head = bytearray()
        self._tail = bytearray()
        self._gap = 0  # dropped since the last read
        self.dropped = 0  # dropped over the buffer's life
        self.written = 0
        self._lock = threading.Lock()

    def write(self, data: bytes) -> None:
        with self._lock:
            self.written += len(data)
            room = self._half - len(self._head)
            if room > 0:  # the tail is empty until the head is full
                self._head += data[:room]
                data = data[room:]
            if not data:
                return
            if len(data) >= self._half:
                drop = len(self._tail) + len(data) - self._half
                self._tail = bytearray(data[-self._half :])
            else:
                self._tail += data
                drop = max(0, len(self._tail) - self._half)
                del self._tail[:drop]
            self._gap += drop
            self.dropped += drop

    def read(self) -> bytes:
        """Everything kept since the last read; a dropped middle is replaced by `gap_marker`."""
        with self._lock:
            marker = gap_marker(self._gap) if self._gap else b""
            out = bytes(self._head) + marker + bytes(self._tail)
            self._head.clear()
            self._tail.clear()
            self._gap = 0
        return out

    def __len__(self) -> int:
        with self._lock:
            return len(self._head) + len(self._tail)


class OutputReader:
    """Drains a process's output into a CappedBuffer.

    Someone must always be reading, or a chatty child blocks forever on a full pipe; `read` is the driver's way of
    getting the next chunk (an fd, a socket) and returns b"" at end of file. Given the `fd` it reads, the reader is
    one of the pump's (below), and can also say when all the process wrote so far is in the buffer (`settle`);
    without one it has a daemon thread of its own.
    """

    def __init__(
        self, read: Callable[[], bytes], buffer: CappedBuffer, name: str = "oc-repl-output", fd: int | None = None
    ) -> None:
        self.buffer = buffer
        self._read = read
        self.fd = fd
        self._ended = threading.Event()
        # Set before bytes leave the fd and cleared once they are in the buffer: bytes written so far are always
        # either still in the fd (FIONREAD counts them) or held by a busy reader.
        self._busy = False
        if fd is None:
            threading.Thread(target=self._run, name=name, daemon=True).start()
        else:
            _pump().add(self)

    def _run(self) -> None:
        while self.take():
            pass
        self.end()

    def take(self) -> bool:
        """One chunk into the buffer; False at the end of the output."""
        try:
            self._busy = True
            chunk = self._read()
        except (OSError, ValueError):  # a pty answers EIO once the last process holding it has gone: its end
            chunk = b""
        if chunk:
            self.buffer.write(chunk)
        self._busy = False
        return bool(chunk)

    def end(self) -> None:
        """Nothing more comes (and nobody reads the fd any more: its owner may close it)."""
        self._ended.set()

    def settle(self, timeout: float) -> bool:
        """Whether everything written so far to the fd is in the buffer, waiting up to `timeout` for it (0: a look):
        learning otherwise that a process is quiet (its shell asleep) does not mean its last bytes were read yet."""
        if self.fd is None:
            return True
        deadline = time.monotonic() + timeout
        while not self.done:
            if not self._busy and _pending(self.fd) == 0:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.001)
        return True

    @property
    def done(self) -> bool:
        return self._ended.is_set()

    def join(self, timeout: float | None = None) -> bool:
        return self._ended.wait(timeout)


class _Pump:
    """One thread that drains every reader of an fd, as each becomes readable: a command's start needs no thread
    of its own (a thread's start waits for the thread to run, a good part of a `true`'s whole cost on a busy
    client). A reader leaves the pump's selector at its end, before it is `done`, so its fd may then be closed."""

    def __init__(self) -> None:
        self._selector = selectors.DefaultSelector()
        self._wake_read, self._wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._selector.register(self._wake_read, selectors.EVENT_READ)
        self._lock = threading.Lock()
        self._arrived: list[OutputReader] = []
        threading.Thread(target=self._run, name="oc-repl-output", daemon=True).start()

    def add(self, reader: OutputReader) -> None:
        with self._lock:
            self._arrived.append(reader)
        os.write(self._wake_write, b"\0")

    def _run(self) -> None:
        while True:
            for key, _ in self._selector.select():
                reader = key.data
                if reader is None:
                    self._welcome()
                    continue
                try:
                    more = reader.take()
                except Exception:  # one reader's failure is its own end, never the pump's (every reader's)
                    more = False
                if not more:
                    self._selector.unregister(key.fd)
                    reader.end()

    def _welcome(self) -> None:
        with suppress(BlockingIOError):
            while os.read(self._wake_read, 4096):
                pass
        with self._lock:
            arrived, self._arrived = self._arrived, []
        for reader in arrived:
            try:
                self._selector.register(reader.fd, selectors.EVENT_READ, reader)
            except (OSError, ValueError, KeyError):  # not an fd that can be waited on: nothing can be read from it
                reader.end()


_PUMP: _Pump | None = None
_PUMP_LOCK = threading.Lock()


def _pump() -> _Pump:
    global _PUMP
    with _PUMP_LOCK:
        if _PUMP is None:
            _PUMP = _Pump()
        return _PUMP


def _pending(fd: int) -> int:
    """Bytes the fd holds unread (a pipe, a pty's master side, a socket)."""
    try:
        return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
    except OSError:
        return 0
