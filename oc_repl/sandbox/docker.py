"""Docker drivers, through the Engine API: attach to a running container, or create one from an image.

Every command is a fresh `docker exec` of `bash -c`, as the checkpoint was trained. The exec'd process leads its
own session and process group inside the container, so a timeout kills the whole tree it started *in the
container*; a short prefix on the command records that process's in-container pid in a file, which is what lets us
find the group again (the Engine API only knows host pids).
"""

from __future__ import annotations

import contextlib
import io
import os
import shlex
import socket
import tarfile
import threading
import time
import uuid
from contextlib import suppress
from pathlib import Path, PurePosixPath
from typing import Any

from oc_repl.errors import SandboxError, SandboxLost
from oc_repl.sandbox.capture import CappedBuffer, OutputReader
from oc_repl.types import ExecResult

PID_DIR = "/tmp/.oc-repl"  # one subdirectory per sandbox: clients attached to one container keep apart
DEFAULT_WORKDIR = "/workspace"  # camel's docker backend, as trained
# After the exec'd process ends, a background child may still hold its output stream open; stop waiting then.
EXIT_GRACE = 0.25
# How long a command killed by SIGKILL waits for the daemon to say whether its container went with it.
LOSS_SETTLE = 1.0
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


def _kill_recorded(pidfile: str) -> str:
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


def connect() -> Any:
    import docker

    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        # Name the variable itself: a wrong DOCKER_HOST is the usual cause, and the user must know where to look.
        host = os.environ.get("DOCKER_HOST")
        where = f"DOCKER_HOST={host}" if host else "unix:///var/run/docker.sock (DOCKER_HOST is not set)"
        raise SandboxError(
            f"cannot reach the docker daemon at {where}: {exc}",
            hint="start dockerd, or point DOCKER_HOST at the daemon's socket",
        ) from exc
    return client


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
            self._box.run_quick(f"{_kill_recorded(self.pidfile)}; rm -f {self.pidfile}")
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


class DockerSandbox:
    """`docker:<container>`: attach to a running container and leave it running afterwards."""

    owned = False

    def __init__(
        self,
        client: Any,
        container: Any,
        workdir: str = DEFAULT_WORKDIR,
        output_limit: int = 1 << 20,
        keep: bool = False,
    ) -> None:
        self.client, self.api, self.container = client, client.api, container
        self.id, self.name = container.id, container.name
        self.workdir = workdir
        self.output_limit = output_limit
        self.keep = keep
        self.spec = f"docker:{self.name}"
        self._procs: list[DockerProcess] = []
        self._lock = threading.Lock()
        self.pid_dir = f"{PID_DIR}/{uuid.uuid4().hex[:12]}"
        self.uid, self.gid = self._default_ids()
        # Set up as root, so it works whoever the default user is. A workdir made here belongs to the default user,
        # who must write there; an existing one is left as it is.
        wd = shlex.quote(workdir)
        owner = f" && chown {self.uid}:{self.gid} {wd}" if self.uid is not None else ""
        self.run_quick(f"mkdir -p -m 1777 {PID_DIR} {self.pid_dir}; [ -d {wd} ] || {{ mkdir -p {wd}{owner}; }}")

    @classmethod
    def from_spec(cls, rest: str, workdir: str | None = None, **opts: Any) -> DockerSandbox:
        import docker

        client = connect()
        try:
            container = client.containers.get(rest)
        except docker.errors.NotFound as exc:
            raise SandboxError(
                f"no container named {rest!r}", hint=f"docker run -d --name {rest} IMAGE sleep infinity"
            ) from exc
        if container.status != "running":
            raise SandboxError(f"container {rest!r} is {container.status}, not running", hint=f"docker start {rest}")
        return cls(client, container, workdir or DEFAULT_WORKDIR, **opts)

    @property
    def image_workdir(self) -> str:
        """The image's WORKDIR: where terminal-bench runs the task's tests."""
        return self.container.attrs.get("Config", {}).get("WorkingDir") or "/"

    # --- plumbing ----------------------------------------------------------------------------------------

    def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """An Engine API call; a vanished or stopped container becomes a SandboxError (exit 6)."""
        import docker
        import requests

        try:
            return fn(*args, **kwargs)
        except docker.errors.NotFound as exc:
            raise SandboxLost(f"container {self.name} no longer exists") from exc
        except docker.errors.APIError as exc:
            if exc.status_code == 409:  # "is not running" / "is paused"
                raise SandboxLost(f"container {self.name}: {exc.explanation or exc}") from exc
            raise SandboxError(f"container {self.name}: {exc.explanation or exc}") from exc
        except (requests.RequestException, docker.errors.DockerException) as exc:
            raise SandboxLost(f"the docker daemon failed: {exc}") from exc

    def check_running(self, settle: float = LOSS_SETTLE) -> None:
        """SandboxLost unless the container runs. The daemon reports a container's end some 40 ms after the end of
        the commands it killed, so a container still shown running is asked again for `settle` seconds."""
        deadline = time.monotonic() + settle
        while True:
            state = self.call(self.api.inspect_container, self.id).get("State") or {}
            status = state.get("Status") or "gone"
            if status != "running":  # "removing" comes before Running turns false
                raise SandboxLost(f"container {self.name} is {status}: it stopped during the run")
            if time.monotonic() >= deadline:
                return
            time.sleep(0.05)

    def run_quick(self, script: str, user: str = "root") -> bytes:
        """Run `script` with sh and return its output. As root by default: kills must reach any user's processes."""
        exec_id = self.call(self.api.exec_create, self.id, ["sh", "-c", script], user=user)["Id"]
        return self.call(self.api.exec_start, exec_id) or b""

    def _default_ids(self) -> tuple[int | None, int | None]:
        """The uid and gid commands run as by default (the image's USER, or `docker run --user`); None if unknown.

        Without a configured user that is root, and no exec is needed. Otherwise `id` itself says, which also
        resolves user names through the container's own /etc/passwd.
        """
        if not self.container.attrs.get("Config", {}).get("User"):
            return 0, 0
        out = self.run_quick("id -u && id -g", user="").split()
        if len(out) != 2 or not all(part.isdigit() for part in out):
            return None, None
        return int(out[0]), int(out[1])

    # --- the Sandbox seam --------------------------------------------------------------------------------

    def spawn(
        self,
        command: str,
        tty: bool = True,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
    ) -> DockerProcess:
        base = {"TERM": "xterm", "PYTHONUNBUFFERED": "1"} if tty else {"TERM": "dumb"}
        proc = DockerProcess(
            self,
            command,
            tty=tty,
            cwd=cwd or self.workdir,
            env={**base, **(env or {})},
            user=user,
            limit=self.output_limit,
        )
        with self._lock:
            self._procs.append(proc)
        return proc

    def exec(self, command: str, timeout: float, cwd: str | None = None, user: str | None = None) -> ExecResult:
        proc = self.spawn(command, tty=False, cwd=cwd, user=user)
        timed_out = not proc.wait(timeout)
        if timed_out:
            proc.kill()
        with self._lock:
            self._procs.remove(proc)
        return ExecResult(
            output=proc.read_available(),
            exit_code=None if timed_out else proc.exit_code,
            timed_out=timed_out,
            dropped=proc.dropped,
        )

    def _abs(self, path: str) -> PurePosixPath:
        p = PurePosixPath(path)
        return p if p.is_absolute() else PurePosixPath(self.workdir) / p

    def write_file(self, path: str, data: bytes) -> None:
        # Members are named relative to "/", so the daemon creates missing parent directories itself.
        target = self._abs(path)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo(str(target).lstrip("/"))
            info.size, info.mode = len(data), 0o644
            # Owned by the default user, as a file the model wrote with a command would be, so it can change it later.
            info.uid, info.gid = self.uid or 0, self.gid or 0
            tar.addfile(info, io.BytesIO(data))
        self.call(self.api.put_archive, self.id, "/", buf.getvalue())

    def read_file(self, path: str) -> bytes:
        stream, _stat = self.call(self.api.get_archive, self.id, str(self._abs(path)))
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            member = tar.next()
            extracted = tar.extractfile(member) if member else None
            if extracted is None:
                raise SandboxError(f"{path} is not a regular file")
            return extracted.read()

    def put(self, src: Path, dest: str) -> None:
        target = str(self._abs(dest)).lstrip("/")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            tar.add(str(src), arcname=target)
        self.call(self.api.put_archive, self.id, "/", buf.getvalue())

    def close(self) -> None:
        with self._lock:
            procs, self._procs = self._procs, []
        # Every command of this sandbox recorded its pid in pid_dir, so one exec stops whatever is left of them all;
        # a kill per process cost a round trip into the container (~50 ms) for each command the run ever made.
        # The files of finished commands stay until here on purpose: they are how what those commands left running
        # in the background is found. Their pids may have been reused since; _kill_recorded skips those.
        each = _kill_recorded('"$f"')
        with contextlib.suppress(SandboxError):
            self.run_quick(f"for f in {self.pid_dir}/*; do {each}; done; rm -rf {self.pid_dir}")
        for proc in procs:
            proc.release()


class DockerImageSandbox(DockerSandbox):
    """`docker-image:<image>`: a fresh container (`sleep infinity`), removed on close unless kept."""

    owned = True

    @classmethod
    def from_spec(
        cls, rest: str, workdir: str | None = None, network: str | None = None, keep: bool = False, **opts: Any
    ) -> DockerImageSandbox:
        import docker

        client = connect()
        if network is None:  # a daemon started without a bridge can only run containers without a network
            network = "bridge" if client.networks.list(names=["bridge"]) else "none"
        try:
            container = client.containers.create(
                rest,
                ["sleep", "infinity"],
                detach=True,
                network_mode=network,
                name=f"oc-repl-{uuid.uuid4().hex[:10]}",
                labels={"oc-repl": "1"},
            )
        except docker.errors.ImageNotFound as exc:
            raise SandboxError(
                f"image {rest!r} not found", hint="build it first, e.g. docker build -t NAME DIR"
            ) from exc
        except docker.errors.APIError as exc:
            raise SandboxError(f"cannot create a container from {rest!r}: {exc.explanation or exc}") from exc
        try:
            container.start()
            container.reload()
            box = cls(client, container, workdir or DEFAULT_WORKDIR, keep=keep, **opts)
        except BaseException:
            container.remove(force=True)
            raise
        box.spec = f"docker-image:{rest}"
        return box

    def close(self) -> None:
        if self.keep:
            return super().close()
        with self._lock:
            self._procs = []
        with suppress(Exception):  # already gone: nothing left to remove
            self.container.remove(force=True)
