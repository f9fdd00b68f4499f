"""Limits on a confined local sandbox: how many processes it may have and how much memory it may use.

Both are set on a cgroup of the sandbox's own where this process may make one: cgroup v2 (at the hierarchy's root,
which needs root) or cgroup v1's `pids` and `memory` hierarchies (under this process's own cgroups, where it may
write). The sandbox's first process is moved into it before it starts anything, so every command inherits it, and
the sandbox's read-only view of /sys keeps them there. Without a cgroup, the number of processes is still limited by
RLIMIT_NPROC, which a user namespace counts per sandbox, except for root (the kernel exempts it); memory then is not
limited. `in_force()` says which holds.
"""

from __future__ import annotations

import os
import time
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from oc_repl.sandbox.local_marks import client_alive

PREFIX = "oc-repl-"
V2_PARENT = "oc-repl"
EMPTY_WITHIN = 2.0  # seconds for killed processes to leave their cgroup before it is removed


@dataclass(frozen=True)
class Limits:
    processes: int = 4096
    memory_mb: int = 4096


DEFAULT = Limits()


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, filesystem type, super options) of each cgroup filesystem this process sees."""
    found = []
    with suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            left, _, right = line.partition(" - ")
            fields, tail = left.split(), right.split()
            if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
                found.append((fields[4], tail[0], set(tail[2].split(","))))
    return found


def _own_paths() -> dict[str, str]:
    """This process's cgroup in each hierarchy: '' for v2, each controller's name for v1."""
    paths = {}
    with suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for name in controllers.split(",") if controllers else [""]:
                paths[name] = path
    return paths


def _write(path: Path, value: str) -> None:
    path.write_text(value)


def _sweep(parent: Path) -> None:
    """Remove the empty cgroups of sandboxes whose client died without removing them."""
    with suppress(OSError):
        for child in parent.glob(f"{PREFIX}*"):
            owner = child.name.removeprefix(PREFIX).rsplit("-", 1)[0]
            if not client_alive(owner):
                with suppress(OSError):
                    child.rmdir()


class SandboxCgroup:
    """The sandbox's own cgroups (one for v2; one per controller for v1) with the limits written in them."""

    def __init__(self, dirs: list[Path], kind: str, controllers: frozenset[str]) -> None:
        self.dirs = dirs
        self.kind = kind
        self.controllers = controllers  # of "pids" and "memory", those whose limit is set

    @classmethod
    def create(cls, name: str, limits: Limits) -> SandboxCgroup | None:
        """The cgroups for a sandbox named `name`, limits set, or None where this process may make none."""
        mounts = _mounts()
        for point, fstype, _options in mounts:
            if fstype == "cgroup2":
                made = cls._v2(Path(point), name, limits)
                if made is not None:
                    return made
        return cls._v1(mounts, name, limits)

    @classmethod
    def _v2(cls, point: Path, name: str, limits: Limits) -> SandboxCgroup | None:
        try:
            if not {"pids", "memory"} <= set((point / "cgroup.controllers").read_text().split()):
                return None
            parent = point / V2_PARENT
            _write(point / "cgroup.subtree_control", "+pids +memory")
            parent.mkdir(exist_ok=True)
            _write(parent / "cgroup.subtree_control", "+pids +memory")
            _sweep(parent)
            own = parent / f"{PREFIX}{name}"
            own.mkdir()
        except OSError:
            return None
        made = cls([own], "cgroup v2", frozenset({"pids", "memory"}))
        try:
            _write(own / "pids.max", str(limits.processes))
            _write(own / "memory.max", str(limits.memory_mb << 20))
            with suppress(OSError):  # without swap accounting there is no such file
                _write(own / "memory.swap.max", "0")
        except OSError:
            made.close()
            return None
        return made

    @classmethod
    def _v1(cls, mounts: list[tuple[str, str, set[str]]], name: str, limits: Limits) -> SandboxCgroup | None:
        own_paths = _own_paths()
        settings = {
            "pids": [("pids.max", str(limits.processes))],
            "memory": [
                ("memory.limit_in_bytes", str(limits.memory_mb << 20)),
                ("memory.memsw.limit_in_bytes", str(limits.memory_mb << 20)),
            ],
        }
        dirs, controllers = [], set()
        for controller, files in settings.items():
            point = next((p for p, fstype, opts in mounts if fstype == "cgroup" and controller in opts), None)
            if point is None or controller not in own_paths:
                continue
            parent = Path(point) / own_paths[controller].lstrip("/")
            _sweep(parent)
            own = parent / f"{PREFIX}{name}"
            try:
                own.mkdir()
            except OSError:
                continue
            try:
                _write(own / files[0][0], files[0][1])
                for file, value in files[1:]:
                    with suppress(OSError):  # memsw: only with swap accounting
                        _write(own / file, value)
            except OSError:
                with suppress(OSError):
                    own.rmdir()
                continue
            dirs.append(own)
            controllers.add(controller)
        return cls(dirs, "cgroup v1", frozenset(controllers)) if dirs else None

    def add(self, pid: int) -> None:
        for folder in self.dirs:
            _write(folder / "cgroup.procs", str(pid))

    def close(self) -> None:
        deadline = time.monotonic() + EMPTY_WITHIN
        for folder in self.dirs:
            while True:
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() >= deadline:
                        break
                    time.sleep(0.01)


def in_force(cgroup: SandboxCgroup | None, limits: Limits) -> tuple[str, int | None, int | None]:
    """What holds the sandbox's limits (a cgroup, an rlimit, nothing), and the process and memory limits it holds."""
    held = cgroup.controllers if cgroup is not None else frozenset()
    memory = limits.memory_mb if "memory" in held else None
    if "pids" in held:
        assert cgroup is not None
        return cgroup.kind, limits.processes, memory
    if os.geteuid() == 0:  # the kernel exempts root from RLIMIT_NPROC
        return (cgroup.kind if cgroup is not None else "none"), None, memory
    return ("rlimit" if cgroup is None else f"{cgroup.kind} and rlimit"), limits.processes, memory
