"""The first process of a confined local sandbox: pid 1 of its namespaces, the one process every other starts from.

It starts each command, opens each file the client reads or writes, reports each command's end, and stops everything
when told. Whatever it does happens inside the confinement, with the sandbox's own view of the filesystem and its own
credentials: a file the client writes is opened here, so no link or directory the model swaps in can lead the write
anywhere a command could not write itself. Commands it starts inherit its limits and its cgroup.

It runs as `python -I -S -c BOOT FD SETTINGS` (BOOT reads this file's text from FD; SETTINGS is a marshalled dict, in
hex), where nothing of oc-repl is importable. It uses the interpreter's built-in C modules only (`_socket`, `_signal`
and the like rather than the Python modules over them, which would cost a sandbox's start tens of milliseconds). It
talks to the client over one SOCK_SEQPACKET socket: each request is a marshalled dict, file descriptors passed beside
it; each answer carries the request's `id`; `{"op": "exit"}` messages report the end of commands. When the client goes
(the socket closes) it exits, and the kernel kills every process of the namespace with it. It is not dumpable: no
process of the sandbox may trace it, read its memory or open its file descriptors, and as pid 1 it gets no signal from
inside that it does not handle. Before it says it is ready it joins a new, empty session keyring, which every command
inherits: the client's (a login session's, holding its keys) stays out of reach.
"""

import _signal
import _socket
import array
import errno
import fcntl
import marshal
import os
import select
import sys

MAX_MESSAGE = 1 << 20
MAX_FDS = 16
STOP_WITHIN = 5.0  # seconds to go on killing while processes still appear
_FORGET_FDS = {"/dev/null", "/dev/tty", "/dev/ptmx"}
_S_IFMT, _S_IFREG, _S_IFDIR = 0o170000, 0o100000, 0o040000
SIGNALS = [sig for sig in range(1, _signal.NSIG) if sig not in (_signal.SIGKILL, _signal.SIGSTOP)]
# keyctl(2)'s number by machine: the C library has no wrapper for it (libkeyutils has, and need not be installed)
KEYCTL = {"x86_64": 250, "i686": 288, "i386": 288, "aarch64": 219, "riscv64": 219, "loongarch64": 219, "armv7l": 311}
KEYCTL.update({"armv6l": 311, "ppc64le": 271, "ppc64": 271, "s390x": 280})
KEYCTL_GET_KEYRING_ID, KEYCTL_JOIN_SESSION_KEYRING, KEY_SPEC_SESSION_KEYRING = 0, 1, -3

channel = devnull = libc = None  # set by main()
PR_SET_SECUREBITS, PR_CAPBSET_DROP, PR_CAP_AMBIENT = 28, 24, 47
PR_CAP_AMBIENT_RAISE, PR_CAP_AMBIENT_LOWER, PR_CAP_AMBIENT_CLEAR_ALL = 2, 3, 4
SECBIT_NOROOT, SECBIT_NOROOT_LOCKED = 1, 2
CAP_SETPCAP, CAP_WAKE_ALARM = 8, 35
own_command = ""
leaders = {}  # the commands whose end the client waits for: pid -> the command line they were started with


def send(message, fds=()):
    data = marshal.dumps(message)
    ancillary = [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    channel.sendmsg([data], ancillary)


def receive():
    """The next request and the file descriptors that came with it (made close-on-exec), or (None, [])."""
    data, ancillary, _flags, _addr = channel.recvmsg(MAX_MESSAGE, _socket.CMSG_SPACE(MAX_FDS * 4))
    fds = array.array("i")
    for level, kind, payload in ancillary:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    for fd in fds:  # a command must not inherit what it was not given
        os.set_inheritable(fd, False)
    return (marshal.loads(data) if data else None), list(fds)


def quietly(call, *args):
    """`call(*args)`, an OSError ignored (contextlib is a Python module this process does not load)."""
    try:
        call(*args)
    except OSError:  # noqa: SIM105
        return


def reap():
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid in leaders:
            del leaders[pid]
            send({"op": "exit", "pid": pid, "code": os.waitstatus_to_exitcode(status)})


def start(argv, env, cwd, stdio, tty):
    """Start `argv` in a session of its own with `stdio` as its file descriptors 0, 1, 2 (and 3, ... after them),
    every signal at its default and none blocked, in `cwd`; its pid. posix_spawn (a vfork, not a copy of this
    process): this process has one thread, so it may change its own directory for the moment of the spawn."""
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 100) for fd in stdio]  # no number clashes with a target
    actions = [(os.POSIX_SPAWN_DUP2, fd, target) for target, fd in enumerate(high)]
    if tty:  # opened again after setsid, the terminal becomes the session's controlling terminal
        actions[0] = (os.POSIX_SPAWN_OPEN, 0, os.ttyname(stdio[0]), os.O_RDWR, 0)
    try:
        os.chdir(cwd)
        return os.posix_spawnp(argv[0], argv, env, file_actions=actions, setsid=True, setsigdef=SIGNALS)
    finally:
        os.chdir("/")
        for fd in high:
            os.close(fd)


def spawn(request, fds):
    """A command; `sealed` (a verifier) holds the sandbox's one capability, the seal: no command can trace it or look
    into its /proc (see seal_setup)."""
    if request.get("sealed"):
        libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_WAKE_ALARM, 0, 0)
    try:
        return started(request, fds)
    finally:
        libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_LOWER, CAP_WAKE_ALARM, 0, 0)


def started(request, fds):
    argv = [os.fsencode(arg) for arg in request["argv"]]
    env = {os.fsencode(k): os.fsencode(v) for k, v in request["env"].items()}
    cwd = request["cwd"]
    if not os.path.isdir(cwd):
        return {"error": f"cannot start a command in {cwd}: no such directory"}, []
    tty = request["tty"]
    master = slave = None
    try:
        if tty:
            import struct
            import termios

            master, slave = os.openpty()
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
            stdio = [slave, slave, slave, *fds]
        else:
            stdio = [devnull, fds[0], fds[0], *fds[1:]]
        pid = start(argv, env, cwd, stdio, tty)
    except OSError:
        for fd in (master, slave):
            if fd is not None:
                os.close(fd)
        raise
    leaders[pid] = " ".join(request["argv"])
    for fd in fds if slave is None else [slave, *fds]:
        os.close(fd)
    return {"pid": pid}, ([master] if master is not None else [])


def processes():
    """(pid, parent, process group, session) of every process of the namespace but this one that can still act: a
    zombie is left out unless it is the first thread of a process whose other threads still run."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or name == "1":
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().decode(errors="replace").rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if len(fields) > 17 and (fields[0] != "Z" or int(fields[17]) > 1):  # field 20: the number of threads
            found.append((int(name), int(fields[1]), int(fields[2]), int(fields[3])))
    return found


def kill(request, fds):
    leader = request["pid"]
    quietly(os.killpg, leader, _signal.SIGKILL)
    for pid, _parent, group, session in processes():  # an interactive shell gives each job a group of its own
        if leader in (group, session):
            quietly(os.kill, pid, _signal.SIGKILL)
    return {}, []


def command_line(pid):
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")


def described(pid):
    """What a process is; a first thread that ended while others run shows as a zombie with nothing to read, so its
    process is read through one of those others."""
    where = f"/proc/{pid}"
    try:
        others = [t for t in os.listdir(f"{where}/task") if t != str(pid)]
        with open(f"{where}/stat", "rb") as f:
            if f.read().rsplit(b")", 1)[-1].split()[0] == b"Z" and others:
                where = f"{where}/task/{others[0]}"
        with open(f"{where}/cmdline", "rb") as f:
            command = f.read().rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")
    except (OSError, IndexError):
        return None
    if pid in leaders and command == own_command:  # forked, not yet running what it was started for
        command = leaders[pid]
    try:
        cwd = os.readlink(f"{where}/cwd")
    except OSError:
        cwd = ""
    files = set()
    try:
        for fd in os.listdir(f"{where}/fd"):
            try:
                target = os.readlink(f"{where}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("/") and target not in _FORGET_FDS and not target.startswith("/dev/pts/"):
                files.add(target)
    except OSError:
        pass
    return {"pid": pid, "command": command, "cwd": cwd, "files": sorted(files), "threads": len(others) + 1}


def listed(request, fds):
    """Every process but this one, described (those given and their ancestors marked as the caller's own)."""
    parents = {pid: parent for pid, parent, _, _ in processes()}
    own = set()
    for pid in request.get("keep", []):
        while pid in parents and pid not in own:
            own.add(pid)
            pid = parents[pid]
    found = [d for d in (described(pid) for pid in parents) if d is not None]
    for d in found:
        d["own"] = d["pid"] in own
    return {"found": found}, []


def stop(request, fds):
    """Every process but this one killed, at least once and then until none is left: kill(-1) from pid 1 reaches
    every process of the namespace at once, whatever state it is in."""
    import time

    deadline = time.monotonic() + STOP_WITHIN
    while True:
        quietly(os.kill, -1, _signal.SIGKILL)  # from pid 1: every process of the namespace but itself
        time.sleep(0.005)
        reap()
        if not processes() or time.monotonic() >= deadline:
            break
    return {"left": len(processes())}, []


def open_file(request, fds):
    path, write = request["path"], request.get("write", False)
    if write and request.get("parents"):
        os.makedirs(os.path.dirname(path) or "/", exist_ok=True)
    flags = os.O_NOCTTY | os.O_NONBLOCK | os.O_CLOEXEC  # a FIFO or a device must not block this process
    flags |= (os.O_WRONLY | os.O_CREAT | os.O_TRUNC) if write else os.O_RDONLY
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a FIFO nobody reads
            return {"error": f"{path} is not a regular file", "errno": errno.EINVAL}, []
        raise
    if os.fstat(fd).st_mode & _S_IFMT != _S_IFREG:
        os.close(fd)
        return {"error": f"{path} is not a regular file", "errno": errno.EINVAL}, []
    os.set_blocking(fd, True)
    return {}, [fd]


def make_dir(request, fds):
    os.makedirs(request["path"], exist_ok=True)
    return {}, []


def kind(request, fds):
    try:
        mode = os.stat(request["path"]).st_mode & _S_IFMT
    except FileNotFoundError:
        return {"kind": "none"}, []
    return {"kind": "dir" if mode == _S_IFDIR else "file" if mode == _S_IFREG else "other"}, []


HANDLERS = {
    "walk": walk,  # noqa: F821  local_init_look.py's, the first part of this process's program
    "facts": facts,  # noqa: F821
    "spawn": spawn,
    "kill": kill,
    "list": listed,
    "stop": stop,
    "open": open_file,
    "mkdir": make_dir,
    "kind": kind,
}


def handle(request, fds):
    try:
        answer, out = HANDLERS[request["op"]](request, fds)
    except OSError as exc:
        why = exc.strerror or str(exc)
        if exc.errno == errno.EROFS:
            why += " (this sandbox may write only in its directory and /tmp)"
        answer, out = {"error": why, "errno": exc.errno}, []
        for fd in fds:
            quietly(os.close, fd)
    answer["id"] = request["id"]
    send(answer, out)
    for fd in out:
        os.close(fd)


def own_keyring(libc):
    """Join a new, empty session keyring. The one inherited from the client is a login session's, with the keys the
    user holds in it, which every command could otherwise read, change or add to for good. A seccomp filter denying
    the key calls would close this too, but needs a BPF program per machine, and it would break the programs that use
    keys; a keyring of its own keeps them working (the user and persistent keyrings are the sandbox's own already:
    since Linux 5.3 they belong to a user namespace). Joined here, before any command exists."""
    import ctypes

    number = KEYCTL.get(os.uname().machine)
    if number is None:
        sys.exit(f"oc-repl: no keyring of its own for the sandbox: keyctl's number on {os.uname().machine} is unknown")
    if libc.syscall(ctypes.c_long(number), ctypes.c_long(KEYCTL_JOIN_SESSION_KEYRING), None) >= 0:
        return
    why = os.strerror(ctypes.get_errno())
    # A seccomp filter above us (docker's default profile) denies the key calls to this process and every process it
    # starts: no keyring is reachable then, and nothing is left to shut out.
    found = libc.syscall(
        ctypes.c_long(number), ctypes.c_long(KEYCTL_GET_KEYRING_ID), ctypes.c_long(KEY_SPEC_SESSION_KEYRING), 0
    )
    if found >= 0:
        sys.exit(f"oc-repl: no keyring of its own for the sandbox: {why}")


def seal_setup():
    """bubblewrap gave this process one capability, CAP_WAKE_ALARM (it does nothing in a user namespace), as the seal
    of the verifier: the kernel refuses a process that lacks a capability its target holds every look into that target
    (ptrace, /proc/PID/root, fd, mem). So commands must start without it: no ambient capability is passed on, and where
    the sandbox's user is root, root's own rule (an exec of any program gets the bounding set) is turned off for good
    (SECBIT_NOROOT, locked). A verifier gets it raised as an ambient capability for the moment of its start (spawn)."""
    if os.getuid() == 0:
        libc.prctl(PR_SET_SECUREBITS, SECBIT_NOROOT | SECBIT_NOROOT_LOCKED, 0, 0, 0)
        libc.prctl(PR_CAPBSET_DROP, CAP_SETPCAP, 0, 0, 0)
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)


def main():
    global channel, devnull, own_command, libc
    os.close(int(sys.argv[1]))  # the file this program was read from
    settings = marshal.loads(bytes.fromhex(sys.argv[2]))
    channel = _socket.socket(fileno=settings["channel"])
    os.set_inheritable(settings["channel"], False)
    devnull = os.open("/dev/null", os.O_RDWR | os.O_CLOEXEC)
    if settings.get("processes"):
        import resource

        resource.setrlimit(resource.RLIMIT_NPROC, (settings["processes"], settings["processes"]))
    wake_read, wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    _signal.set_wakeup_fd(wake_write)
    _signal.signal(_signal.SIGCHLD, lambda *_: None)
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    own_keyring(libc)  # before `ready`: a sandbox that cannot have one does not start, and says why
    seal_setup()
    send({"op": "ready"})
    libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0, before any command exists
    own_command = command_line(os.getpid())
    while True:
        readable, _, _ = select.select([channel, wake_read], [], [])
        if wake_read in readable:
            while True:
                try:
                    if not os.read(wake_read, 512):
                        break
                except BlockingIOError:
                    break
            reap()
        if channel in readable:
            request, fds = receive()
            if request is None:
                return
            handle(request, fds)


if __name__ == "__main__":
    main()
