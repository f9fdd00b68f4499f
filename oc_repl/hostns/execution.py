"""What a `docker exec` of a container gets, read from its first process by the host helper before it joins anything:
its capabilities' bounding set, seccomp filters, AppArmor profile (or SELinux label), resource limits, cgroups and
no_new_privs; and its users, as the container's own /etc/passwd and /etc/group name them."""

from __future__ import annotations

import resource

from oc_repl.hostns import linux
from oc_repl.hostns.procs import HostProc, cgroup_dirs

# /proc/PID/limits names each limit; prlimit() of another process needs CAP_SYS_RESOURCE, which root may lack
_LIMITS = {  # Linux's numbers (the resource module names only some of them)
    "Max cpu time": 0,
    "Max file size": 1,
    "Max data size": 2,
    "Max stack size": 3,
    "Max core file size": 4,
    "Max resident set": 5,
    "Max processes": 6,
    "Max open files": 7,
    "Max locked memory": 8,
    "Max address space": 9,
    "Max file locks": 10,
    "Max pending signals": 11,
    "Max msgqueue size": 12,
    "Max nice priority": 13,
    "Max realtime priority": 14,
    "Max realtime timeout": 15,
}


def _limits(text: str) -> dict[int, tuple[int, int]]:
    found = {}
    for line in text.splitlines()[1:]:
        name = next((n for n in _LIMITS if line.startswith(n)), None)
        if name is None:
            continue
        soft, hard = line[len(name) :].split()[:2]
        found[_LIMITS[name]] = tuple(resource.RLIM_INFINITY if v == "unlimited" else int(v) for v in (soft, hard))
    return found  # type: ignore[return-value]


class Facts:
    """What a `docker exec` of the container gets, read from its first process before anything is joined."""

    def __init__(self, proc: HostProc, pid: int) -> None:
        status = proc.status(pid)
        self.bounding = int(status.get("CapBnd", "0"), 16)
        self.no_new_privs = status.get("NoNewPrivs") == "1"
        self.filters = linux.seccomp_filters(pid) if status.get("Seccomp", "0") != "0" else []
        try:
            self.label = proc.text(f"{pid}/attr/current").strip("\0\n ")
        except OSError:
            self.label = ""
        self.limits = _limits(proc.text(f"{pid}/limits"))
        self.cgroups = cgroup_dirs(proc, pid)
        own = int(proc.status("self").get("CapBnd", "0"), 16)
        # the seal: a capability we hold and the container's processes cannot (WAKE_ALARM unless it is theirs)
        spare = [c for c in range(linux.last_cap() + 1) if own >> c & 1 and not self.bounding >> c & 1]
        self.seal = linux.CAP_WAKE_ALARM if linux.CAP_WAKE_ALARM in spare else (spare[0] if spare else None)
        if self.bounding >> linux.CAP_SYS_PTRACE & 1:  # the container's processes may trace anything: there is no seal
            self.seal = None

    def profile(self) -> str:
        """The AppArmor profile (or SELinux label) the container's processes run under; "" for none."""
        label = self.label.removesuffix(" (enforce)").removesuffix(" (complain)")
        return "" if label in ("", "unconfined") else label


def user(name: str) -> tuple[int, int, list[int], str]:
    """uid, gid, groups and home of `name` (`user`, `uid`, `user:group`), as the container's own /etc/passwd and
    /etc/group say, as docker resolves an exec's user; read once the helper is in the container's filesystem."""
    name, _, group = name.partition(":")

    def table(path: str) -> list[list[str]]:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                return [line.rstrip("\n").split(":") for line in f]
        except OSError:
            return []

    entry = next((e for e in table("/etc/passwd") if len(e) >= 7 and name in (e[0], e[2])), None)
    if entry is None and not name.isdigit():
        raise OSError(f"no user {name!r} in the container's /etc/passwd")
    uid = int(entry[2]) if entry else int(name)
    gid = int(entry[3]) if entry else uid
    groups = {gid}
    for fields in table("/etc/group"):
        if len(fields) >= 4 and fields[2].isdigit() and entry and entry[0] in fields[3].split(","):
            groups.add(int(fields[2]))
        if group and group in (fields[0], fields[2]) and len(fields) >= 3 and fields[2].isdigit():
            gid = int(fields[2])
    if group.isdigit():
        gid = int(group)
    return uid, gid, sorted(groups), entry[5] if entry else "/"
