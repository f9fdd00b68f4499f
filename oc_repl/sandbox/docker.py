"""Docker drivers, through the Engine API: attach to a running container, or create one from an image.

Every command is a fresh `bash -c`, as the checkpoint was trained, leading its own session and process group inside
the container, so a timeout kills the whole tree it started *in the container*. Its in-container pid and start time
are recorded in the sandbox's pid directory, which lets us find the group again (the Engine API only knows host pids).
Commands without a terminal, as the default user, go through the sandbox's persistent channels (docker_channel.py);
terminals, commands as another user, and every command once a channel has broken get a `docker exec` each
(docker_exec.py). The verdict's plumbing goes through oc-repl's host helper where it can run (docker_host.py).
"""

from __future__ import annotations

import contextlib
import io
import shlex
import tarfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from oc_repl.errors import OcReplError, SandboxError, SandboxLost
from oc_repl.sandbox import docker_lifetime, leftovers
from oc_repl.sandbox.answers import token
from oc_repl.sandbox.docker_channel import ChannelPool
from oc_repl.sandbox.docker_container import USER_LABEL, connect, container_limits, create_container
from oc_repl.sandbox.docker_exec import PID_DIR, WORK_SUBDIR, DockerProcess, RecordedProcess, kill_recorded
from oc_repl.sandbox.docker_host import HostAccess
from oc_repl.sandbox.docker_look import ContainerVerdicts, OwnExecs
from oc_repl.sandbox.meter import CallMeter, Metered, metered
from oc_repl.types import ExecResult, Sandbox

if TYPE_CHECKING:
    from oc_repl.events import Isolation

DEFAULT_WORKDIR = "/workspace"  # camel's docker backend, as trained
# How long a command killed by SIGKILL waits for the daemon to say whether its container went with it.
LOSS_SETTLE = 10.0


class DockerSandbox(Metered, ContainerVerdicts, Sandbox):
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
        self.meter = CallMeter()
        self._procs: list[RecordedProcess] = []
        self._lock = threading.Lock()
        self.own_execs = OwnExecs()
        self.pid_dir = f"{PID_DIR}/{uuid.uuid4().hex[:12]}"
        self.expires_at = docker_lifetime.expiry(container.labels)
        # commands run as the image's user where the first process is protected (docker_container.py) and runs as
        # nobody; in a container of the user's, as its own default
        labels = container.labels or {}
        self.user = (labels.get(USER_LABEL) or "root") if USER_LABEL in labels else ""
        # where oc-repl's host helper can run, the verifier is sealed and the evidence read from outside
        self.host, self.unsealed_why = HostAccess.find(container.attrs)
        self.uid, self.gid = self._default_ids()
        # Set up as root, so it works whoever the default user is. A workdir made here belongs to the default user,
        # who must write there; an existing one is left as it is.
        wd = shlex.quote(workdir)
        owner = f" && chown {self.uid}:{self.gid} {wd}" if self.uid is not None else ""
        dirs = " ".join(self._work_dirs())
        setup = f"mkdir -p -m 1777 {dirs}; [ -d {wd} ] || {{ mkdir -p {wd}{owner}; }}"
        # What runs before the first command is not the agent's (the user's services in a container we attach to,
        # what an image's entrypoint started): only what starts after this is stopped before a verifier.
        marker = token()
        found = self.run_quick(f"{setup}; {leftovers.baseline_script(marker)}")
        self.baseline = leftovers.parse_baseline(found.decode("ascii", "replace"), marker)
        self.channels = ChannelPool(self)
        self.renewal = docker_lifetime.Renewal.of(container.labels, self.run_quick)  # a leased container's lease

    @classmethod
    def from_spec(cls, rest: str, workdir: str | None = None, **opts: Any) -> DockerSandbox:
        import docker

        client = connect()
        docker_lifetime.sweep(client.api, time.time())
        try:
            container = client.containers.get(rest)
        except docker.errors.NotFound as exc:
            raise SandboxError(
                f"no container named {rest!r}", hint=f"docker run -d --name {rest} IMAGE sleep infinity"
            ) from exc
        if container.status != "running":
            raise SandboxError(f"container {rest!r} is {container.status}, not running", hint=f"docker start {rest}")
        return cls(client, container, workdir or DEFAULT_WORKDIR, **opts)

    @staticmethod
    def gone(rest: str) -> str:
        """Why a conversation cannot be taken up in this container again ("" when it runs)."""
        try:
            client = connect()
        except OcReplError as exc:
            return f"cannot reach the docker daemon to find container {rest}: {exc.message}"
        try:
            status = client.containers.get(rest).status
        except Exception:  # docker's NotFound, or any answer that is not the container
            status = "gone"
        finally:
            client.close()
        if status == "running":
            return ""
        where = "no longer there" if status == "gone" else status
        return (
            f"the conversation's container {rest} is {where}: its sandbox is gone (a container outlives the shell "
            "only with --keep)"
        )

    def isolation(self) -> Isolation:
        """The network and limits in force, as the daemon reports them now. An attached container's limits are its
        own: oc-repl leaves them as they are."""
        from oc_repl.sandbox.isolation import container_isolation

        attrs = self.call(self.api.inspect_container, self.id)
        return container_isolation(attrs, limits="oc-repl" if self.owned else "container")

    @property
    def image_workdir(self) -> str:  # type: ignore[override]  # read from the container
        """The image's WORKDIR: where terminal-bench runs the task's tests."""
        return self.container.attrs.get("Config", {}).get("WorkingDir") or "/"

    def kept(self) -> str:
        return self.name if self.keep else ""

    def reattach(self) -> str:
        return f"docker:{self.name}"

    # --- plumbing ----------------------------------------------------------------------------------------

    def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """An Engine API call; a vanished or stopped container becomes a SandboxError (exit 6)."""
        import docker
        import requests

        try:
            return fn(*args, **kwargs)
        except docker.errors.NotFound as exc:
            raise self._lost(f"container {self.name} no longer exists") from exc  # expired ones are swept
        except docker.errors.APIError as exc:
            if exc.status_code == 409:  # "is not running" / "is paused"
                raise self._lost(f"container {self.name}: {exc.explanation or exc}") from exc
            raise SandboxError(f"container {self.name}: {exc.explanation or exc}") from exc
        except (requests.RequestException, docker.errors.DockerException) as exc:
            raise SandboxLost(f"the docker daemon failed: {exc}") from exc

    def _lost(self, message: str) -> SandboxLost:
        if self.expires_at is not None and time.time() >= self.expires_at:
            return SandboxLost(
                f"container {self.name} stopped: its lifetime ended during the run",
                hint="a container gets its lifetime when it is created; --keep creates one without",
            )
        return SandboxLost(message)

    def check_running(self, settle: float = LOSS_SETTLE) -> None:
        """SandboxLost unless the container runs. A container being stopped or removed is still shown running for a
        while after the commands it killed have ended (some 40 ms on a quiet daemon, seconds on a loaded one), and a
        command started in it meanwhile fails. So one shown running counts as running once a command runs in it;
        until then it is asked again, for `settle` seconds at most (a container that runs no command for that long,
        its process table full, say, still runs: what fails there is the model's)."""
        deadline = time.monotonic() + settle
        while True:
            state = self.call(self.api.inspect_container, self.id).get("State") or {}
            status = state.get("Status") or "gone"
            if status != "running":
                raise self._lost(f"container {self.name} is {status}: it stopped during the run")
            if self._runs_a_command() or time.monotonic() >= deadline:
                return
            time.sleep(0.05)

    def _runs_a_command(self) -> bool:
        try:
            return self.run_quick("echo running") == b"running\n"
        except SandboxLost:
            raise
        except SandboxError:  # the daemon could not start it: the container is going, or starved
            return False

    def run_quick(self, script: str, user: str = "root") -> bytes:
        """Run `script` with sh and return its output. As root by default: kills must reach any user's processes."""
        with self.own_execs.running():
            exec_id = self.call(self.api.exec_create, self.id, ["sh", "-c", script], user=user)["Id"]
            return self.call(self.api.exec_start, exec_id) or b""

    def _work_dirs(self) -> Iterator[str]:
        """The pid directories and the one under them for long commands and FIFOs, each world-writable (1777)."""
        yield from (PID_DIR, self.pid_dir, f"{self.pid_dir}/{WORK_SUBDIR}")

    def put_command_file(self, path: str, data: bytes) -> None:
        """A long command's text, for its `bash -c` to read. The directories go in the archive too, with their
        modes: the model may have cleaned /tmp, and the daemon would make them root's and closed to others."""
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for name in self._work_dirs():
                info = tarfile.TarInfo(name.lstrip("/"))
                info.type, info.mode = tarfile.DIRTYPE, 0o1777
                tar.addfile(info)
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
        self.call(self.api.put_archive, self.id, "/", buf.getvalue())

    def _default_ids(self) -> tuple[int | None, int | None]:
        """The uid and gid commands run as by default (the image's USER, or `docker run --user`); None if unknown.

        Without a configured user that is root, and no exec is needed. Otherwise `id` itself says, which also
        resolves user names through the container's own /etc/passwd.
        """
        if not self.user and not self.container.attrs.get("Config", {}).get("User") or self.user == "root":
            return 0, 0
        out = self.run_quick("id -u && id -g", user=self.user).split()
        if len(out) != 2 or not all(part.isdigit() for part in out):
            return None, None
        return int(out[0]), int(out[1])

    # --- the Sandbox seam --------------------------------------------------------------------------------

    @metered
    def spawn(
        self,
        command: str,
        tty: bool = True,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
        wait: float = 0.0,
    ) -> RecordedProcess:
        base = {"TERM": "xterm", "PYTHONUNBUFFERED": "1"} if tty else {"TERM": "dumb"}
        full_env = {**base, **(env or {})}
        # The channels run as the default user; a command for another one (root, for verifiers) gets its own exec.
        proc: RecordedProcess | None = None
        if not tty and not user:
            proc = self.channels.spawn(command, cwd or self.workdir, full_env)
        if proc is None:
            proc = DockerProcess(
                self,
                command,
                tty=tty,
                cwd=cwd or self.workdir,
                env=full_env,
                user=user or self.user,
                limit=self.output_limit,
            )
        with self._lock:
            self._procs.append(proc)
        return proc

    @metered
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

    @metered
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

    @metered
    def read_file(self, path: str) -> bytes:
        stream, _stat = self.call(self.api.get_archive, self.id, str(self._abs(path)))
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            member = tar.next()
            extracted = tar.extractfile(member) if member else None
            if extracted is None:
                raise SandboxError(f"{path} is not a regular file")
            return extracted.read()

    @metered
    def put(self, src: Path, dest: str) -> None:
        target = str(self._abs(dest)).lstrip("/")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            tar.add(str(src), arcname=target)
        self.call(self.api.put_archive, self.id, "/", buf.getvalue())

    def close(self) -> None:
        self.renewal.stop()
        with self._lock:
            procs, self._procs = self._procs, []
        # Every command of this sandbox recorded its pid in pid_dir, so one exec stops whatever is left of them all;
        # a kill per process cost a round trip into the container (~50 ms) for each command the run ever made.
        # The files of finished commands stay until here on purpose: they are how what those commands left running
        # in the background is found. Their pids may have been reused since; kill_recorded skips those.
        each = kill_recorded('"$f"')
        with contextlib.suppress(SandboxError):
            self.run_quick(f"for f in {self.pid_dir}/*; do {each}; done; rm -rf {self.pid_dir}")
        self.channels.close()
        for proc in procs:
            proc.release()


class DockerImageSandbox(DockerSandbox):
    """`docker-image:<image>`: a fresh container, removed on close unless kept, with a finite lifetime unless kept
    (see docker_lifetime.py)."""

    owned = True

    @classmethod
    def from_spec(
        cls,
        rest: str,
        workdir: str | None = None,
        docker_network: str | None = None,
        keep: bool = False,
        lifetime: float | None = None,
        lease: float = docker_lifetime.LEASE,
        max_processes: int | None = None,
        memory_mb: int | None = None,
        cpus: float | None = None,
        **opts: Any,
    ) -> DockerImageSandbox:
        """`docker_network`: the container's network (None: none at all); `lifetime`: seconds the container may live
        (None: docker_lifetime.DEFAULT_LIFETIME; ignored when kept); `lease`: how long it outlives a client that stopped
        renewing it; `max_processes`, `memory_mb` (swap included) and `cpus`: its limits (None: none)."""
        client = connect()
        limits = container_limits(max_processes, memory_mb, cpus)
        container = create_container(client, rest, docker_network, keep, lifetime, limits, lease)
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
        self.renewal.stop()
        with self._lock:
            self._procs = []
        self.channels.close()
        with suppress(Exception):  # already gone: nothing left to remove
            self.container.remove(force=True)
