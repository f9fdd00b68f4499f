"""The local driver: commands run on this machine, under a directory of the user's choosing.

Every command is `bash -c` in a new session (its own process group), so a timeout or a close can kill the whole tree
it started. A process is left unreaped (a zombie) after it exits until we are done with it: while it exists, its pid,
process group id and session id cannot be handed to anyone else, so signalling them can never hit a stranger.
"""

from __future__ import annotations

import fcntl
import os
import re
import select
import shutil
import signal
import struct
import subprocess
import termios
import threading
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

from oc_repl.errors import SandboxError
from oc_repl.sandbox.capture import CappedBuffer, OutputReader
from oc_repl.types import ExecResult

# A background child (`server &`) inherits the output pipe and may hold it open long after the command itself has
# ended; waiting for its end of file would hang the caller. Output counts as drained once the reader reaches end of
# file, or this long after the exit, whichever comes first. The reader keeps collecting afterwards.
EXIT_GRACE = 0.2
_CHUNK = 1 << 16
# Letting go of finished processes means a scan of /proc (milliseconds); doing it once per this many commands keeps
# it off the per-call path while bounding the zombies and file descriptors we hold.
PRUNE_AT = 32


# The model's commands inherit this process's environment minus its secrets: the server's API key (and the like)
# would otherwise be one `env` away, then in the model's history and on the user's screen.
_SECRET_NAMES = re.compile(r"(^OPENAI_|^OC_REPL_|_API_KEY$|_TOKEN$|_SECRET$|_PASSWORD$|^AWS_SECRET)", re.I)


def host_environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not _SECRET_NAMES.search(k)}


def _take_terminal() -> None:
    """Runs in the child after setsid: make the pty on stdin its controlling terminal, so ^C and job control work."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def _scan_proc() -> list[tuple[int, int, int]] | None:
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
    for pid, group, session in _scan_proc() or []:
        if leader in (group, session):
            with suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


class LocalProcess:
    """A `bash -c` process on this machine, with its output drained into a capped buffer."""

    def __init__(self, command: str, *, tty: bool, cwd: Path, env: dict[str, str], limit: int) -> None:
        self.tty = tty
        self._buffer = CappedBuffer(limit)
        self._returncode: int | None = None
        self._exited_at = 0.0
        self._reaped = False
        self._lock = threading.Lock()
        argv = ["bash", "-c", command]
        if tty:
            read_fd, child_fd = os.openpty()
            fcntl.ioctl(child_fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
            streams = {"stdin": child_fd, "stdout": child_fd, "stderr": child_fd, "preexec_fn": _take_terminal}
        else:
            read_fd, child_fd = os.pipe()
            # no input at all: a command waiting for stdin sees end of file instead of hanging until its timeout
            streams = {"stdin": subprocess.DEVNULL, "stdout": child_fd, "stderr": subprocess.STDOUT}
        try:
            self._popen = subprocess.Popen(argv, cwd=cwd, env=env, start_new_session=True, **streams)
        except OSError as exc:
            os.close(read_fd)
            raise SandboxError(f"cannot start a command in {cwd}: {exc}") from exc
        finally:
            os.close(child_fd)
        self.pid = self._popen.pid
        self._fd = read_fd
        self._input_fd = read_fd if tty else None
        self._pidfd = os.pidfd_open(self.pid) if hasattr(os, "pidfd_open") else None
        self._reader = OutputReader(lambda: os.read(read_fd, _CHUNK), self._buffer, name=f"oc-repl-output-{self.pid}")

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

    def write(self, data: bytes) -> None:
        if self._input_fd is None:
            raise SandboxError("this process takes no input (it was started without a terminal)")
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._input_fd, view) :]
        except OSError as exc:
            raise SandboxError(f"cannot write to process {self.pid}: {exc}") from exc

    def kill(self) -> None:
        """SIGKILL everything the command started, then let go of the process."""
        with self._lock:
            if self._reaped:
                return
            _kill_tree(self.pid)
        self.release()

    def finished(self) -> bool:
        """Exited, and nothing holds its output open any more."""
        return self._poll_exit(0) and self._reader.done

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


class LocalSandbox:
    """Runs everything on this machine. Relative paths are taken against `root`; absolute paths are host paths."""

    def __init__(self, root: Path, output_limit: int = 1 << 20) -> None:
        self.root = Path(root).expanduser().resolve()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SandboxError(f"cannot use {self.root} as a sandbox: {exc}") from exc
        self.spec = f"local:{self.root}"
        self.workdir = str(self.root)
        self.output_limit = output_limit
        self._procs: list[LocalProcess] = []
        self._lock = threading.Lock()

    @classmethod
    def from_spec(cls, rest: str, **opts: Any) -> LocalSandbox:
        return cls(Path(rest), **opts)

    def _path(self, path: str | Path) -> Path:
        path = Path(path)
        return path if path.is_absolute() else self.root / path

    def _start(self, command: str, tty: bool, cwd: str | None, env: dict[str, str] | None) -> LocalProcess:
        full_env = host_environment()
        if tty:
            full_env.update(TERM="xterm", PYTHONUNBUFFERED="1")
        else:
            full_env["TERM"] = "dumb"
            full_env.pop("PYTHONUNBUFFERED", None)
        full_env.update(env or {})
        proc = LocalProcess(command, tty=tty, cwd=self._path(cwd or self.root), env=full_env, limit=self.output_limit)
        with self._lock:
            if len(self._procs) >= PRUNE_AT:
                self._prune()
            self._procs.append(proc)
        return proc

    def _prune(self) -> None:
        """Let go of processes that are over, unless something they started still runs (close() must kill it)."""
        done = [p for p in self._procs if p.finished()]
        if not done:
            return
        scan = _scan_proc()
        # a finished leader is a zombie, so it is not in the scan: any match is a live process it left behind
        in_use = set() if scan is None else {i for _pid, group, session in scan for i in (group, session)}
        for proc in done:
            if proc.pid not in in_use:
                proc.release()
                self._procs.remove(proc)

    def exec(self, command: str, timeout: float, cwd: str | None = None, user: str | None = None) -> ExecResult:
        """`user` is accepted for the seam's sake; on this machine commands run as the current user."""
        proc = self._start(command, tty=False, cwd=cwd, env=None)
        timed_out = False
        if not proc.wait(timeout):
            if proc.alive():
                proc.kill()
                timed_out = True
            else:  # it ended right at the deadline: let its output drain
                proc.wait(EXIT_GRACE)
        return ExecResult(
            output=proc.read_available(),
            exit_code=None if timed_out else proc.exit_code,
            timed_out=timed_out,
            dropped=proc.dropped,
        )

    def spawn(
        self, command: str, tty: bool = True, cwd: str | None = None, env: dict[str, str] | None = None
    ) -> LocalProcess:
        return self._start(command, tty=tty, cwd=cwd, env=env)

    def write_file(self, path: str, data: bytes) -> None:
        target = self._path(path)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        except OSError as exc:
            raise SandboxError(f"cannot write {target}: {exc}") from exc

    def read_file(self, path: str) -> bytes:
        target = self._path(path)
        try:
            return target.read_bytes()
        except OSError as exc:
            raise SandboxError(f"cannot read {target}: {exc}") from exc

    def put(self, src: Path, dest: str) -> None:
        """Copy a directory's contents into `dest`, or a file to `dest` (into it when `dest` is a directory)."""
        src = Path(src)
        target = self._path(dest)
        try:
            if src.is_dir():
                shutil.copytree(src, target, dirs_exist_ok=True)
                return
            if target.is_dir():
                target = target / src.name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)
        except OSError as exc:
            raise SandboxError(f"cannot copy {src} to {target}: {exc}") from exc

    def close(self) -> None:
        """Kill every process still running, including whatever they left behind in their process groups."""
        with self._lock:
            procs, self._procs = self._procs, []
        for proc in procs:
            proc.kill()

    def __enter__(self) -> LocalSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
