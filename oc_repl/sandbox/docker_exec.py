"""What every model command in a container shares, whichever way it is started: the `bash -c` script with its
pid-recording prefix, the kill that finds its group again, and the process object for one `docker exec` of its own
(terminals, commands as another user, and everything once the sandbox's channel is gone; see docker_channel.py)."""

from __future__ import annotations

import socket
import time
import uuid
from contextlib import suppress
from typing import TYPE_CHECKING, Any, Protocol

from oc_repl.errors import SandboxError
from oc_repl.sandbox.capture import CappedBuffer, OutputReader

if TYPE_CHECKING:
    from oc_repl.sandbox.docker_host import HostAccess


class Container(Protocol):
    """What a command's process, the channels and the verdicts need of the container sandbox they serve
    (docker.py: DockerSandbox, which uses them)."""

    api: Any  # docker's low-level APIClient
    container: Any  # docker's Container
    id: str
    user: str  # the user commands run as ("": the image's)
    pid_dir: str
    output_limit: int
    host: HostAccess | None  # where oc-repl's host helper can run, if anywhere

    def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any: ...

    def check_running(self, settle: float = ...) -> None: ...

    def run_quick(self, script: str, user: str = "root") -> bytes: ...

    def put_command_file(self, path: str, data: bytes) -> None: ...


PID_DIR = "/tmp/.oc-repl"  # one subdirectory per sandbox: clients attached to one container keep apart
# Files that are not pid files (long commands, the channels' FIFOs) live in this subdirectory of a sandbox's pid
# directory: close() reads every entry of the pid directory as a pid file, and a directory simply fails that read.
WORK_SUBDIR = "c"
# After a command ends, a background child may still hold its output stream open; stop waiting for it then. The wait
# ends as soon as the stream does (the usual case), so the grace is paid only with such a child; it is long enough for
# a daemon on a loaded machine to pass on the command's last output, which it may do well after reporting the end.
EXIT_GRACE = 1.0
# A command's end is learnt by asking the daemon; the pause between asks grows to this while the command runs.
POLL_FIRST, POLL_MAX = 0.05, 0.5
# Linux refuses one argument longer than this (MAX_ARG_STRLEN, its terminating NUL included). A script that long is
# passed through a file instead; see `command_script`.
ARG_LIMIT = 128 * 1024
NO_INPUT = "this process takes no input (it was started without a terminal)"
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


def new_token() -> str:
    return uuid.uuid4().hex[:12]


def command_script(pid_dir: str, token: str, command: str, record: bool = True) -> tuple[str, str]:
    """The `bash -c` script that runs `command`, and the file (or "") its text must be put in first.

    With `record`, the script starts by writing its pid to the pid file (a channel's server writes it instead). A
    command too long for one argument is read back from that file and run with `eval`, still in the one `bash -c`
    (`$0`, arguments and stdin are what a short one sees); the file removes itself once read.
    """
    prefix = _PREFIX.format(file=f"{pid_dir}/{token}", root=PID_DIR, dir=pid_dir) if record else ""
    script = prefix + command
    if len(script.encode(errors="surrogatepass")) < ARG_LIMIT:
        return script, ""
    path = f"{pid_dir}/{WORK_SUBDIR}/{token}"
    return f'{prefix}eval "$(cat -- {path} && rm -f -- {path})"', path


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


class RecordedProcess:
    """A model command whose pid is recorded in the sandbox's pid directory, its output in a capped buffer."""

    tty = False

    def __init__(self, box: Container, token: str, limit: int) -> None:
        self._box = box
        self.token = token
        self.pidfile = f"{box.pid_dir}/{token}"
        self._buffer = CappedBuffer(limit)

    def read_available(self) -> bytes:
        return self._buffer.read()

    def settle(self, timeout: float) -> bool:
        """The daemon's stream brings the output: nothing to wait on here."""
        return True

    def write(self, data: bytes) -> None:
        raise SandboxError(NO_INPUT)

    def kill(self) -> None:
        """SIGKILL the command's process group inside the container (and its session, where pkill exists)."""
        with suppress(SandboxError):  # the container is gone, and the process with it
            self._box.run_quick(f"{kill_recorded(self.pidfile)}; rm -f {self.pidfile}")
        self.release()

    def release(self) -> None:
        """Let go of whatever connection the process holds; the process itself is left alone."""

    @property
    def dropped(self) -> int:
        return self._buffer.dropped


class DockerProcess(RecordedProcess):
    """One `docker exec` in the container; output drained into a capped buffer on a thread."""

    def __init__(
        self,
        box: Container,
        command: str,
        *,
        tty: bool,
        cwd: str,
        env: dict[str, str],
        user: str | None,
        limit: int,
    ) -> None:
        super().__init__(box, new_token(), limit)
        self.tty = tty
        script, path = command_script(box.pid_dir, self.token, command)
        if path:
            box.put_command_file(path, command.encode(errors="replace"))
        api = box.api
        self.exec_id = box.call(
            api.exec_create,
            box.id,
            ["bash", "-c", script],
            stdin=tty,
            tty=tty,
            workdir=cwd,
            environment=env,
            user=user or "",
        )["Id"]
        self._exit_code: int | None = None
        self._sock: socket.socket | None = None
        if tty:
            wrapped = box.call(api.exec_start, self.exec_id, socket=True, tty=True)
            self._sock = getattr(wrapped, "_sock", wrapped)
            # The docker client's request timeout stays on the socket it hands over: a session quiet for that long
            # would otherwise end its reader, and everything it printed afterwards would be lost.
            self._sock.settimeout(None)
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
        """True once the command has ended and its output is drained, or EXIT_GRACE after its end if a background
        child still holds the stream (the daemon is asked now and then whether the command itself is still running).
        """
        deadline = time.monotonic() + max(0.0, timeout)
        pause = POLL_FIRST
        while not self._reader.join(max(0.0, min(pause, deadline - time.monotonic()))):
            if not self.alive():
                return self._reader.join(EXIT_GRACE) or True  # whatever holds the stream is a leftover child
            if time.monotonic() >= deadline:
                return False
            pause = min(pause * 2, POLL_MAX)
        return not self.alive() or self._reader.join(EXIT_GRACE)

    def write(self, data: bytes) -> None:
        if self._sock is None:
            raise SandboxError(NO_INPUT)
        try:
            self._sock.sendall(data)
        except OSError as exc:
            raise SandboxError(f"cannot write to the process: {exc}") from exc

    def release(self) -> None:
        if self._sock is not None:
            self._sock.close()

    @property
    def exit_code(self) -> int | None:
        if self._exit_code is None:
            self.alive()
        return self._exit_code
