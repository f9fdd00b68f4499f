"""Output capture shared by every sandbox driver: a capped buffer and the thread that drains a process into it."""

from __future__ import annotations

import fcntl
import select
import struct
import termios
import threading
import time
from collections.abc import Callable


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
    """Drains a process's output into a CappedBuffer on a daemon thread.

    Someone must always be reading, or a chatty child blocks forever on a full pipe; `read` is the driver's way of
    getting the next chunk (an fd, a socket) and returns b"" at end of file. Given the `fd` it reads, the reader can
    also say when all the process wrote so far is in the buffer (`settle`).
    """

    def __init__(
        self, read: Callable[[], bytes], buffer: CappedBuffer, name: str = "oc-repl-output", fd: int | None = None
    ) -> None:
        self.buffer = buffer
        self._read = read
        self._fd = fd
        # Set before bytes leave the fd and cleared once they are in the buffer: bytes written so far are always
        # either still in the fd (FIONREAD counts them) or held by a busy reader.
        self._busy = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                if self._fd is not None:
                    select.select([self._fd], [], [])
                self._busy = True
                chunk = self._read()
            except (OSError, ValueError):  # a pty answers EIO once the last process holding it has gone: its end
                return
            if not chunk:
                return
            self.buffer.write(chunk)
            self._busy = False

    def settle(self, timeout: float) -> bool:
        """Whether everything written so far to the fd is in the buffer, waiting up to `timeout` for it (0: a look):
        learning otherwise that a process is quiet (its shell asleep) does not mean its last bytes were read yet."""
        if self._fd is None:
            return True
        deadline = time.monotonic() + timeout
        while not self.done:
            if not self._busy and _pending(self._fd) == 0:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.001)
        return True

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def join(self, timeout: float | None = None) -> bool:
        self._thread.join(timeout)
        return self.done


def _pending(fd: int) -> int:
    """Bytes the fd holds unread (a pipe, a pty's master side, a socket)."""
    try:
        return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
    except OSError:
        return 0
