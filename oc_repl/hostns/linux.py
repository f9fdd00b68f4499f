"""The system calls the helper makes, through libc (ctypes): namespaces, mounts, capabilities, seccomp, fanotify and
the process connector. Standard library only: this runs as root on the daemon's host, single-threaded."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import socket
import struct

libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
libc.ptrace.restype = ctypes.c_long
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
libc.fanotify_mark.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int, ctypes.c_char_p]
libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]

CLONE_NEWNS = 0x00020000
NAMESPACES = ("cgroup", "ipc", "uts", "net", "pid", "mnt")  # the order they are joined in: mnt last (it moves "/")
MS_REC, MS_PRIVATE = 0x4000, 1 << 18
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_KEEPCAPS = 1, 4, 8
PR_SET_SECCOMP, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT = 22, 24, 38, 47
PR_CAP_AMBIENT_RAISE, PR_CAP_AMBIENT_CLEAR_ALL = 2, 4
SECCOMP_MODE_FILTER = 2
PTRACE_DETACH, PTRACE_SEIZE, PTRACE_INTERRUPT, PTRACE_SECCOMP_GET_FILTER = 17, 0x4206, 0x4207, 0x420C
CAP_LAST = 63  # capabilities are numbered below this; the kernel says which exist (/proc/sys/kernel/cap_last_cap)
CAP_WAKE_ALARM = 35  # held by the verifier only: harmless, and not among a container's capabilities by default
CAP_SYS_PTRACE = 19


def check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


SYS_OPENAT2 = 437  # the same number on every architecture (a new system call)
RESOLVE_IN_ROOT = 0x10


def open_in_root(root_fd: int, path: str) -> int:
    """Open `path` for reading as if `root_fd` were "/": its links, absolute ones too, resolve inside that tree."""
    how = _OpenHow(os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0, RESOLVE_IN_ROOT)
    return check(libc.syscall(SYS_OPENAT2, root_fd, os.fsencode(path), ctypes.byref(how), ctypes.sizeof(how)), path)


def setns(fd: int) -> None:
    check(libc.setns(fd, 0), "setns")


def unshare(flags: int) -> None:
    check(libc.unshare(flags), "unshare")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = [None if v is None else os.fsencode(v) for v in (source, target, fstype, data)]
    check(libc.mount(enc[0], enc[1], enc[2], flags, enc[3]), f"mount {target}")


def prctl(option: int, a2: int = 0, a3: int = 0, a4: int = 0, a5: int = 0) -> int:
    return check(libc.prctl(option, a2, a3, a4, a5), f"prctl {option}")


def last_cap() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 40


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def set_caps(effective: int, permitted: int, inheritable: int) -> None:
    header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3: two 32-bit words per set
    data = (_CapData * 2)()
    for word in range(2):
        shift = 32 * word
        mask = 0xFFFFFFFF
        data[word] = _CapData((effective >> shift) & mask, (permitted >> shift) & mask, (inheritable >> shift) & mask)
    check(libc.capset(ctypes.byref(header), data), "capset")


def limit_bounding(keep: int) -> None:
    """Drop every capability not in `keep` from this thread's bounding set: what an exec may ever give."""
    for cap in range(last_cap() + 1):
        if not keep >> cap & 1:
            prctl(PR_CAPBSET_DROP, cap)


# --- seccomp: the container's filters, taken from one of its processes and installed on the verifier --------------


def seccomp_filters(pid: int) -> list[bytes]:
    """The seccomp programs (classic BPF) of process `pid`, newest first; [] for none. It is stopped (seized, never
    signalled) for the moment of reading."""
    check(libc.ptrace(PTRACE_SEIZE, pid, None, None), "ptrace seize")
    try:
        check(libc.ptrace(PTRACE_INTERRUPT, pid, None, None), "ptrace interrupt")
        os.waitpid(pid, 0x40000000)  # __WALL: a traced process that is not our child
        programs = []
        while True:
            count = libc.ptrace(PTRACE_SECCOMP_GET_FILTER, pid, ctypes.c_void_p(len(programs)), None)
            if count < 0:
                return programs  # ENOENT past the last filter (EINVAL: none at all)
            buf = ctypes.create_string_buffer(count * 8)
            check(libc.ptrace(PTRACE_SECCOMP_GET_FILTER, pid, ctypes.c_void_p(len(programs)), buf), "seccomp filter")
            programs.append(buf.raw)
    finally:
        libc.ptrace(PTRACE_DETACH, pid, None, None)


class _Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install_seccomp(programs: list[bytes]) -> None:
    """Install `programs` (newest first, as seccomp_filters returns them) in their original order."""
    for program in reversed(programs):
        buf = ctypes.create_string_buffer(program, len(program))
        prog = _Fprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
        check(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(prog), 0, 0), "seccomp")


# --- fanotify: what the verifier opens, runs and writes, through the mounts of its own namespace ------------------

FAN_MODIFY, FAN_CLOSE_WRITE, FAN_OPEN, FAN_OPEN_EXEC, FAN_Q_OVERFLOW = 0x2, 0x8, 0x20, 0x1000, 0x4000
FAN_CLOEXEC, FAN_NONBLOCK, FAN_UNLIMITED_QUEUE = 0x1, 0x2, 0x10
FAN_MARK_ADD, FAN_MARK_MOUNT = 0x1, 0x10
_EVENT = struct.Struct("=IBBHQii")  # fanotify_event_metadata: len, version, reserved, metadata_len, mask, fd, pid


def fanotify(paths: list[str], mask: int) -> int:
    fd = check(
        libc.fanotify_init(FAN_CLOEXEC | FAN_NONBLOCK | FAN_UNLIMITED_QUEUE, os.O_RDONLY | os.O_LARGEFILE), "fan"
    )
    try:
        for path in paths:
            check(libc.fanotify_mark(fd, FAN_MARK_ADD | FAN_MARK_MOUNT, mask, -100, os.fsencode(path)), f"mark {path}")
    except OSError:
        os.close(fd)
        raise
    return fd


def fanotify_events(fd: int) -> list[tuple[int, int, int]]:
    """(mask, event fd, pid) of every event queued now; the caller closes the event fds (-1: none)."""
    found = []
    while True:
        try:
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            return found
        offset = 0
        while offset + _EVENT.size <= len(data):
            length, _version, _, _meta, mask, event_fd, pid = _EVENT.unpack_from(data, offset)
            found.append((mask, event_fd, pid))
            offset += length or _EVENT.size


# --- the process connector: every process's exit status, from the kernel --------------------------------------------

NETLINK_CONNECTOR, CN_IDX_PROC, PROC_EVENT_FORK, PROC_EVENT_EXIT = 11, 1, 0x1, 0x80000000
_NLMSG = struct.Struct("=IHHII")  # nlmsghdr
_CN_MSG = struct.Struct("=IIIIHH")  # cn_msg: idx, val, seq, ack, len, flags
_PROC_EVENT = struct.Struct("=IIQ")  # what, cpu, timestamp
_EXIT = struct.Struct("=IIII")  # pid, tgid, exit_code, exit_signal
_FORK = struct.Struct("=IIII")  # parent pid, parent tgid, child pid, child tgid


def process_listener() -> socket.socket:
    """A socket the kernel reports every process's fork and exit on (needs CAP_NET_ADMIN in the host's network
    namespace: made before the helper joins a container's)."""
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_CONNECTOR)
    with contextlib.suppress(OSError):  # the whole machine's forks come here: room for a burst of them
        sock.setsockopt(socket.SOL_SOCKET, 33, 32 << 20)  # SO_RCVBUFFORCE
    sock.bind((os.getpid(), CN_IDX_PROC))
    listen = struct.pack("=I", 1)  # PROC_CN_MCAST_LISTEN
    header = _CN_MSG.pack(CN_IDX_PROC, 1, 0, 0, len(listen), 0)
    message = header + listen
    sock.send(_NLMSG.pack(_NLMSG.size + len(message), 3, 0, 0, os.getpid()) + message)  # NLMSG_DONE
    sock.setblocking(False)
    return sock


def process_events(sock: socket.socket) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(tgid, wait status) of the process exits and (parent tgid, child tgid) of the process forks reported since the
    last call (threads left out)."""
    exits, forks = [], []
    while True:
        try:
            data = sock.recv(1 << 16)
        except BlockingIOError:
            return exits, forks
        except OSError as exc:  # ENOBUFS: events were lost while the machine forked faster than this read
            if exc.errno != errno.ENOBUFS:
                raise
            continue
        offset = _NLMSG.size + _CN_MSG.size
        if len(data) < offset + _PROC_EVENT.size + _EXIT.size:
            continue
        what, _cpu, _ts = _PROC_EVENT.unpack_from(data, offset)
        offset += _PROC_EVENT.size
        if what == PROC_EVENT_EXIT:
            pid, tgid, code, _signal = _EXIT.unpack_from(data, offset)
            if pid == tgid:
                exits.append((tgid, code))
        elif what == PROC_EVENT_FORK:
            _ppid, parent, pid, child = _FORK.unpack_from(data, offset)
            if pid == child:
                forks.append((parent, child))
