"""A mark on every process a local sandbox starts: an environment variable naming the sandbox and its client.

Children inherit it, so `close()` finds every process a command started, even one that left its process group and
session (`setsid daemon &`), and a later run finds what a SIGKILLed client left behind. A process that clears its own
environment (`env -i`) drops the mark; only confinement (confine.py) holds such a process.

A client is named by its pid namespace, pid and start time, so a reused pid is never taken for a live client.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable
from contextlib import suppress
from functools import lru_cache
from pathlib import Path

MARK = "OC_REPL_SANDBOX"
_ENTRY = MARK.encode() + b"="
KILL_WITHIN = 5.0  # seconds to go on killing marked processes that keep forking


def _start_time(pid: int) -> str | None:
    try:
        stat = Path("/proc", str(pid), "stat").read_bytes().decode(errors="replace")
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()  # the command name in parentheses may hold spaces
    return fields[19] if len(fields) > 19 else None


def _pid_namespace() -> str:
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "0"


@lru_cache(maxsize=4)
def _client_id(pid: int) -> str:
    return f"{_pid_namespace()}.{pid}.{_start_time(pid)}"


def client_id() -> str:
    """This process, as marks name it (no `-`: other names are built around it)."""
    return _client_id(os.getpid())


def client_alive(client: str) -> bool:
    """Whether the client a mark names still runs; a client of another pid namespace cannot be judged, so it is."""
    namespace, _, rest = client.partition(".")
    pid, _, start = rest.partition(".")
    if namespace != _pid_namespace() or not pid.isdigit():
        return True
    return _start_time(int(pid)) == start


def new_mark() -> str:
    return f"{client_id()}.{uuid.uuid4().hex[:12]}"


def _mark_of(pid: int) -> str | None:
    try:
        environ = Path("/proc", str(pid), "environ").read_bytes()  # empty for a zombie: nothing left to kill
    except OSError:
        return None
    for entry in environ.split(b"\0"):
        if entry.startswith(_ENTRY):
            return entry[len(_ENTRY) :].decode(errors="replace")
    return None


def _owned(pid: int) -> bool:
    try:
        return os.stat(f"/proc/{pid}").st_uid == os.geteuid()
    except OSError:
        return False


def _kill_where(wanted: Callable[[str], bool], others: bool = True) -> int:
    """SIGKILL every readable process whose mark is wanted (not those of other users unless `others`); how many were
    found."""
    found = 0
    own = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == own:
            continue
        pid = int(name)
        mark = _mark_of(pid)
        if mark is None or not wanted(mark) or not (others or _owned(pid)):
            continue
        found += 1
        try:
            pidfd = os.pidfd_open(pid)
        except (OSError, AttributeError):
            with suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            continue
        try:
            if _mark_of(pid) == mark:  # checked again now that the pidfd pins the process: the pid was not reused
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        except OSError:
            pass
        finally:
            os.close(pidfd)
    return found


def marked(mark: str) -> list[tuple[int, str]]:
    """(pid, command line) of every live process carrying `mark`."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and _mark_of(int(name)) == mark:
            with suppress(OSError):
                command = Path("/proc", name, "cmdline").read_bytes().rstrip(b"\0").replace(b"\0", b" ")
                found.append((int(name), command.decode(errors="replace")))
    return found


def kill_marked(mark: str) -> None:
    """Kill every process carrying `mark`, again while some still appear (a process may fork as it is killed)."""
    if not Path("/proc/self/environ").exists():
        return
    deadline = time.monotonic() + KILL_WITHIN
    while _kill_where(lambda found: found == mark) and time.monotonic() < deadline:
        time.sleep(0.01)


def sweep() -> None:
    """Kill our own processes of sandboxes whose client died without closing them (a SIGKILLed earlier run)."""
    if Path("/proc/self/environ").exists():
        _kill_where(lambda found: not client_alive(found.rsplit(".", 1)[0]), others=False)
