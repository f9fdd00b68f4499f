"""Confinement of a local sandbox with bubblewrap: a user, pid, mount, ipc and uts namespace of its own (and a network
namespace unless the network is asked for), the view of the host that local_view.py describes, and limits.

bubblewrap starts the sandbox's first process (local_init.py) as pid 1 of those namespaces, with no capabilities, no
way to gain any and no way to make further user namespaces. Every command, and every file the client reads or writes,
goes through that process, so all of it happens inside. The process runs in the sandbox's cgroup when one can be made
(limits.py), and everything it starts inherits it.

Ending the sandbox kills its first process from outside, through a pidfd checked against the namespace bubblewrap
reported: the kernel then kills every process of the namespace, stopped or traced ones and those holding anything
open included. bubblewrap also kills it if this process dies (`--die-with-parent`), and it exits on its own when the
socket to this process closes.
"""

from __future__ import annotations

import contextlib
import json
import marshal
import os
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import uuid
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from functools import lru_cache
from pathlib import Path
from typing import IO

from oc_repl.errors import ConfinementUnavailable, SandboxError
from oc_repl.sandbox import limits as sandbox_limits
from oc_repl.sandbox import local_vcs, local_view
from oc_repl.sandbox.init_channel import InitChannel
from oc_repl.sandbox.local_marks import client_alive, client_id

START_TIMEOUT = 30.0  # generous: a loaded machine can take seconds to set up namespaces
# bubblewrap remounts the host's mounts read-only one by one; one that ends meanwhile (a container's, as a container
# stops) fails the start with this. Nothing was confined yet, so the start is simply tried again.
_RETRY_ON = ("Can't bind mount /oldroot/", "Can't create file at", "Can't mkdir")
START_ATTEMPTS = 3


# The first process's program comes from a file descriptor, so its command line (what `ps` shows inside) stays short.
# The verifier's own directory inside: a read-only bind of one of the client's, so nothing of the sandbox can change
# what the verifier reads there, nor move it (a mount point, in /run, itself one of the sandbox's own places).
VERIFIER_HOME = "/run/oc-repl-verifier"
BOOT = "import os,sys;exec(compile(os.pread(int(sys.argv[1]),1<<20,0),'oc-repl-init','exec'))"


@lru_cache(maxsize=1)
def init_program() -> bytes:
    """The first process's program: its evidence operations (local_init_look.py), then the process itself."""
    here = Path(__file__).parent
    return (here / "local_init_look.py").read_bytes() + b"\n" + (here / "local_init.py").read_bytes()


# bubblewrap is started from this one thread, which lives as long as the process: `--die-with-parent` kills the
# sandbox when the *thread* that started it ends, and starting it off the caller's thread lets the caller do other
# work while bubblewrap sets up (the layout takes a few milliseconds to read, the namespaces longer).
_LAUNCHER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="oc-repl-confine")


def _read_report(report: IO[bytes]) -> dict:
    """bubblewrap's JSON report, read as soon as it is whole (bubblewrap keeps the pipe open while it runs)."""
    data = b""
    decoder = json.JSONDecoder()
    while select.select([report], [], [], START_TIMEOUT)[0]:
        chunk = os.read(report.fileno(), 4096)
        if not chunk:
            break
        data += chunk
        with suppress(ValueError):
            found, _ = decoder.raw_decode(data.decode("utf-8", "replace").strip())
            return found if isinstance(found, dict) else {}
    return {}


def check() -> tuple[bool, str]:
    """Whether local sandboxes can be confined here, and why not (or what confines them)."""
    with tempfile.TemporaryDirectory(prefix="oc-repl-check-") as work:
        try:
            confinement = Confinement(Path(work), network=False)
            confinement.ready()
        except SandboxError as exc:
            return False, exc.message
        try:
            answer = confinement.channel.request("open", path=f"{work}/ok", write=True)[1]
            for fd in answer:
                os.close(fd)
            if not (Path(work) / "ok").exists():
                return False, "a file written inside the confinement did not reach the sandbox directory"
        except SandboxError as exc:
            return False, f"the confinement does not answer: {exc.message}"
        finally:
            confinement.close()
    return True, "bubblewrap confines local: sandboxes"


VERIFIER_PREFIX = "oc-repl-verifier-"  # then the client's id (local_marks.client_id), a dash, mkdtemp's letters


def _verifier_dir() -> Path:
    """A new verifier directory, named after this client; those of clients that died without closing their sandbox
    (a SIGKILLed run) are removed first, as local_marks.sweep ends their processes."""
    for path in Path(tempfile.gettempdir()).glob(f"{VERIFIER_PREFIX}*-*"):
        client = path.name.removeprefix(VERIFIER_PREFIX).rpartition("-")[0]
        with contextlib.suppress(OSError):
            if not client_alive(client) and path.stat().st_uid == os.getuid():
                shutil.rmtree(path, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"{VERIFIER_PREFIX}{client_id()}-"))


class Confinement:
    """The namespaces of one sandbox and the channel to their first process; `close()` ends them all."""

    def __init__(
        self,
        root: Path,
        network: bool,
        writable_vcs: bool = False,
        limits: sandbox_limits.Limits = sandbox_limits.DEFAULT,
        private_files: Sequence[Path] = (),
    ) -> None:
        """Starts bubblewrap and returns at once: `ready()` waits for it, so the caller can do other work meanwhile.
        `private_files`: the client's own that the sandbox must not read (local_view.client_files)."""
        self.root = root
        self.network = network
        self.writable_vcs = writable_vcs
        self.private_files = list(private_files)
        self.limits = limits
        self.cgroup: sandbox_limits.SandboxCgroup | None = None
        self.channel: InitChannel | None = None  # type: ignore[assignment]
        self.writable: list[Path] = []  # where its commands may create files, once it started (local_view)
        # the version-control names bubblewrap will make a placeholder's mount point for, removed at the end
        self.placeholders = [] if writable_vcs else local_vcs.placeholders(root)
        # the host's side of the verifier's own directory (VERIFIER_HOME inside), the client's alone
        self.verifier_dir = _verifier_dir()
        self._pidfd: int | None = None
        self._entered = False
        self._lock = threading.Lock()
        # Found once, by our own PATH (a command's environment may name another, or none), and at once: a missing
        # bubblewrap is said before anything else starts.
        self._bwrap_path = shutil.which("bwrap")
        if not self._bwrap_path:
            shutil.rmtree(self.verifier_dir, ignore_errors=True)
            raise ConfinementUnavailable("bwrap not found (bubblewrap provides it)")
        try:
            layout = self._prepare()
        except BaseException:
            shutil.rmtree(self.verifier_dir, ignore_errors=True)
            raise
        self._started: Future[None] = _LAUNCHER.submit(self._spawn, *layout)

    def ready(self) -> None:
        """Wait until the first process answers (at once after the first time). A ConfinementUnavailable when
        bubblewrap cannot confine here; a start that met a race with the host's mounts is tried again."""
        if self._entered:
            return
        try:
            for attempt in range(1, START_ATTEMPTS + 1):
                try:
                    self._started.result(START_TIMEOUT)
                    self._finish()
                    break
                except ConfinementUnavailable as exc:
                    if attempt == START_ATTEMPTS or not any(text in exc.message for text in _RETRY_ON):
                        raise
                    self._end()
                    self._release_cgroup()
                    self._started = _LAUNCHER.submit(self._spawn, *self._prepare())
        except BaseException:
            self.close()
            raise
        self._entered = True

    def _prepare(self) -> tuple[list[str], str]:
        """The view of the host bubblewrap makes and the Python the first process runs, and the sandbox's cgroup: made
        on the caller's thread before the launcher's starts bubblewrap. Both take hundreds of system calls, and on the
        launcher's thread each would wait for the interpreter's lock again while the caller imports (ten times as
        long; bubblewrap started that much later)."""
        mounts, python = local_view.mount_args(
            self.root, self.network, self.writable_vcs, self.limits.memory_mb, self.private_files
        )
        mounts += ["--ro-bind", str(self.verifier_dir), VERIFIER_HOME]  # the verifier's own files, read-only inside
        self.cgroup = sandbox_limits.SandboxCgroup.create(f"{client_id()}-{uuid.uuid4().hex[:12]}", self.limits)
        return mounts, python

    def _spawn(self, mounts: list[str], python: str) -> None:
        self.writable = local_view.writable_places(mounts)
        argv = [self._bwrap_path, "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
        argv += ["--unshare-cgroup-try", "--disable-userns", "--die-with-parent", "--as-pid-1", "--cap-drop", "ALL"]
        # the first process keeps the verifier's seal (local_init.py seal_setup), and as root what it needs to keep
        # root's commands from it
        argv += ["--cap-add", "CAP_WAKE_ALARM", *(["--cap-add", "CAP_SETPCAP"] if os.geteuid() == 0 else [])]
        argv += [] if self.network else ["--unshare-net"]
        argv += mounts
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # bubblewrap reports the first process's pid before it lets that process go on. The report is read here, at
        # once, on the thread that lives as long as this process: so the sandbox's cgroup is joined while its first
        # process starts, and the reader never goes away before bubblewrap has written (a closed pipe would kill it
        # there, its half-made sandbox waiting on it).
        info_read, info_write = os.pipe()
        settings = marshal.dumps({"channel": theirs.fileno(), "processes": self.limits.processes}).hex()
        program = os.memfd_create("oc-repl-init", 0)
        os.write(program, init_program())
        try:
            self._bwrap = subprocess.Popen(
                [*argv, "--info-fd", str(info_write), "--", python, "-I", "-S", "-c", BOOT, str(program), settings],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                pass_fds=[info_write, theirs.fileno(), program],
                cwd="/",
                env={"PATH": local_view.DEFAULT_PATH},
                start_new_session=True,
            )
        except OSError as exc:
            os.close(info_read)
            ours.close()
            raise ConfinementUnavailable(f"cannot start bubblewrap: {exc}") from exc
        finally:
            for fd in (info_write, program):
                os.close(fd)
            theirs.close()
        self.channel = InitChannel(ours, name=f"oc-repl-init-{self._bwrap.pid}")
        with os.fdopen(info_read, "rb") as report:
            info = _read_report(report)
        if not isinstance(info.get("child-pid"), int):
            return  # bubblewrap failed, and ready() says why
        try:
            self._pin(info)
            if self.cgroup is not None:
                self.cgroup.add(info["child-pid"])
        except (ProcessLookupError, FileNotFoundError):
            # the first process ended as it started (its mounts met a race with the host's, say), so it cannot be
            # pinned or join its cgroup: bubblewrap ends with it, and ready() says why or starts it again
            pass

    def _finish(self) -> None:
        assert self.channel is not None
        if not self.channel.wait_ready(START_TIMEOUT, alive=lambda: self._bwrap.poll() is None):
            raise ConfinementUnavailable(f"bubblewrap cannot confine the sandbox: {self._failure()}")
        assert self._bwrap.stderr is not None
        self._bwrap.stderr.close()
        if self._pidfd is None:
            raise ConfinementUnavailable("bubblewrap did not say which process is the sandbox's first")

    def _pin(self, info: dict) -> None:
        """A pidfd of the first process, proven to be it: its pid namespace is the one bubblewrap reported."""
        holder = info.get("child-pid")
        if not isinstance(holder, int):
            raise OSError("bubblewrap reported no child pid")
        pidfd = os.pidfd_open(holder)
        try:
            if os.stat(f"/proc/{holder}/ns/pid").st_ino != info.get("pid-namespace"):
                raise OSError("the sandbox's namespaces vanished while it started")
        except BaseException:
            os.close(pidfd)
            raise
        self._pidfd = pidfd

    def _failure(self) -> str:
        """What bubblewrap said when it gave up."""
        try:
            _, err = self._bwrap.communicate(timeout=START_TIMEOUT)
        except subprocess.TimeoutExpired:
            self._bwrap.kill()
            self._bwrap.communicate()
            return f"it did not start within {START_TIMEOUT:.0f} s"
        return err.decode("utf-8", "replace").strip() or f"exit code {self._bwrap.returncode}"

    def alive(self) -> bool:
        return self._bwrap.poll() is None and self.channel is not None and not self.channel.gone

    def limits_in_force(self) -> tuple[str, int | None, int | None]:
        return sandbox_limits.in_force(self.cgroup, self.limits)

    def _end(self) -> None:
        """Kill the first process (and with it the namespace) and let go of bubblewrap."""
        with suppress(Exception):  # a start that failed left nothing to end
            self._started.result(START_TIMEOUT)
        with self._lock:
            pidfd, self._pidfd = self._pidfd, None
        bwrap = getattr(self, "_bwrap", None)
        if pidfd is not None:
            with suppress(OSError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            os.close(pidfd)
        elif bwrap is not None and bwrap.poll() is None:  # not started yet: its group is bubblewrap's own
            with suppress(OSError):
                os.killpg(bwrap.pid, signal.SIGKILL)
        if self.channel is not None:
            self.channel.close()
        if bwrap is not None:
            try:
                bwrap.wait(START_TIMEOUT)
            except subprocess.TimeoutExpired:
                bwrap.kill()
                bwrap.wait()
            if bwrap.stderr is not None:
                bwrap.stderr.close()

    def close(self) -> None:
        """End every process of the sandbox (whether it got ready or not) and remove its cgroup, the mount points
        of its placeholders and the verifier's directory."""
        self._end()
        self._release_cgroup()
        local_vcs.remove_placeholders(self.placeholders)
        shutil.rmtree(self.verifier_dir, ignore_errors=True)

    def _release_cgroup(self) -> None:
        if self.cgroup is not None:
            self.cgroup.close()
            self.cgroup = None
