"""A container seen from outside the agent's reach, and its verifier run sealed: the daemon's change set (`docker diff`,
which nothing inside the container can hide an entry from), what a path holds (read by oc-repl's host helper inside
the container's own mount namespace, or from the daemon's archive of it), and the job handed to the host helper.
"""

from __future__ import annotations

import base64
import hashlib
import io
import posixpath
import tarfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from oc_repl.errors import SandboxError
from oc_repl.sandbox import leftovers
from oc_repl.sandbox.answers import token, until_done
from oc_repl.sandbox.meter import metered
from oc_repl.sandbox.unsealed import run_unsealed
from oc_repl.types import Change, FileFacts, Leftover, Look, VerifierJob, VerifierRun

if TYPE_CHECKING:
    from oc_repl.sandbox.docker_exec import Container
    from oc_repl.sandbox.docker_host import HostAccess

_KINDS = {0: "changed", 1: "created", 2: "removed"}
HEAD = 2048
READ_LIMIT = 4 << 20
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # what docker gives an env without


class DockerLook(Look):
    """A container through its daemon (`call` makes an Engine API call, errors made the driver's), and oc-repl's host
    helper for it where one can run (`host`)."""

    def __init__(self, call: Callable[..., Any], api: Any, container_id: str, host: HostAccess | None) -> None:
        self.call, self.api, self.id, self.host = call, api, container_id, host
        self.how = "the docker daemon's change set" + (
            ", read by oc-repl's host helper" if host is not None else ", read from the daemon's archives"
        )

    def changes(self) -> list[Change]:
        if self.host is not None:  # the same change set, walked from the host: the daemon's own walk is slower
            graph = (self.call(self.api.inspect_container, self.id) or {}).get("GraphDriver") or {}
            found = self.host.changes(graph)
            if found is not None:
                return found
        listed = self.call(self.api.diff, self.id) or []
        return [Change(path=d["Path"], what=_KINDS.get(d.get("Kind"), "changed")) for d in listed]  # type: ignore[arg-type]

    def files(self, paths: list[str], digest: bool = True) -> dict[str, FileFacts]:
        if not paths:
            return {}
        if self.host is not None:
            return self.host.files(paths, digest)
        return {path: self._archived(path, digest) for path in paths}

    def read(self, paths: list[str]) -> dict[str, bytes | None]:
        if not paths:
            return {}
        if self.host is not None:
            return self.host.read(paths)
        found: dict[str, bytes | None] = {}
        for path in paths:
            member, data = self._archive(path)
            found[path] = data if member is not None and member.isfile() else None
        return found

    def listing(self, directories: list[str]) -> dict[str, list[str] | None]:
        raise SandboxError("listing is not offered by docker's look")

    def _archive(self, path: str) -> tuple[tarfile.TarInfo | None, bytes]:
        import docker

        try:
            stream, _stat = self.api.get_archive(self.id, path)
        except docker.errors.APIError:
            return None, b""
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            member = tar.next()
            extracted = tar.extractfile(member) if member is not None and member.isfile() else None
            return member, extracted.read(READ_LIMIT) if extracted is not None else b""

    def _archived(self, path: str, digest: bool) -> FileFacts:
        member, data = self._archive(path)
        if member is None:
            return FileFacts(error="not found")
        kind = 0o120000 if member.issym() else 0o040000 if member.isdir() else 0o100000 if member.isfile() else 0
        facts = FileFacts(mode=kind | member.mode, size=member.size, mtime=int(member.mtime * 10**9))
        if member.issym():
            facts.link = member.linkname
            facts.target = posixpath.normpath(posixpath.join(posixpath.dirname(path), member.linkname))
        elif member.isfile() and digest:
            facts.sha256, facts.md5 = hashlib.sha256(data).hexdigest(), hashlib.md5(data).hexdigest()
            facts.head = data[:HEAD]
        return facts


# --- the sealed verifier -----------------------------------------------------------------------------------------


def run_sealed(box: Container, job: VerifierJob) -> VerifierRun:
    """The job run by the host helper in a mount namespace of its own (see oc_repl/hostns/seal.py)."""
    assert box.host is not None
    config = box.container.attrs.get("Config") or {}
    env = dict(e.split("=", 1) for e in config.get("Env") or [] if "=" in e)
    env.setdefault("PATH", DEFAULT_PATH)
    env.setdefault("HOSTNAME", config.get("Hostname") or "")
    for key, value in job.env.items():
        env[key] = f"{value}:{env[key]}" if key == "PYTHONPATH" and env.get(key) else value
    private = [[d, 0o777 if d.startswith("/logs") else 0o755] for d in job.private]
    request = {
        "private": private,
        "files": [[path, base64.b64encode(data).decode(), mode] for path, data, mode in job.files],
        "fifo": job.record,
        "argv": ["bash", "-c", job.command],
        "env": env,
        "cwd": job.cwd or "/",
        "user": job.user or box.user or "root",
        "timeout": job.timeout,
        "collect": job.collect,
        "observe": True,
        "exits": True,
    }
    answer, output, dropped = box.host.verify(request, box.output_limit)
    status = answer.get("status")
    code = None if status is None else (status >> 8 if status & 0x7F == 0 else 128 + (status & 0x7F))
    return VerifierRun(
        output=output,
        exit_code=code,
        timed_out=bool(answer.get("timed_out")),
        dropped=dropped,
        collected={p: (base64.b64decode(v) if v is not None else None) for p, v in answer["collected"].items()},
        records=base64.b64decode(answer.get("records") or ""),
        exits=answer.get("exits") or {},
        sealed=bool(answer.get("sealed")),
        opened=[tuple(o) for o in answer["opened"]] if answer.get("opened") is not None else None,  # type: ignore[misc]
        written=[tuple(w) for w in answer["written"]] if answer.get("written") is not None else None,  # type: ignore[misc]
    )


class OwnExecs:
    """oc-repl's own short execs into a container (a lease's renewal, a kill, a read), kept apart from a look at the
    container's processes: one of them running meanwhile would be listed, and ended, as the agent's. A look waits for
    those running (a while at most: a hung one is listed rather than waited for) and holds new ones back; the look's
    own execs, on its thread, go ahead. Those held back go before the next look: looks in a row never starve a
    lease's renewal."""

    SETTLE = 10.0  # seconds a look waits for the execs running

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._running = self._waiting = 0
        self._looker: int | None = None

    @contextmanager
    def running(self) -> Iterator[None]:
        with self._cond:
            self._waiting += 1
            while self._looker not in (None, threading.get_ident()):
                self._cond.wait()
            self._waiting -= 1
            counted = self._looker is None
            self._running += counted
        try:
            yield
        finally:
            if counted:
                with self._cond:
                    self._running -= 1
                    self._cond.notify_all()

    @contextmanager
    def look(self) -> Iterator[None]:
        with self._cond:
            while self._looker is not None or self._waiting:
                self._cond.wait()
            self._looker = threading.get_ident()
            deadline = time.monotonic() + self.SETTLE
            while self._running and (left := deadline - time.monotonic()) > 0:
                self._cond.wait(left)
        try:
            yield
        finally:
            with self._cond:
                self._looker = None
                self._cond.notify_all()


class ContainerVerdicts:
    """The docker driver's part of the verdict: the processes the agent left, their end, the verifier's run and the
    look, through oc-repl's host helper where it can run (`host`), else through the daemon and the container's sh."""

    host: HostAccess | None
    owned: bool
    baseline: list[str]
    own_execs: OwnExecs

    @metered
    def agent_processes(self, keep: frozenset[int] = frozenset()) -> list[Leftover]:
        """Every process in the container but those that ran before the sandbox opened (pid 1, an attached
        container's own services); oc-repl's channels and the protocol's terminal marked as the sandbox's own."""
        with self.own_execs.look():
            if self.host is None:
                return self._leftovers(keep, stop=False)
            servers, commands = self.channels.servers()
            return self.host.processes(self.baseline, keep, servers, commands, self._started())

    @metered
    def end_agent_processes(self) -> int:
        with self.own_execs.look():
            if self.host is not None:
                return self.host.end(self.baseline, self._started())
            if self.owned:  # nothing but its first process was there before the agent: kill(-1), until none is left
                answer = self.run_quick(leftovers.END_ALL).decode("ascii", "replace").split()
                return int(answer[-1]) if answer and answer[-1].isdigit() else 0
            self._leftovers(frozenset(), stop=True)
            return 0

    def _started(self) -> list[str]:
        """The pid files of the commands started so far: one the daemon has not spawned yet writes its own soon."""
        with self._lock:
            return [proc.pidfile for proc in self._procs]

    def run_verifier(self, job: VerifierJob) -> VerifierRun:
        return run_sealed(self, job) if self.host is not None else run_unsealed(self, job)

    def look(self) -> Look | None:
        return DockerLook(self.call, self.api, self.id, self.host)

    def _leftovers(self, keep: frozenset[int], stop: bool) -> list[Leftover]:
        """The agent's processes as a script in the container finds them (where the host helper cannot run)."""
        servers, commands = self.channels.servers()
        marker = token()
        script = leftovers.script(
            marker,
            stop=stop,
            keep=keep,
            spare=servers,
            spare_children=servers,
            commands=commands,
            baseline=self.baseline,
            started=self._started(),
        )
        answer = until_done(lambda: self.run_quick(script).decode("utf-8", "replace"), marker)
        return leftovers.parse(answer, marker)
