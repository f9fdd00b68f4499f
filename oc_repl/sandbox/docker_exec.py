"""One `docker exec` of a model command: the pid-recording prefix, the kill that finds its group again, and the
process object that drains its output."""

from __future__ import annotations

import socket
import uuid
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from oc_repl.errors import SandboxError
from oc_repl.sandbox.capture import CappedBuffer, OutputReader

if TYPE_CHECKING:
    from oc_repl.sandbox.docker import DockerSandbox

PID_DIR = "/tmp/.oc-repl"  # one subdirectory per sandbox: clients attached to one container keep apart
# After the exec'd process ends, a background child may still hold its output stream open; stop waiting then.
EXIT_GRACE = 0.25
# The model may clean /tmp. The pid file is then written after a quiet mkdir, never with an error in the output
# (and a command whose pid is not recorded could not be killed at its timeout).
# The record goes in front of the command on its first line, in the same `bash -c`: no second shell to start
# (that cost ~2 ms a call), and the command's line numbers, `$0` and arguments stay what a plain `bash -c` gives.
# Next to the pid goes the leader's start time (field 22 of /proc/$$/stat; the name field is always "(bash)", so the
# fields split on blanks), read with builtins only: a pid file outlives its command, pids wrap, and the start time is
# what tells our leader from a later process that got the same pid. The array is unset so the command never sees it.
# The directories are world-writable with the sticky bit (1777): commands may run as any user (the container's
# default user, root for verifiers), and each must be able to record its pid.
_PREFIX = (
    "{{ read -r -a __oc_repl_stat < /proc/$$/stat; echo $$ ${{__oc_repl_stat[21]}} > {file}; }} 2>/dev/null || "
    "{{ mkdir -p -m 1777 {root} {dir} && echo $$ ${{__oc_repl_stat[21]}} > {file}; }} 2>/dev/null; "
    "unset __oc_repl_stat; "
)


def kill_recorded(pidfile: str) -> str:
    """sh that SIGKILLs the process group whose leader's pid is in `pidfile`, and its session where pkill exists.

    Only while the pid is still ours: either /proc has no such pid (it is free, and Linux hands out no pid that is
    still some group's or session's id, so what is left in that group or session is what our command left; only a
    process that took the pid meanwhile, led a group or session of its own and ended before its members could fool
    this), or the process there has the recorded start time (our leader still runs). A pid in use by a process with
    another start time was reused by someone else, and is left alone. `-gt 1` also keeps junk and `kill -KILL -1`
    (which would signal every process) out.
    """
    return (
        f'if read p t < {pidfile} 2>/dev/null && [ "$p" -gt 1 ] 2>/dev/null && '
        f'{{ ! read -r s < /proc/$p/stat 2>/dev/null || {{ set -- ${{s##*) }}; [ "${{20}}" = "$t" ]; }}; }}; then '
        f"kill -KILL -$p 2>/dev/null; command -v pkill >/dev/null && pkill -KILL -s $p; fi"
    )


class DockerProcess:
    """One `docker exec` in the container; output drained into a capped buffer on a thread."""

    def __init__(
        self,
        box: DockerSandbox,
        command: str,
        *,
        tty: bool,
        cwd: str,
        env: dict[str, str],
        user: str | None,
        limit: int,
    ) -> None:
        self._box = box
        self.token = uuid.uuid4().hex[:12]
        self.pidfile = f"{box.pid_dir}/{self.token}"
        argv = ["bash", "-c", _PREFIX.format(file=self.pidfile, root=PID_DIR, dir=box.pid_dir) + command]
        api = box.api
        self.exec_id = box.call(
            api.exec_create, box.id, argv, stdin=tty, tty=tty, workdir=cwd, environment=env, user=user or ""
        )["Id"]
        self._buffer = CappedBuffer(limit)
        self._exit_code: int | None = None
        self._sock: socket.socket | None = None
        if tty:
            wrapped = box.call(api.exec_start, self.exec_id, socket=True, tty=True)
            self._sock = getattr(wrapped, "_sock", wrapped)
            read = self._recv
        else:
            frames = box.call(api.exec_start, self.exec_id, stream=True)
            read = self._next_frame(iter(frames))
        self._reader = OutputReader(read, self._buffer, name=f"oc-repl-docker-{self.token}")

    def _recv(self) -> bytes:
        assert self._sock is not None
        return self._sock.recv(1 << 16)

    @staticmethod
    def _next_frame(frames: Any) -> Any:
        def read() -> bytes:
            try:
                return next(frames, b"")
            except Exception:  # the daemon dropped the stream (container gone): that is this stream's end
                return b""

        return read

    def _inspect(self) -> dict[str, Any]:
        return self._box.call(self._box.api.exec_inspect, self.exec_id)

    def alive(self) -> bool:
        if self._exit_code is not None:
            return False
        info = self._inspect()
        if info.get("Running"):
            return True
        self._exit_code = info.get("ExitCode")
        if self._exit_code in (None, 137):
            # A container that stops or is removed SIGKILLs everything in it, which looks like a command killed by
            # SIGKILL. Without this check the loss would be reported as a finished command and the run would go on.
            self._box.check_running()
        return False

    def wait(self, timeout: float) -> bool:
        if self._reader.join(timeout):
            return not self.alive() or self._reader.join(EXIT_GRACE)
        if self.alive():
            return False
        return self._reader.join(EXIT_GRACE) or True  # exited; whatever holds the stream is a leftover child

    def read_available(self) -> bytes:
        return self._buffer.read()

    def write(self, data: bytes) -> None:
        if self._sock is None:
            raise SandboxError("this process takes no input (it was started without a terminal)")
        try:
            self._sock.sendall(data)
        except OSError as exc:
            raise SandboxError(f"cannot write to the process: {exc}") from exc

    def kill(self) -> None:
        """SIGKILL the exec'd process group inside the container (and its session, where pkill exists)."""
        with suppress(SandboxError):  # the container is gone, and the process with it
            self._box.run_quick(f"{kill_recorded(self.pidfile)}; rm -f {self.pidfile}")
        self.release()

    def release(self) -> None:
        """Let go of the terminal connection, if any; the process itself is left alone."""
        if self._sock is not None:
            self._sock.close()

    @property
    def exit_code(self) -> int | None:
        if self._exit_code is None:
            self.alive()
        return self._exit_code

    @property
    def dropped(self) -> int:
        return self._buffer.dropped
