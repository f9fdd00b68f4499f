"""What a confined local sandbox sees of this machine: its mounts, what is hidden, and its environment.

The host is read-only, and what it shares is hidden rather than only made read-only (a read-only bind does not stop
`connect()` on a socket, nor a read of a secret): the temporary and runtime directories (/tmp, /var/tmp, /run and what
/var/run names), every home (/home, /root, and $HOME wherever it is) are empty in-memory directories of the sandbox's
own, every unix socket bound on the host when the sandbox starts is covered by /dev/null, and for a sandbox run by
root, what in /etc others may not read (/etc/shadow, private keys) is hidden too, and so are the client's config and
API key files, wherever they are. The sandbox directory is the one writable place of the host, its version-control
directories read-only unless asked for (local_vcs.py). /proc/sys and /sys are read-only whoever runs oc-repl, so no
kernel setting can be written. The environment is an allow-list, and its PATH searches no place the sandbox may
write: a program planted there would otherwise be what a later command (a verifier's included) runs by name.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import sys
from collections.abc import Sequence
from pathlib import Path

from oc_repl import paths
from oc_repl.errors import ConfinementUnavailable, UsageError
from oc_repl.sandbox import local_vcs

HIDDEN = ("/tmp", "/var/tmp", "/run", "/var/run", "/home", "/root")
# A sandbox directory may be none of these, nor lie in one (`/var` itself, but not what is under it, such as /var/tmp).
SYSTEM_DIRS = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run", "/sbin", "/sys")
SYSTEM_DIRS += ("/usr",)
SYSTEM_TOPS = ("/var", "/opt", "/srv", "/mnt", "/media")
# Passed on from this process; everything else is left behind.
ALLOWED_ENV = ("PATH", "LANG", "LANGUAGE", "TZ", "TERM", "COLORTERM", "NO_COLOR")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def home() -> Path:
    """The home this process's user works in: $HOME when set, else the password database's."""
    named = os.environ.get("HOME") or pwd.getpwuid(os.geteuid()).pw_dir
    return Path(os.path.realpath(named))


def refuse_exposing(root: Path) -> None:
    """A UsageError for a sandbox directory that would make the host's own places writable."""
    real = Path(os.path.realpath(root))
    user_home = home()
    why = ""
    if real == Path("/"):
        why = "it is the root of this machine"
    elif real == user_home or real in user_home.parents:
        why = "it is your home directory" if real == user_home else f"it holds your home directory {user_home}"
    elif str(real) in SYSTEM_TOPS or any(real == Path(d) or Path(d) in real.parents for d in SYSTEM_DIRS):
        why = "it is a system directory"
    if why:
        raise UsageError(
            f"refusing local:{root} as a sandbox directory: {why}, and the model could write anything in it",
            hint="give a directory of its own to the sandbox, e.g. local:./work (created if missing)",
        )


def _inside(path: Path | str, places: list[Path]) -> bool:
    """Whether `path` (absolute and normalised) is one of `places` or lies in one: by its text, which is what costs
    nothing (a sandbox's start checks every socket of the host)."""
    text = str(path)
    return any(text == str(place) or text.startswith(str(place).rstrip("/") + "/") for place in places)


def _host_sockets(skip: list[Path]) -> list[str]:
    """Every unix socket bound to a path on the host now (its network namespace's), outside the `skip` places."""
    try:
        lines = Path("/proc/net/unix").read_text(errors="replace").splitlines()[1:]
    except OSError:
        return []
    found = set()
    folders: dict[str, str] = {}
    for line in lines:
        fields = line.split(None, 7)
        if len(fields) == 8 and fields[7].startswith("/"):
            # where it is, not how it was named when bound (/var/run/x is /run/x)
            folder = os.path.dirname(fields[7])
            if folder not in folders:
                folders[folder] = os.path.realpath(folder)
            path = os.path.join(folders[folder], os.path.basename(fields[7]))
            if not _inside(path, skip):
                found.add(path)
    sockets = []
    for path in sorted(found):
        try:
            if stat.S_ISSOCK(os.lstat(path).st_mode):
                sockets.append(str(path))
        except OSError:
            continue  # gone, or in a place this process cannot see into (nor can the sandbox)
    return sockets


def _owner_only(top: Path, depth: int = 2) -> list[str]:
    """What in `top` (and its subdirectories, `depth` levels down) others may not read: the host's secrets, such as
    /etc/shadow. Root reads them whatever their mode, so a sandbox run by root gets them hidden."""
    found = []
    try:
        entries = list(os.scandir(top))
    except OSError:
        return found
    for entry in entries:
        try:
            mode = entry.stat(follow_symlinks=False).st_mode
        except OSError:
            continue
        if stat.S_ISLNK(mode):
            continue
        if not mode & stat.S_IROTH:
            found += ["--tmpfs", entry.path] if stat.S_ISDIR(mode) else ["--ro-bind", "/dev/null", entry.path]
        elif stat.S_ISDIR(mode) and depth > 1:
            found += _owner_only(Path(entry.path), depth - 1)
    return found


def interpreter(hidden: list[Path]) -> tuple[str, list[str]]:
    """A Python the sandbox's first process can run, and the binds that make it visible inside."""
    exe = Path(os.path.realpath(sys.executable))
    if not _inside(exe, hidden):
        return str(exe), []
    prefix = Path(os.path.realpath(sys.base_prefix))
    if exe.is_relative_to(prefix) and not any(prefix == h or prefix in h.parents for h in hidden):
        return str(exe), ["--ro-bind", str(prefix), str(prefix)]
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3", "/bin/python3"):
        if Path(candidate).exists() and not _inside(Path(os.path.realpath(candidate)), hidden):
            return candidate, []
    raise ConfinementUnavailable(f"no Python the sandbox can run: {exe} lies in a place it hides")


def client_files(named: Sequence[Path], hidden: list[Path], shown: list[Path]) -> list[str]:
    """bubblewrap's arguments that cover the client's own secrets with /dev/null: its config file (the default one,
    wherever $XDG_CONFIG_HOME puts it) and the files `named` (a config file named with --config, the API key file),
    each where it really is, unless a hidden place holds it already (and none of the places `shown` again in one, the
    sandbox directory say). Regular files only: a key file may be a pipe (`<(...)`), which is gone once read."""
    args = []
    for path in sorted({Path(os.path.realpath(Path(p).expanduser())) for p in [paths.config_file(), *named]}):
        if path.is_file() and (_inside(path, shown) or not _inside(path, hidden)):
            args += ["--ro-bind", "/dev/null", str(path)]
    return args


def mount_args(
    root: Path, network: bool, writable_vcs: bool, tmp_mb: int, private_files: Sequence[Path] = ()
) -> tuple[list[str], str]:
    """bubblewrap's filesystem arguments for a sandbox in `root`, and the interpreter its first process runs; the
    `private_files` of the client are covered (`client_files`)."""
    user_home = home()
    hidden = [Path(p) for p in HIDDEN if Path(p).is_dir() and not Path(p).is_symlink()]
    hidden += [Path(os.path.realpath(p)) for p in HIDDEN if Path(p).is_symlink()]
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    extra = [user_home] + ([Path(os.path.realpath(runtime))] if runtime else [])
    hidden += [p for p in extra if p != Path("/") and not _inside(p, hidden)]
    args = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys"]
    for place in sorted(set(hidden), key=lambda p: len(p.parts)):
        size = ["--size", str(tmp_mb << 20)] if place == Path("/tmp") else []
        args += [*size, "--tmpfs", str(place)]
    if user_home != Path("/") and _inside(user_home, hidden):
        args += ["--dir", str(user_home)]
    for sock in _host_sockets(skip=[*hidden, root]):
        args += ["--ro-bind", "/dev/null", sock]
    if os.geteuid() == 0:
        args += _owner_only(Path("/etc"))
    python, binds = interpreter(hidden)
    args += binds
    resolv = Path(os.path.realpath("/etc/resolv.conf"))
    if network and _inside(resolv, hidden) and resolv.is_file():
        args += ["--ro-bind", str(resolv), str(resolv)]  # name resolution, which the network is asked for
    args += ["--bind", str(root), str(root)]
    if not writable_vcs:
        args += local_vcs.mount_args(root)
    shown = [root, *(Path(place) for place in binds[2::3])]
    args += client_files(private_files, hidden, shown)  # last: a key file in `root` is covered too
    return args, python


def writable_places(mounts: list[str]) -> list[Path]:
    """Where a sandbox with these bubblewrap arguments may create or write files: every in-memory directory bubblewrap
    makes (`--tmpfs`, `--dev`) and every directory it binds writable; and its /proc (`--proc`), whose links lead to
    wherever each process stands. Read from the arguments themselves, so a place added to the view one day is counted
    without being named twice."""
    places = []
    for at, arg in enumerate(mounts):
        if arg in ("--tmpfs", "--dev", "--proc") and at + 1 < len(mounts):
            places.append(Path(mounts[at + 1]))
        elif arg == "--bind" and at + 2 < len(mounts):
            places.append(Path(mounts[at + 2]))
    return places


def _leads_into(entry: str, places: list[Path], max_links: int = 40) -> bool:
    """Whether looking `entry` up inside the sandbox passes through one of `places`. Links are followed as the host
    has them: outside those places the sandbox sees the host's own files, read-only. A relative entry is looked up
    from wherever a command stands (its directory, at first), so it counts as one of them."""
    if not entry.startswith("/"):
        return True
    current, pending, links = Path("/"), list(Path(entry).parts[1:]), 0
    while not _inside(current, places):
        if not pending:
            return False
        part = pending.pop(0)
        step = current.parent if part == ".." else current / part
        if part == ".." or not step.is_symlink():
            current = step
            continue
        links += 1
        try:
            target = Path(os.readlink(step))
        except OSError:  # gone meanwhile: it leads nowhere
            return True
        if links > max_links:
            return True  # a loop finds nothing: the entry is dropped as useless
        current = Path("/") if target.is_absolute() else current
        pending = [*target.parts[1 if target.is_absolute() else 0 :], *pending]
    return True


def search_path(path: str, writable: list[Path]) -> str:
    """`path` without the entries that lead into a place the sandbox may write."""
    return ":".join(entry for entry in path.split(":") if not _leads_into(entry, writable))


class CommandEnvironment:
    """The environment of the model's commands in one sandbox: an allow-list of this process's environment as it is
    when each starts, and the sandbox's own. Its PATH keeps none of the `writable` places: dropped, not moved to the
    end, since any name not found before them would still be looked up there. Which entries those are is worked out
    once a sandbox for each PATH (a walk of the host's links, hundreds of system calls): the links outside the places
    the sandbox may write are nothing its commands can change."""

    def __init__(self, writable: list[Path] | None = None) -> None:
        self.places = writable or []
        try:
            user = pwd.getpwuid(os.geteuid()).pw_name
        except KeyError:
            user = str(os.geteuid())
        shell = shutil.which("bash", path=DEFAULT_PATH) or "/bin/sh"
        self._own = {"USER": user, "LOGNAME": user, "SHELL": shell, "TMPDIR": "/tmp"}
        self._searched: dict[str, str] = {}

    def __call__(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k in ALLOWED_ENV or k.startswith("LC_")}
        env.update(HOME=str(home()), **self._own)
        env.update(extra or {})
        path = env.get("PATH") or DEFAULT_PATH
        if path not in self._searched:
            self._searched[path] = search_path(path, self.places) or search_path(DEFAULT_PATH, self.places)
        env["PATH"] = self._searched[path]
        return env
