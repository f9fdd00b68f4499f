"""The first process of a confined local sandbox: pid 1 of its namespaces, the one process every other starts from.

It starts each command, opens each file the client reads or writes, reports each command's end, and stops everything
when told. Whatever it does happens inside the confinement, with the sandbox's own view of the filesystem and its own
credentials: a file the client writes is opened here, so no link or directory the model swaps in can lead the write
anywhere a command could not write itself. Commands it starts inherit its limits and its cgroup.

It runs as `python -I -S -c BOOT FD SETTINGS` (BOOT reads this file's text from FD; SETTINGS is JSON), where nothing
of oc-repl is importable: the standard library only. It talks to the client over one SOCK_SEQPACKET socket (its
number is in SETTINGS): each request is a JSON object, file descriptors passed beside it; each answer carries the
request's `id`; `{"op": "exit"}` messages report the end of commands. When the client goes (the socket closes) it
exits, and the kernel kills every process of the namespace with it. It is not dumpable: no process of the sandbox may
trace it, read its memory or open its file descriptors, and as pid 1 it gets no signal from inside that it does not
handle.
"""

import contextlib
import ctypes
import errno
import fcntl
import json
import os
import select
import signal
import socket
import stat
import struct
import sys
import termios
import time

MAX_MESSAGE = 1 << 20
MAX_FDS = 16
STOP_WITHIN = 5.0  # seconds to go on killing while processes still appear
_FORGET_FDS = {"/dev/null", "/dev/tty", "/dev/ptmx"}

channel = devnull = None  # set by main()
own_command = ""
leaders = {}  # the commands whose end the client waits for: pid -> the command line they were started with


def send(message, fds=()):
    data = json.dumps(message).encode()
    if fds:
        socket.send_fds(channel, [data], list(fds))
    else:
        channel.send(data)


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


def child(argv, env, cwd, stdio, tty):
    """In the forked child: a session of its own, the given stdio, default signals, then exec. Never returns."""
    try:
        os.setsid()
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 100) for fd in stdio]
        for target, fd in enumerate(high):
            os.dup2(fd, target)
        if tty:
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        for sig in range(1, signal.NSIG):
            with contextlib.suppress(OSError, ValueError, RuntimeError):
                signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        os.chdir(cwd)
        os.execvpe(argv[0], argv, env)
    except OSError as exc:
        os.write(2, f"oc-repl: cannot run {os.fsdecode(argv[0])}: {exc.strerror}\n".encode())
    os._exit(127)


def spawn(request, fds):
    argv = [os.fsencode(arg) for arg in request["argv"]]
    env = {os.fsencode(k): os.fsencode(v) for k, v in request["env"].items()}
    cwd = request["cwd"]
    if not os.path.isdir(cwd):
        return {"error": f"cannot start a command in {cwd}: no such directory"}, []
    tty = request["tty"]
    master = slave = None
    try:
        if tty:
            master, slave = os.openpty()
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
            stdio = [slave, slave, slave, *fds]
        else:
            stdio = [devnull, fds[0], fds[0], *fds[1:]]
        pid = os.fork()
    except OSError:
        for fd in (master, slave):
            if fd is not None:
                os.close(fd)
        raise
    if pid == 0:
        child(argv, env, cwd, stdio, tty)
    leaders[pid] = " ".join(request["argv"])
    for fd in fds if slave is None else [slave, *fds]:
        os.close(fd)
    return {"pid": pid}, ([master] if master is not None else [])


def processes():
    """(pid, parent, process group, session) of every process of the namespace but this one, zombies left out."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or name == "1":
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().decode(errors="replace").rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if len(fields) > 3 and fields[0] != "Z":
            found.append((int(name), int(fields[1]), int(fields[2]), int(fields[3])))
    return found


def kill(request, fds):
    leader = request["pid"]
    with contextlib.suppress(OSError):
        os.killpg(leader, signal.SIGKILL)
    for pid, _parent, group, session in processes():  # an interactive shell gives each job a group of its own
        if leader in (group, session):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    return {}, []


def described(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            command = f.read().rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    if pid in leaders and command == own_command:  # forked, not yet running what it was started for
        command = leaders[pid]
    try:
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        cwd = ""
    files = []
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("/") and target not in _FORGET_FDS and not target.startswith("/dev/pts/"):
                files.append(target)
    except OSError:
        pass
    return {"pid": pid, "command": command, "cwd": cwd, "files": sorted(set(files))}


def stop(request, fds):
    """Every process but this one: described (unless kept: those given and their ancestors), then killed, until
    none is left."""
    running = processes()
    parents = {pid: parent for pid, parent, _, _ in running}
    keep = set()
    for pid in request.get("keep", []):
        while pid in parents and pid not in keep:
            keep.add(pid)
            pid = parents[pid]
    found = [d for d in (described(pid) for pid in parents if pid not in keep) if d is not None]
    deadline = time.monotonic() + STOP_WITHIN
    while processes() and time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            os.kill(-1, signal.SIGKILL)  # from pid 1: every process of the namespace but itself
        time.sleep(0.005)
        reap()
    return {"found": found, "left": len(processes())}, []


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
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return {"error": f"{path} is not a regular file", "errno": errno.EINVAL}, []
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return {}, [fd]


def make_dir(request, fds):
    os.makedirs(request["path"], exist_ok=True)
    return {}, []


def kind(request, fds):
    try:
        mode = os.stat(request["path"]).st_mode
    except FileNotFoundError:
        return {"kind": "none"}, []
    return {"kind": "dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else "other"}, []


HANDLERS = {"spawn": spawn, "kill": kill, "stop": stop, "open": open_file, "mkdir": make_dir, "kind": kind}


def handle(data, fds):
    request = json.loads(data)
    try:
        answer, out = HANDLERS[request["op"]](request, fds)
    except OSError as exc:
        why = exc.strerror or str(exc)
        if exc.errno == errno.EROFS:
            why += " (this sandbox may write only in its directory and /tmp)"
        answer, out = {"error": why, "errno": exc.errno}, []
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
    answer["id"] = request["id"]
    send(answer, out)
    for fd in out:
        os.close(fd)


def main():
    global channel, devnull, own_command
    ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0, before any command exists
    os.close(int(sys.argv[1]))  # the file this program was read from
    settings = json.loads(sys.argv[2])
    channel = socket.socket(fileno=settings["channel"])
    os.set_inheritable(settings["channel"], False)
    devnull = os.open("/dev/null", os.O_RDWR | os.O_CLOEXEC)
    with open("/proc/self/cmdline", "rb") as f:
        own_command = f.read().rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")
    if settings.get("processes"):
        import resource

        resource.setrlimit(resource.RLIMIT_NPROC, (settings["processes"], settings["processes"]))
    wake_read, wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    send({"op": "ready"})
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
            data, fds, _flags, _addr = socket.recv_fds(channel, MAX_MESSAGE, MAX_FDS)
            if not data:
                return
            for fd in fds:  # recv_fds takes no MSG_CMSG_CLOEXEC: a command must not inherit what it was not given
                os.set_inheritable(fd, False)
            handle(data, fds)


if __name__ == "__main__":
    main()
