"""A process of the local sandbox: `bash -c` in a new session, its output drained into a capped buffer.

Every command is `bash -c` in a new session (its own process group), so a timeout or a close can kill the whole tree
it started. A process is left unreaped (a zombie) after it exits until we are done with it: while it exists, its pid,
process group id and session id cannot be handed to anyone else, so signalling them can never hit a stranger.
"""

from __future__ import annotations

import fcntl
import os
import select
import signal
import struct
import subprocess
import tempfile
import termios
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from oc_repl.errors import SandboxError
from oc_repl.sandbox.capture import CappedBuffer, OutputReader
from oc_repl.text import command_bytes

# A background child (`server &`) inherits the output pipe and may hold it open long after the command itself has
# ended; waiting for its end of file would hang the caller. Output counts as drained once the reader reaches end of
# file, or this long after the exit, whichever comes first. The reader keeps collecting afterwards.
EXIT_GRACE = 0.2
_CHUNK = 1 << 16
# One argv string holds at most 128 KiB (the kernel's MAX_ARG_STRLEN). A command under this size runs exactly as
# `bash -c COMMAND`; a longer one is read from an unlinked file and run by `eval`, which words syntax errors without
# bash's `-c: line N:` but runs the command the same way.
LONG_COMMAND = 64 * 1024


@contextmanager
def bash_argv(command: str, first_fd: int | None = None) -> Iterator[tuple[list[bytes], tuple[int, ...]]]:
    """The argv running `command` and the file descriptors it needs, for as long as the context lasts. `first_fd`:
    the number the command will find the first of them under (the same number as here unless given)."""
    data = command_bytes(command)
    if len(data) < LONG_COMMAND:
        yield [b"bash", b"-c", data], ()
        return
    with tempfile.TemporaryFile() as script:
        script.write(data)
        script.flush()
        script.seek(0)
        fd = script.fileno()
        seen = fd if first_fd is None else first_fd
        yield [b"bash", b"-c", f'eval "$(cat <&{seen})" {seen}<&-'.encode()], (fd,)


def _take_terminal() -> None:
    """Runs in the child after setsid: make the pty on stdin its controlling terminal, so ^C and job control work.
    ^C and ^\\ get their default action back too: a shell makes a job it starts in the background (`oc-repl ... &`,
    nohup) ignore them, and exec passes that on to the model's commands, which would then ignore the keys. Commands
    without a terminal keep what they inherit: no key reaches them, and a preexec_fn for each of them would widen the
    window in which a Ctrl-C or SIGTERM is lost (one that lands while Python runs its at-fork hooks is dropped)."""
    for sig in (signal.SIGINT, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def scan_proc() -> list[tuple[int, int, int]] | None:
    """(pid, process group, session) of every process that is not a zombie; None where there is no /proc."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    found = []
    for name in names:
        if not name.isdigit():
            continue
        try:
            stat = Path("/proc", name, "stat").read_bytes().decode(errors="replace")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()  # the command name in parentheses may hold spaces
        if len(fields) > 3 and fields[0] != "Z":
            found.append((int(name), int(fields[2]), int(fields[3])))
    return found


def _kill_tree(leader: int) -> None:
    """SIGKILL the process group and the session `leader` started (callers hold it unreaped, see the module doc)."""
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(leader, signal.SIGKILL)
    # An interactive shell puts each job in a process group of its own; they all stay in the session.
    for pid, group, session in scan_proc() or []:
        if leader in (group, session):
            with suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


class CapturedProcess:
    """A process whose output (a pipe, or the master side of its terminal) is drained into a capped buffer. How it
    was started, how its end is learnt and how it is killed belong to the subclass (`_poll_exit`, `kill`, `release`).
    """

    def __init__(self, pid: int, read_fd: int, tty: bool, limit: int) -> None:
        self.pid = pid
        self.tty = tty
        self._buffer = CappedBuffer(limit)
        self._returncode: int | None = None
        self._exited_at = 0.0
        self._fd: int | None = read_fd
        self._input_fd = read_fd if tty else None
        self._lock = threading.Lock()
        self._reader = OutputReader(
            lambda: os.read(read_fd, _CHUNK), self._buffer, name=f"oc-repl-output-{pid}", fd=read_fd
        )

    def _poll_exit(self, timeout: float) -> bool:
        """True once the process has exited (setting `_returncode` and `_exited_at`)."""
        raise NotImplementedError

    def wait(self, timeout: float) -> bool:
        """True once the process has exited and its output is drained (see EXIT_GRACE)."""
        deadline = time.monotonic() + max(0.0, timeout)
        if not self._poll_exit(max(0.0, timeout)):
            return False
        grace_end = self._exited_at + EXIT_GRACE
        self._reader.join(max(0.0, min(deadline, grace_end) - time.monotonic()))
        return self._reader.done or time.monotonic() >= grace_end

    def alive(self) -> bool:
        return not self._poll_exit(0)

    def read_available(self) -> bytes:
        return self._buffer.read()

    def settle(self, timeout: float) -> bool:
        return self._reader.settle(timeout)

    def write(self, data: bytes) -> None:
        if self._input_fd is None:
            raise SandboxError("this process takes no input (it was started without a terminal)")
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._input_fd, view) :]
        except OSError as exc:
            raise SandboxError(f"cannot write to process {self.pid}: {exc}") from exc

    def finished(self) -> bool:
        """Exited, and nothing holds its output open any more."""
        return self._poll_exit(0) and self._reader.done

    def _close_output(self) -> None:
        # Closing the fd under a reader still blocked in read() would let a reused fd number be read from.
        if self._reader.join(0.5) and self._fd is not None:
            os.close(self._fd)
            self._fd = self._input_fd = None

    @property
    def exit_code(self) -> int | None:
        self._poll_exit(0)
        return self._returncode

    @property
    def dropped(self) -> int:
        return self._buffer.dropped


class LocalProcess(CapturedProcess):
    """A process on this machine, unconfined (`argv` from `bash_argv`), started by this process itself: its end is
    learnt from the kernel, and it is left unreaped until released (see the module doc)."""

    def __init__(
        self,
        argv: list[bytes | str],
        *,
        tty: bool,
        cwd: str,
        env: dict[str, str],
        limit: int,
        pass_fds: tuple[int, ...] = (),
    ) -> None:
        self._reaped = False
        if tty:
            try:
                read_fd, child_fd = os.openpty()
            except OSError as exc:
                raise SandboxError(f"cannot open a terminal for a command in {cwd}: {exc}") from exc
            fcntl.ioctl(child_fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
            streams = {"stdin": child_fd, "stdout": child_fd, "stderr": child_fd, "preexec_fn": _take_terminal}
        else:
            read_fd, child_fd = os.pipe()
            # no input at all: a command waiting for stdin sees end of file instead of hanging until its timeout
            streams = {"stdin": subprocess.DEVNULL, "stdout": child_fd, "stderr": subprocess.STDOUT}
        try:
            self._popen = subprocess.Popen(argv, cwd=cwd, env=env, start_new_session=True, pass_fds=pass_fds, **streams)
        except (OSError, ValueError) as exc:  # ValueError: a NUL byte, or text that has no bytes
            os.close(read_fd)
            raise SandboxError(f"cannot start a command in {cwd}: {exc}") from exc
        finally:
            os.close(child_fd)
        self._pidfd = os.pidfd_open(self._popen.pid) if hasattr(os, "pidfd_open") else None
        super().__init__(self._popen.pid, read_fd, tty, limit)

    def _poll_exit(self, timeout: float) -> bool:
        """True once the process has exited; it is not reaped here (see the module doc)."""
        if self._returncode is not None:
            return True
        deadline = time.monotonic() + timeout
        while True:
            try:
                info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:  # reaped already
                info = None
                self._returncode = self._popen.returncode if self._popen.returncode is not None else -1
            if info is not None:
                self._returncode = info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
            if self._returncode is not None:
                self._exited_at = time.monotonic()
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if self._pidfd is not None:
                select.select([self._pidfd], [], [], remaining)  # readable as soon as the process exits
            else:
                time.sleep(min(remaining, 0.02))

    def kill(self) -> None:
        """SIGKILL everything the command started, then let go of the process."""
        with self._lock:
            if self._reaped:
                return
            _kill_tree(self.pid)
        self.release()

    def release(self) -> None:
        """Reap the process; from here on its ids are no longer ours to signal."""
        with self._lock:
            if not self._reaped:
                with suppress(subprocess.TimeoutExpired):
                    self._popen.wait(timeout=5)
                self._poll_exit(0)
                self._reaped = True
                if self._pidfd is not None:
                    os.close(self._pidfd)
                    self._pidfd = None
        self._close_output()
