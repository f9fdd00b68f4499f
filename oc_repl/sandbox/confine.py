"""Confinement of a local sandbox with bubblewrap: the host read-only, the sandbox directory and a private /tmp
writable, the network off unless asked for, and every process of the sandbox in a pid namespace that ends with it.

One `bwrap` per sandbox holds the namespaces (mount, pid, and network unless it is on); every command enters them with
`nsenter` and runs as a fresh `bash -c` there. So, as in a container, background processes, a tmux server's socket and
the loopback are shared by all the commands of a sandbox. The holder is pid 1 inside: when it ends, the kernel kills
everything in the namespace. It ends at `close()`, or when this process dies (its stdin, a pipe only we hold, reaches
end of file), so not even a SIGKILLed client leaves a confined process behind.

Commands have no capabilities and cannot gain any: as root, a process could otherwise remount the read-only host
writable. The model's processes see only their own pid namespace, so they cannot signal or trace the
host's processes either.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import shutil
import struct
import subprocess
import sys
import tempfile
from contextlib import suppress
from pathlib import Path
from typing import IO

from oc_repl.errors import ConfinementUnavailable, SandboxError
from oc_repl.sandbox.local_marks import client_alive, client_id

TOOLS = ("bwrap", "nsenter", "setpriv")
START_TIMEOUT = 30.0  # generous: a loaded machine can take seconds to set up namespaces
# bubblewrap remounts the host's mounts read-only one by one; one that ends meanwhile (a container's, as a container
# stops) fails the start with this. Nothing was confined yet, so the start is simply tried again.
_MOUNT_RACE = "Can't bind mount /oldroot/ on /newroot/"
START_ATTEMPTS = 3
TMP_PREFIX = "oc-repl-tmp-"
_NS_GET_USERNS = 0xB701  # ioctl: the user namespace that owns a namespace
_TIOCSPTLCK, _TIOCGPTPEER = 0x40045431, 0x5441  # ioctls: unlock a pty, open its other end

# pid 1 of the sandbox: reaps every orphan (as an init must) and ends at end of file on stdin. Inside the namespace it
# receives only the signals it handles, so the model cannot end it: SIGINT is ignored rather than left to Python.
_HOLDER = (
    "import os, signal\n"
    "def reap(*_):\n"
    "    try:\n"
    "        while os.waitpid(-1, os.WNOHANG)[0]: pass\n"
    "    except ChildProcessError: pass\n"
    "signal.signal(signal.SIGCHLD, reap)\n"
    "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
    "os.write(1, b'ready')\n"
    "while os.read(0, 512): pass\n"
)


def check() -> tuple[bool, str]:
    """Whether local sandboxes can be confined here, and why not (or what confines them)."""
    with tempfile.TemporaryDirectory(prefix="oc-repl-check-") as work:
        try:
            confinement = Confinement(Path(work), network=False)
            confinement.ready()
        except SandboxError as exc:
            return False, exc.message
        try:
            argv = [*confinement.prefix(work), "bash", "-c", "touch ok"]
            result = subprocess.run(argv, capture_output=True, timeout=START_TIMEOUT, cwd="/")
            if result.returncode != 0 or not (Path(work) / "ok").exists():
                reason = result.stderr.decode("utf-8", "replace").strip() or f"exit code {result.returncode}"
                return False, f"a command cannot enter the confinement: {reason}"
        except (OSError, subprocess.TimeoutExpired) as exc:
            return False, f"a command cannot enter the confinement: {exc}"
        finally:
            confinement.close()
    return True, "bubblewrap confines local: sandboxes"


def _python() -> str:
    """An interpreter the sandbox can run: a virtual environment's python is a link into the base installation."""
    return os.path.realpath(sys.executable)


class Confinement:
    """The namespaces of one sandbox: `prefix(cwd)` is what runs a program in them, `close()` ends them all."""

    def __init__(self, root: Path, network: bool) -> None:
        """Starts bubblewrap and returns at once: `ready()` waits for it, so the caller can do other work meanwhile."""
        self.root = root
        self.network = network
        self.tmp = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{client_id()}-")).resolve()
        self._fds: dict[str, int] = {}
        self._pts: int | None = None
        self._info: IO[bytes] | None = None  # bubblewrap's report, read by ready()
        self._entered = False
        try:
            self._spawn()
        except BaseException:
            self.close()
            raise

    def ready(self) -> None:
        """Wait until the namespaces exist and are entered (at once after the first time). A ConfinementUnavailable
        when bubblewrap cannot confine here; the start that met the mount race is tried again."""
        if self._entered:
            return
        try:
            for attempt in range(1, START_ATTEMPTS + 1):
                try:
                    self._finish()
                    break
                except ConfinementUnavailable as exc:
                    if attempt == START_ATTEMPTS or _MOUNT_RACE not in exc.message:
                        raise
                    self._spawn()
        except BaseException:
            self.close()
            raise
        self._entered = True

    def mounts(self) -> list[tuple[Path, Path]]:
        """(path inside, host directory) of the writable places, the deeper mount last (it hides the other)."""
        places = [(Path("/tmp"), self.tmp), (self.root, self.root)]
        return sorted(places, key=lambda place: (len(place[0].parts), place[1] is self.root))

    def host_path(self, inside: Path) -> Path | None:
        """Where an absolute, normalised path inside the sandbox is on the host, if it is in a writable place."""
        for place, host in reversed(self.mounts()):
            if inside == place or place in inside.parents:
                return host / inside.relative_to(place)
        return None

    def _spawn(self) -> None:
        # Found once, by our own PATH: a command's environment may name another (or none).
        self._tools = {tool: shutil.which(tool) or "" for tool in TOOLS}
        missing = [tool for tool, path in self._tools.items() if not path]
        if missing:
            raise ConfinementUnavailable(f"{', '.join(missing)} not found (bubblewrap and util-linux provide them)")
        argv = [self._tools["bwrap"], "--unshare-pid", "--as-pid-1", "--cap-drop", "ALL", "--ro-bind", "/", "/"]
        argv += ["--dev", "/dev", "--proc", "/proc"] + ([] if self.network else ["--unshare-net"])
        for inside, host in self.mounts():
            argv += ["--bind", str(host), str(inside)]
        # The report goes to a file, not a pipe: bubblewrap writes it before it lets the sandbox's first process go on,
        # and a pipe whose reader went away (a run that ended, or was killed, before it looked) would kill bubblewrap
        # right there and leave that process waiting for it for ever.
        info = tempfile.TemporaryFile()  # noqa: SIM115 (kept open until ready() reads it)
        hold_read, self._hold = os.pipe()
        try:
            self._bwrap = subprocess.Popen(
                [*argv, "--info-fd", str(info.fileno()), "--", _python(), "-I", "-S", "-c", _HOLDER],
                stdin=hold_read,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=[info.fileno()],
                cwd="/",
                start_new_session=True,
            )
        except OSError as exc:
            info.close()
            raise ConfinementUnavailable(f"cannot start bubblewrap: {exc}") from exc
        finally:
            os.close(hold_read)
        self._info = info

    def _finish(self) -> None:
        info_file, self._info = self._info, None
        assert info_file is not None
        with info_file:
            ready = self._read_ready()  # the holder runs: bubblewrap has written its report by then
            info_file.seek(0)
            info = json.loads(info_file.read() or b"{}") if ready else {}
        if not ready:
            raise ConfinementUnavailable(f"bubblewrap cannot confine the sandbox: {self._failure()}")
        assert self._bwrap.stdout is not None and self._bwrap.stderr is not None
        self._bwrap.stdout.close()
        self._bwrap.stderr.close()
        try:
            self._enter(info)
        except OSError as exc:
            raise ConfinementUnavailable(f"cannot enter the sandbox's namespaces: {exc}") from exc

    def _failure(self) -> str:
        """What bubblewrap said when it gave up (a holder that never started ends at the end of its stdin)."""
        self._end_holder()
        try:
            _, err = self._bwrap.communicate(timeout=START_TIMEOUT)
        except subprocess.TimeoutExpired:
            self._bwrap.kill()
            _, err = self._bwrap.communicate()
            return f"it did not start within {START_TIMEOUT:.0f} s"
        return err.decode("utf-8", "replace").strip() or f"exit code {self._bwrap.returncode}"

    def _end_holder(self) -> None:
        hold, self._hold = getattr(self, "_hold", None), None
        if hold is not None:
            os.close(hold)  # the holder reads end of file and ends; the kernel then kills the namespace

    def _read_ready(self) -> bool:
        assert self._bwrap.stdout is not None
        readable, _, _ = select.select([self._bwrap.stdout], [], [], START_TIMEOUT)
        return bool(readable) and os.read(self._bwrap.stdout.fileno(), 16) == b"ready"

    def _enter(self, info: dict) -> None:
        """Open the holder's namespaces, checked against what bubblewrap reported (a pid alone could be reused)."""
        holder = info.get("child-pid")
        # Opened before the namespaces are checked: the check then proves that the pid was the holder's all along.
        self._pts = os.open(f"/proc/{holder}/root/dev/pts", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        kinds = {"mnt": "mnt-namespace", "pid": "pid-namespace"} | ({} if self.network else {"net": "net-namespace"})
        for kind, key in kinds.items():
            fd = os.open(f"/proc/{holder}/ns/{kind}", os.O_RDONLY | os.O_CLOEXEC)
            self._fds[kind] = fd
            if os.fstat(fd).st_ino != info.get(key):
                raise SandboxError("the sandbox's namespaces vanished while it started")
        # Without privileges bubblewrap owns the namespaces by one user namespace and runs the sandbox in a child of it
        # (there it maps back to our own uid): commands join the owner to enter the namespaces, then the child.
        owner = fcntl.ioctl(self._fds["mnt"], _NS_GET_USERNS)
        os.set_inheritable(owner, False)
        self._fds["user"] = owner
        self._own_user = os.fstat(owner).st_ino == os.stat("/proc/self/ns/user").st_ino
        self._nested_user = os.stat(f"/proc/{holder}/ns/user").st_ino != os.fstat(owner).st_ino

    def openpty(self) -> tuple[int, int]:
        """A pty of the sandbox's own /dev/pts, so that a program inside finds its terminal by name (`tty`)."""
        master = os.open("ptmx", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC, dir_fd=self._pts)
        try:
            fcntl.ioctl(master, _TIOCSPTLCK, struct.pack("i", 0))
            return master, fcntl.ioctl(master, _TIOCGPTPEER, os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
        except OSError:
            os.close(master)
            raise

    def alive(self) -> bool:
        return self._bwrap.poll() is None

    def prefix(self, cwd: str) -> list[str]:
        """The argv that runs a program in the namespaces, in `cwd` (a path as the sandbox sees it)."""
        me = os.getpid()
        names = {"mnt": "mount", "pid": "pid", "net": "net"}
        nsenter = self._tools["nsenter"]
        argv = [nsenter] + [f"--{names[k]}=/proc/{me}/fd/{fd}" for k, fd in self._fds.items() if k in names]
        if not self._own_user:
            argv += [f"--user=/proc/{me}/fd/{self._fds['user']}", "--preserve-credentials"]
        argv += [f"--wdns={cwd}", "--"]
        if self._nested_user:  # pid 1 is the holder, already in the namespace, so this cannot be forged
            argv += [nsenter, "--target=1", "--user", "--preserve-credentials", "--"]
        if self._own_user and os.geteuid() == 0:
            # Root keeps its capabilities through nsenter; without them it can gain none again. As anyone else, the
            # program starts without capabilities, and the mounts are nosuid: nothing can raise it.
            argv += [self._tools["setpriv"], "--no-new-privs", "--bounding-set=-all", "--inh-caps=-all", "--"]
        return argv

    def close(self) -> None:
        """End every process of the sandbox and remove its private /tmp (whether it got ready or not)."""
        self._end_holder()
        bwrap = getattr(self, "_bwrap", None)
        if bwrap is not None:
            try:
                bwrap.wait(START_TIMEOUT)
            except subprocess.TimeoutExpired:
                bwrap.kill()
                bwrap.wait()
            for pipe in (bwrap.stdout, bwrap.stderr):
                if pipe is not None:
                    pipe.close()
        if self._info is not None:
            self._info.close()
            self._info = None
        for fd in [*self._fds.values(), *([self._pts] if self._pts is not None else [])]:
            os.close(fd)
        self._fds.clear()
        self._pts = None
        remove_tree(self.tmp)


def remove_tree(path: Path) -> None:
    """Remove a directory the model wrote in, whatever permissions it left inside (its processes are gone by now)."""
    with suppress(OSError):
        path.chmod(0o700)
    for folder, dirs, _files in os.walk(path):
        for name in dirs:
            child = Path(folder, name)
            if not child.is_symlink():  # a link's target is no business of ours
                with suppress(OSError):
                    child.chmod(0o700)
    shutil.rmtree(path, ignore_errors=True)


def sweep_private_tmps() -> None:
    """Remove the private /tmp directories of clients that died without closing their sandboxes."""
    base = Path(tempfile.gettempdir())
    for path in base.glob(f"{TMP_PREFIX}*"):
        owner = path.name.removeprefix(TMP_PREFIX).rsplit("-", 1)[0]
        with suppress(OSError):
            if path.stat().st_uid == os.geteuid() and not client_alive(owner):
                remove_tree(path)
