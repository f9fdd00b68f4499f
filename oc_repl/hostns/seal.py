"""A verifier run sealed from what the agent left running in its container.

The helper joins the container's cgroups and namespaces itself (nothing of the container runs it), then makes a mount
namespace of its own, where the verifier's directories (/tests, /logs/verifier, oc-repl's own) are fresh in-memory
filesystems: the container's processes see the directories empty, and whatever they write there never reaches the
verifier. The verifier is started there with what a `docker exec` of the container gets (its environment, user,
capabilities, seccomp filters, AppArmor profile, resource limits, cgroups), plus one capability the container's
processes lack: the kernel then refuses them every look into the verifier's processes (ptrace, /proc/PID/root, fd,
mem). So the verifier runs beside the agent's servers and background jobs, on its own files.

While it runs the helper records, from the kernel, what it opened, ran and wrote (fanotify marks on the mounts of its
namespace: only its processes pass through them), the records oc-repl's pytest plugin streams through a FIFO there, and
the exit status of each pytest process those records name (the process connector). When it ends, everything left in
its namespace (background jobs of the tests) is killed, and the files asked for are read back from its directories.
"""

from __future__ import annotations

import base64
import json
import os
import re
import resource
import select
import signal
import stat
import time

from oc_repl.hostns import linux
from oc_repl.hostns.execution import Facts, user
from oc_repl.hostns.procs import HostProc, join_cgroups

_OCTAL = re.compile(r"\\([0-7]{3})")
_NOT_WATCHED = {"proc", "sysfs", "devpts", "mqueue", "cgroup", "cgroup2", "devtmpfs", "securityfs", "debugfs"}
RECORD_LIMIT = 8 << 20  # bytes of pytest records kept
COLLECT_LIMIT = 4 << 20


def _private(path: str, mode: int) -> int:
    """A fresh tmpfs at `path`, seen by this namespace only; its device number. What the agent left at the path is
    moved out of the way in the shared filesystem first (a link or a file where a directory belongs)."""
    try:
        st = os.lstat(path)
        if not os.path.isdir(path) or os.path.islink(path):
            os.unlink(path)
            raise FileNotFoundError(path)
        del st
    except FileNotFoundError:
        os.makedirs(path, exist_ok=True)
    linux.mount("tmpfs", path, "tmpfs", 0, f"mode={mode:o},size=512m")
    found = os.lstat(path)
    if not os.path.isdir(path) or os.path.islink(path):
        raise OSError(f"{path} is not the verifier's own directory")
    return found.st_dev


def _write(path: str, data: bytes, mode: int) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        os.write(fd, data)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def _watched_mounts(proc: HostProc) -> list[str]:
    found = []
    for line in proc.text(f"{os.getpid()}/mountinfo").splitlines():
        head, _, tail = line.partition(" - ")
        point, kind = head.split()[4], tail.split()[0] if tail else ""
        if kind not in _NOT_WATCHED and not point.startswith(("/proc", "/sys", "/dev")):
            found.append(_OCTAL.sub(lambda m: chr(int(m.group(1), 8)), point))  # mountinfo writes " " as \040
    return found


def _start(job: dict, facts: Facts, output: int) -> int:
    """Fork the verifier; in the child, become what a docker exec of the container is, plus the seal, and exec."""
    pid = os.fork()
    if pid:
        return pid
    try:
        os.setsid()
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(output, 1)
        os.dup2(output, 2)
        for res, value in facts.limits.items():
            try:
                resource.setrlimit(res, value)
            except (OSError, ValueError):
                continue
        seal = 0 if facts.seal is None else 1 << facts.seal
        linux.limit_bounding(facts.bounding | seal)
        linux.install_seccomp(facts.filters)
        uid, gid, groups = job["uid"], job["gid"], job["groups"]
        if uid != 0:
            linux.prctl(linux.PR_SET_KEEPCAPS, 1)
        os.setgroups(groups)
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
        if uid != 0 and facts.seal is not None:  # an unprivileged verifier keeps the seal as an ambient capability
            linux.set_caps(seal, seal, seal)
            linux.prctl(linux.PR_CAP_AMBIENT, linux.PR_CAP_AMBIENT_RAISE, facts.seal)
        if facts.profile():
            try:
                with open("/proc/self/attr/exec", "w") as f:
                    f.write(f"exec {facts.profile()}" if "(" not in facts.label else facts.profile())
            except OSError:
                pass
        if facts.no_new_privs:
            linux.prctl(linux.PR_SET_NO_NEW_PRIVS, 1)
        try:
            os.chdir(job["cwd"])
        except OSError:
            os.chdir("/")
        os.execvpe(job["argv"][0], job["argv"], job["env"])
    except BaseException as exc:  # noqa: BLE001  the child must never return into the helper
        os.write(2, f"oc-repl: cannot start the verifier: {exc}\n".encode())
    os._exit(127)


class Watch:
    """What the verifier does, from the kernel: files opened, run and written (by inode), its pytest records, and the
    exit status of the pytest processes those records name."""

    def __init__(self, proc: HostProc, fanotify: int | None, record: int | None, listener: object | None) -> None:
        self.proc, self.fan, self.record, self.listener = proc, fanotify, record, listener
        self.opened: dict[tuple[int, int], list] = {}  # (dev, inode) -> [path, run by the script outside pytest]
        self.runs: list[tuple[tuple[int, int], list[int]]] = []  # (dev, inode) of each program run, and its ancestry
        self.written: set[tuple[int, int]] = set()
        self.records = bytearray()
        self.exits: dict[int, int] = {}  # host pid -> wait status
        self.parents: dict[int, int] = {}  # host pid -> its parent, for every fork seen
        self.pytest: dict[str, int] = {}  # "<pid>:<start>" of a record -> host pid

    def fds(self) -> list[object]:
        return [x for x in (self.fan, self.record, self.listener) if x is not None]

    def drain(self, ready: list[object]) -> None:
        if self.fan in ready and self.fan is not None:
            self._files()
        if self.record in ready and self.record is not None:
            self._records()
        if self.listener in ready and self.listener is not None:
            exits, forks = linux.process_events(self.listener)  # type: ignore[arg-type]
            self.exits.update(exits)
            self.parents.update((child, parent) for parent, child in forks)

    def _files(self) -> None:
        assert self.fan is not None
        for mask, fd, pid in linux.fanotify_events(self.fan):
            if fd < 0:
                continue
            try:
                st = os.fstat(fd)
                key = (st.st_dev, st.st_ino)
                if mask & (linux.FAN_MODIFY | linux.FAN_CLOSE_WRITE):
                    self.written.add(key)
                if mask & (linux.FAN_OPEN | linux.FAN_OPEN_EXEC) and key not in self.opened:
                    self.opened[key] = [self.proc.link(f"self/fd/{fd}"), False]
                if mask & linux.FAN_OPEN_EXEC:
                    self.runs.append((key, self._ancestry(pid)))
            except OSError:
                pass
            finally:
                os.close(fd)

    def _records(self) -> None:
        assert self.record is not None
        while True:
            try:
                data = os.read(self.record, 1 << 16)
            except BlockingIOError:
                break
            if not data:
                break
            if len(self.records) < RECORD_LIMIT:
                self.records += data
        for line in bytes(self.records).splitlines():
            if b'"start"' in line and b'"pid"' in line:
                self._name_pytest(line)

    def _name_pytest(self, line: bytes) -> None:
        try:
            record = json.loads(line)
            key = f"{int(record['pid'])}:{int(record['st'])}"
        except (ValueError, KeyError, TypeError):
            return
        if key in self.pytest:
            return
        ns_pid, start = key.split(":")
        for pid in self.proc.pids():
            try:
                status = self.proc.status(pid)
                if status.get("NSpid", "").split()[-1:] == [ns_pid] and self.proc.start_time(pid) == start:
                    self.pytest[key] = pid
                    return
            except (OSError, IndexError):
                continue

    def _ancestry(self, pid: int) -> list[int]:
        """`pid` and its ancestors (host pids), read now, while the program it runs starts."""
        found = []
        while pid > 1 and len(found) < 64:
            found.append(pid)
            try:
                pid = int(self.proc.status(pid).get("PPid", "0"))
            except (OSError, ValueError):
                break
        return found

    def settle(self) -> None:
        """Mark each program the verifier's own script ran (outside every pytest process of its tests): a command
        of the agent's that the harness, not the tests, runs is how the harness itself is swayed. Where a process
        was gone before its ancestry could be read, the forks the kernel reported fill it in."""
        under_pytest = set(self.pytest.values())
        for key, ancestry in self.runs:
            line, pid = list(ancestry), ancestry[-1] if ancestry else 0
            while pid in self.parents and len(line) < 128:
                pid = self.parents[pid]
                line.append(pid)
            if not under_pytest.intersection(line):
                self.opened[key][1] = True


def _members(proc: HostProc, namespace: int) -> list[int]:
    """The processes of the verifier: those in its mount namespace (none can leave it), this helper aside."""
    own, found = os.getpid(), []
    for pid in proc.pids():
        try:
            if pid != own and proc.inode(f"{pid}/ns/mnt") == namespace:
                found.append(pid)
        except OSError:
            continue
    return found


def _end(proc: HostProc, namespace: int, within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while (left := _members(proc, namespace)) and time.monotonic() < deadline:
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
        time.sleep(0.01)


def _collect(paths: list[str]) -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            found[path] = None
            continue
        try:
            regular = stat.S_ISREG(os.fstat(fd).st_mode)
            found[path] = base64.b64encode(os.read(fd, COLLECT_LIMIT)).decode() if regular else None
        except OSError:
            found[path] = None
        finally:
            os.close(fd)
    return found


def verify(job: dict, proc: HostProc, output: int) -> dict:
    """Run the verifier `job` sealed in the container whose first process is `job["pid"]` (host pid)."""
    pid = job["pid"]
    facts = Facts(proc, pid)
    namespaces = {
        name: os.open(f"{pid}/ns/{name}", os.O_RDONLY | os.O_CLOEXEC, dir_fd=proc.fd) for name in linux.NAMESPACES
    }
    listener = linux.process_listener() if job.get("exits") else None  # in the host's network namespace
    join_cgroups(facts.cgroups)
    for name in linux.NAMESPACES:
        linux.setns(namespaces[name])
        os.close(namespaces[name])
    linux.unshare(linux.CLONE_NEWNS)
    linux.mount(None, "/", None, linux.MS_REC | linux.MS_PRIVATE)
    own_ns = proc.inode(f"{os.getpid()}/ns/mnt")
    job["uid"], job["gid"], job["groups"], home = user(job["user"])
    job["env"].setdefault("HOME", home)
    for path, mode in job["private"]:
        _private(path, mode)
    for path, data, mode in job["files"]:
        _write(path, base64.b64decode(data), mode)
    record = keeper = None
    if job.get("fifo"):
        os.mkfifo(job["fifo"], 0o666)
        os.chmod(job["fifo"], 0o666)  # the verifier's user, whoever it is, writes its records there
        record = os.open(job["fifo"], os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        keeper = os.open(job["fifo"], os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # no EOF between writers
    fan = None
    if job.get("observe"):
        mask = linux.FAN_OPEN | linux.FAN_OPEN_EXEC | linux.FAN_MODIFY | linux.FAN_CLOSE_WRITE
        fan = linux.fanotify(_watched_mounts(proc), mask)
    watch = Watch(proc, fan, record, listener)
    started = time.monotonic()
    child = _start(job, facts, output)
    os.close(output)
    ended = os.pidfd_open(child)
    deadline, status, timed_out = started + job["timeout"], None, False
    while status is None:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            _end(proc, own_ns)
        ready, _, _ = select.select([ended, *watch.fds()], [], [], max(0.0, min(left, 1.0)))
        watch.drain(ready)
        if ended in ready or timed_out:
            _, status = os.waitpid(child, 0)
    _end(proc, own_ns)  # what the tests left running in the background is theirs, not the agent's: it ends now
    watch.drain(watch.fds())
    watch.settle()
    if fan is not None:
        os.close(fan)  # the helper's own reads below are not the verifier's
    for fd in (record, keeper):
        if fd is not None:
            os.close(fd)
    return {
        "status": status if not timed_out else None,
        "timed_out": timed_out,
        "seconds": time.monotonic() - started,
        "sealed": facts.seal is not None,
        "collected": _collect(job.get("collect", [])),
        "records": base64.b64encode(bytes(watch.records)).decode(),
        "exits": {key: watch.exits[host] for key, host in watch.pytest.items() if host in watch.exits},
        "opened": [[dev, ino, path, run] for (dev, ino), (path, run) in watch.opened.items()] if fan else None,
        "written": [list(key) for key in watch.written] if fan else None,
    }
