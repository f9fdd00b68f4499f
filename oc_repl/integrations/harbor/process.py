"""A command running detached in a Harbor environment (shell.py's scripts), looked at by later execs: each
look is one call, which waits in the environment for the end and brings the output so far with it."""

from __future__ import annotations

import contextlib
import threading
import time

from oc_repl.errors import SandboxError, SandboxLost
from oc_repl.integrations.harbor import shell as sh
from oc_repl.sandbox.answers import token
from oc_repl.sandbox.capture import gap_marker
from oc_repl.sandbox.docker_exec import kill_recorded

# Seconds one look may wait in the environment for a command's end: a call is costly, so a wait is one call (an exec
# of 20 s, camel's default, or a terminal's wait of up to a minute); a command that runs longer is looked at again.
WINDOW = 600.0
READ_GAP = 0.2  # a running process's output is fetched at most this often: every fetch is an exec


class HarborProcess:
    """A command running detached in the environment, looked at by later execs."""

    def __init__(self, box: sh.Scripts, path: str, tty: bool, report: sh.Report) -> None:
        self._box, self.path, self.tty = box, path, tty
        self._lock = threading.RLock()
        self._offset = 0
        self._pending = b""  # output taken by the look that saw the end
        self._ended = False
        self._exit_code: int | None = None
        self._dropped = 0
        self._last_read = 0.0
        self._pending += self._take(report)
        self._looked_at = time.monotonic()

    def _take(self, report: sh.Report) -> bytes:
        """Apply a look's report; the output it carried."""
        data = b""
        if report.head is not None:
            data = report.head
            if report.tail is not None:
                gap = report.size - self._offset - len(report.head) - len(report.tail)
                self._dropped += gap
                data += gap_marker(gap) + report.tail
            self._offset = report.size
        if report.state != "running":
            self._ended = True
            self._exit_code = report.exit_code if report.state == "done" else None
        return data

    def _look(self, wait: float) -> bytes:
        """One look, which takes the output so far with it: a read right after it needs no call of its own."""
        marker = token()
        script = sh.look(self.path, marker, wait=wait, offset=self._offset, half=self._box.half, consume=True)
        found = self._take(self._box.report(script, marker, wait))
        self._last_read = self._looked_at = time.monotonic()
        return found

    def wait(self, timeout: float) -> bool:
        deadline = time.monotonic() + max(0.0, timeout)
        with self._lock:
            # a look made just now (the start's, which may have waited for the end in the same call) answers a wait
            # whose time is up: its time was counted in the environment, from the command's start
            looked = time.monotonic() - self._looked_at < READ_GAP
            while not self._ended:
                left = deadline - time.monotonic()
                if looked and left <= 0:
                    return False
                self._pending += self._look(min(max(left, 0.0), WINDOW))
                looked = True
        return True

    def alive(self) -> bool:
        return not self.wait(0)

    def read_available(self) -> bytes:
        with self._lock:
            if not self._ended and time.monotonic() - self._last_read >= READ_GAP:
                self._pending += self._look(0.0)
            data, self._pending = self._pending, b""
        return data

    def settle(self, timeout: float) -> bool:
        """Each look brings what the command printed by then: nothing is in flight between looks."""
        return True

    def write(self, data: bytes) -> None:
        if not self.tty:
            raise SandboxError("this process takes no input (it was started without a terminal)")
        for start in range(0, len(data), sh.INLINE_COMMAND):
            marker = token()
            text = self._box.run_script(sh.write(self.path, marker, data[start : start + sh.INLINE_COMMAND]))
            if sh.status(text, marker) != ["sent"]:
                raise SandboxError("cannot write to the process: it has ended")

    def kill(self) -> None:
        """SIGKILL the process group and session the command leads in the environment; its output is kept."""
        with self._lock:
            if self._ended:
                return
            marker = token()
            group = kill_recorded('"$f.pid"')
            script = sh.kill(self.path, marker, offset=self._offset, half=self._box.half, kill_group=group)
            with contextlib.suppress(SandboxLost):  # the environment is gone, and the process with it
                self._pending += self._take(self._box.report(script, marker))
            self._ended = True

    @property
    def exit_code(self) -> int | None:
        return self._exit_code

    @property
    def dropped(self) -> int:
        return self._dropped
