"""The helper's operations besides the sealed verifier: the container's files as it sees them, its processes, and their
end. Each joins what it needs of the container itself; nothing of the container runs any of it."""

from __future__ import annotations

import base64
import hashlib
import os
import stat
import time

from oc_repl.hostns import linux
from oc_repl.hostns.procs import Frozen, HostProc, alive, cgroup_dirs, describe, kill, members

HEAD = 2048  # first bytes of a file, for a look at what it is (a script, a .pyc's header)
READ_LIMIT = 4 << 20
KILL_WITHIN = 10.0


def _enter_mounts(proc: HostProc, pid: int) -> None:
    """Join the container's mount namespace: "/" is its root from now on, so its links resolve inside it."""
    fd = os.open(f"{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC, dir_fd=proc.fd)
    try:
        linux.setns(fd)
    finally:
        os.close(fd)


def _file(path: str, digest: bool) -> dict:
    """lstat of `path`, and (with `digest`) for a regular file its sha256, md5 and first bytes; for a link where it
    leads."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        return {"error": exc.strerror or str(exc)}
    found: dict = {
        "mode": st.st_mode,
        "size": st.st_size,
        "dev": st.st_dev,
        "ino": st.st_ino,
        "mtime": st.st_mtime_ns,
        "ctime": st.st_ctime_ns,
        "uid": st.st_uid,
    }
    if stat.S_ISLNK(st.st_mode):
        found["link"] = os.readlink(path)
        found["target"] = os.path.realpath(path)
    elif stat.S_ISREG(st.st_mode) and digest:
        sha, md5 = hashlib.sha256(), hashlib.md5()
        head = b""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            with os.fdopen(fd, "rb") as f:
                while chunk := f.read(1 << 20):
                    if len(head) < HEAD:
                        head += chunk[: HEAD - len(head)]
                    sha.update(chunk)
                    md5.update(chunk)
        except OSError as exc:
            found["error"] = exc.strerror or str(exc)
            return found
        found["sha256"], found["md5"] = sha.hexdigest(), md5.hexdigest()
        found["head"] = base64.b64encode(head).decode()
    return found


def _read(path: str) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None
        return base64.b64encode(f.read(READ_LIMIT)).decode()


def _listing(directory: str) -> list[str] | None:
    try:
        return sorted(os.listdir(directory))
    except OSError:
        return None


def inspect(request: dict, proc: HostProc) -> dict:
    """`paths`: lstat, digest, head, link target of each; `read`: whole contents; `list`: directory entries."""
    _enter_mounts(proc, request["pid"])
    return {
        "files": {path: _file(path, request.get("digest", True)) for path in request.get("paths", [])},
        "contents": {path: _read(path) for path in request.get("read", [])},
        "listings": {path: _listing(path) for path in request.get("list", [])},
    }


def _settled(proc: HostProc, request: dict, dirs: dict[str, str], within: float = 2.0) -> None:
    """Wait (a moment at most) for execs the daemon is still starting: those of the request's `started` pid files
    (each command writes its own first thing; one the daemon has not spawned yet is nowhere else), and any `runc init`,
    which becomes the agent's command."""
    deadline = time.monotonic() + within
    pending = list(request.get("started", []))
    if pending:
        root = os.open(f"{request['pid']}/root", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=proc.fd)
        try:
            while (pending := [path for path in pending if not _written(root, path)]) and time.monotonic() < deadline:
                time.sleep(0.01)
        finally:
            os.close(root)
    while time.monotonic() < deadline:
        try:
            starting = [p for p in members(dirs) if proc.text(f"{p}/cmdline").startswith("runc\0init")]
        except OSError:
            continue
        if not starting:
            return
        time.sleep(0.01)


def _written(root: int, path: str) -> bool:
    """Whether the file at `path` inside the container (whose root is `root`) has something in it."""
    try:
        fd = linux.open_in_root(root, path)
    except OSError:
        return False
    try:
        return os.fstat(fd).st_size > 0
    finally:
        os.close(fd)


def changes(request: dict, proc: HostProc) -> dict:
    """The container's change set from its overlay upper directory, walked from the host without following a link:
    a whiteout is a path removed, a path also in a lower (the image's) layer one changed, any other one created.
    What `docker diff` tells, without the daemon's walk."""
    upper, lowers = request["upper"].rstrip("/"), request["lowers"]
    found = []
    for directory, dirs, files in os.walk(upper):
        inside = directory[len(upper) :] or "/"
        for name in [*dirs, *files]:
            path, where = os.path.join(directory, name), os.path.join(inside, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
                found.append([where, "removed"])
            elif any(os.path.lexists(lower + where) for lower in lowers):
                found.append([where, "changed"])
            else:
                found.append([where, "created"])
    return {"changes": found}


def _spared(entry: dict, spare: set[str]) -> bool:
    """The container's first process, and those that ran before the sandbox opened (an attached container's own)."""
    return entry["pid"] == 1 or f"{entry['pid']}:{entry['start']}" in spare


def processes(request: dict, proc: HostProc) -> dict:
    """Every process in the container's cgroups but the spared ones, described while all of them are frozen."""
    pid, spare = request["pid"], set(request.get("spare", []))
    dirs = cgroup_dirs(proc, pid)
    # read from the host's /proc: a container's process's links read as the container sees them (its root is theirs)
    _settled(proc, request, dirs)
    with Frozen(dirs) as frozen:
        found = [d for d in (describe(proc, p) for p in members(dirs)) if d is not None and not _spared(d, spare)]
    return {"processes": found, "frozen": frozen.held}


def end(request: dict, proc: HostProc) -> dict:
    """Kill every process in the container's cgroups but the spared ones, frozen while they are killed so that none
    forks away meanwhile, round after round until none is left (or the time is up); what is left."""
    pid, spare = request["pid"], set(request.get("spare", []))
    dirs = cgroup_dirs(proc, pid)
    _settled(proc, request, dirs)
    deadline = time.monotonic() + KILL_WITHIN
    left: list[int] = []
    held = True
    while time.monotonic() < deadline:
        with Frozen(dirs) as frozen:
            held = held and frozen.held
            found = [d for d in (describe(proc, p) for p in members(dirs)) if d is not None and not _spared(d, spare)]
            kill([d["host_pid"] for d in found])
        left = [d["host_pid"] for d in found if alive(proc, d["host_pid"])]
        if not found:
            break
        time.sleep(0.01)
    return {"left": len([p for p in left if alive(proc, p)]), "frozen": held}
