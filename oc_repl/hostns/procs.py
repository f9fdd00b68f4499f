"""A container's processes as the host's /proc and cgroups show them: which they are (its cgroups: a process cannot
leave them), what each one is, and their end, all frozen first so that none forks or hides meanwhile.

Every read goes through a descriptor of the host's /proc opened before the helper joins any namespace, so it stays
the host's view whatever the helper's root is later.
"""

from __future__ import annotations

import os
import re
import signal
import stat
import time
from collections.abc import Iterator

from oc_repl.hostns import linux

FREEZE_WITHIN = 10.0  # seconds to wait for a cgroup to report frozen
MAX_FILES = 32
PROGRAM = 65536  # bytes read of the script an interpreter runs
_INTERPRETER = re.compile(r"^(python[\d.]*|bash|sh|dash|perl[\d.]*|node|ruby[\d.]*)$")


class HostProc:
    """The host's /proc, read through a descriptor."""

    def __init__(self) -> None:
        self.fd = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def text(self, path: str) -> str:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC, dir_fd=self.fd)
        try:
            chunks = []
            while chunk := os.read(fd, 1 << 16):
                chunks.append(chunk)
            return b"".join(chunks).decode("utf-8", "surrogateescape")
        finally:
            os.close(fd)

    def link(self, path: str) -> str:
        return os.readlink(path, dir_fd=self.fd)

    def listdir(self, path: str) -> list[str]:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=self.fd)
        try:
            return os.listdir(fd)
        finally:
            os.close(fd)

    def inode(self, path: str) -> int:
        return os.stat(path, dir_fd=self.fd).st_ino

    def pids(self) -> Iterator[int]:
        for name in os.listdir(self.fd):
            if name.isdigit():
                yield int(name)

    def status(self, pid: int) -> dict[str, str]:
        found = {}
        for line in self.text(f"{pid}/status").splitlines():
            key, _, value = line.partition(":")
            found[key] = value.strip()
        return found

    def start_time(self, pid: int) -> str:
        return self.text(f"{pid}/stat").rsplit(")", 1)[-1].split()[19]


def _mounts(proc: HostProc) -> list[tuple[str, str, set[str]]]:
    """(mount point, fs type, super options) of the host's cgroup mounts."""
    found = []
    for line in proc.text("self/mountinfo").splitlines():
        head, _, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if len(rest) >= 3 and rest[0] in ("cgroup", "cgroup2"):
            found.append((fields[4], rest[0], set(rest[2].split(","))))
    return found


def cgroup_dirs(proc: HostProc, pid: int) -> dict[str, str]:
    """The directories of the cgroups of `pid`, by controller ("" for the unified hierarchy; "name=systemd" style
    names for named ones)."""
    mounts = _mounts(proc)
    found = {}
    for line in proc.text(f"{pid}/cgroup").splitlines():
        _, controllers, path = line.split(":", 2)
        if not controllers:
            where = next((m for m, kind, _ in mounts if kind == "cgroup2"), None)
            if where is not None:
                found[""] = where + path
            continue
        wanted = set(controllers.split(","))
        where = next((m for m, kind, opts in mounts if kind == "cgroup" and wanted <= opts), None)
        if where is not None:
            for controller in wanted:
                found[controller] = where + path
    return found


def join_cgroups(dirs: dict[str, str]) -> None:
    """Put this process into the cgroups `dirs` names (each once): their limits hold for what it starts."""
    pid = str(os.getpid()).encode()
    for directory in sorted(set(dirs.values())):
        try:
            fd = os.open(f"{directory}/cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        try:
            os.write(fd, pid)
        finally:
            os.close(fd)


def members(dirs: dict[str, str]) -> list[int]:
    """Every process (host pid) in the cgroup tree of `dirs` (one hierarchy is enough: all hold the same)."""
    root = dirs.get("pids") or dirs.get("") or dirs.get("memory") or next(iter(dirs.values()), "")
    found: set[int] = set()
    for directory, _subdirs, files in os.walk(root):
        if "cgroup.procs" in files:
            try:
                with open(f"{directory}/cgroup.procs") as f:
                    found.update(int(line) for line in f if line.strip())
            except OSError:
                continue
    return sorted(found)


class Frozen:
    """The cgroup tree frozen while the block runs (the freezer of cgroup v1, or cgroup.freeze of v2): no process in
    it runs, forks or exits meanwhile. Without a freezer it does nothing, and `held` says so."""

    def __init__(self, dirs: dict[str, str]) -> None:
        self.v1 = dirs.get("freezer")
        self.v2 = dirs.get("") if self.v1 is None else None
        self.held = False

    def __enter__(self) -> Frozen:
        if self.v1 is not None:
            self.held = self._set(f"{self.v1}/freezer.state", "FROZEN", f"{self.v1}/freezer.state", "FROZEN")
        elif self.v2 is not None:
            self.held = self._set(f"{self.v2}/cgroup.freeze", "1", f"{self.v2}/cgroup.events", "frozen 1")
        return self

    def __exit__(self, *exc: object) -> None:
        if self.v1 is not None:
            self._write(f"{self.v1}/freezer.state", "THAWED")
        elif self.v2 is not None:
            self._write(f"{self.v2}/cgroup.freeze", "0")

    @staticmethod
    def _write(path: str, value: str) -> bool:
        try:
            with open(path, "w") as f:
                f.write(value)
            return True
        except OSError:
            return False

    def _set(self, path: str, value: str, state: str, done: str) -> bool:
        if not self._write(path, value):
            return False
        deadline = time.monotonic() + FREEZE_WITHIN
        while time.monotonic() < deadline:
            try:
                with open(state) as f:
                    if done in f.read():
                        return True
            except OSError:
                return False
            time.sleep(0.002)
        return False


def describe(proc: HostProc, pid: int) -> dict | None:
    """What a process is, as the container sees it (pids as its own namespace numbers them, paths from its root):
    None once it is gone."""
    try:
        status = proc.status(pid)
        ns_pid = int(status.get("NSpid", str(pid)).split()[-1])
        where = _live_thread(proc, pid, status)
        argv = proc.text(f"{where}/cmdline").rstrip("\0").split("\0")
        parent = int(status.get("PPid", "0"))
        try:
            parent = int(proc.status(parent).get("NSpid", "0").split()[-1]) if parent else 0
        except (OSError, ValueError):
            parent = 0
        threads = int(status.get("Threads", "1") or 1)
        start = proc.start_time(pid)
    except (OSError, ValueError, IndexError):
        return None
    try:
        cwd = proc.link(f"{where}/cwd")
    except OSError:
        cwd = ""
    files = set()
    try:
        for fd in proc.listdir(f"{where}/fd"):
            try:
                target = proc.link(f"{where}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("/") and not target.startswith(("/dev/", "/proc/")):
                files.add(target)
    except OSError:
        pass
    command = " ".join(argv) if any(argv) else f"[{status.get('Name', '?')}]"
    program = _program(proc, where, argv)
    return {
        "pid": ns_pid,
        "host_pid": pid,
        "parent": parent,
        "start": start,
        "state": status.get("State", "")[:1],
        "threads": threads,  # a zombie leader whose other threads still run is alive: it is counted, not skipped
        "command": command,
        "cwd": cwd,
        "files": sorted(files)[:MAX_FILES],
        "program": program,
    }


def _program(proc: HostProc, where: str, argv: list[str]) -> str:
    """The start of the script an interpreter runs (`python3 /opt/x.py`), read inside the process's own root."""
    if not _INTERPRETER.match(os.path.basename(argv[0]) if argv else ""):
        return ""
    script = next((a for a in argv[1:] if a and not a.startswith("-")), "")
    if not script:
        return ""
    try:
        root = os.open(f"{where}/root", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=proc.fd)
    except OSError:
        return ""
    try:
        path = script if script.startswith("/") else os.path.join(proc.link(f"{where}/cwd"), script)
        fd = linux.open_in_root(root, path)
        try:
            return os.read(fd, PROGRAM).decode("utf-8", "replace") if stat.S_ISREG(os.fstat(fd).st_mode) else ""
        finally:
            os.close(fd)
    except OSError:
        return ""
    finally:
        os.close(root)


def _live_thread(proc: HostProc, pid: int, status: dict[str, str]) -> str:
    """Where in /proc a process can be read: its own entry, or for a first thread that ended while others run (the
    entry then shows a zombie with no command line) the entry of one of those others."""
    if not status.get("State", "").startswith("Z"):
        return str(pid)
    try:
        others = [t for t in proc.listdir(f"{pid}/task") if t != str(pid)]
    except OSError:
        others = []
    return f"{pid}/task/{others[0]}" if others else str(pid)


def alive(proc: HostProc, pid: int) -> bool:
    """A process that can still act: not gone, and not a zombie unless threads of it still run."""
    try:
        status = proc.status(pid)
    except OSError:
        return False
    if not status.get("State", "").startswith("Z"):
        return True
    return int(status.get("Threads", "1") or 1) > 1  # the exited leader counts as one of them


def kill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
