"""The local driver: commands run on this machine, under a directory of the user's choosing.

Confined (the default; see confine.py), a command sees the host read-only, can write only the sandbox directory and a
private /tmp (a fresh host directory, removed at close), has no network unless `network=True`, and runs in a pid
namespace that dies with the sandbox. Unconfined (`confine=False`), a command can do whatever the user running
oc-repl can do, network included.

Files (`write_file`, `read_file`, `put`) are handled by this process, at the place a command would reach by the same
path; relative paths are taken against the sandbox directory. Confined, /tmp means the private /tmp and every path
that does not end up in the sandbox directory or the private /tmp is refused, whether it gets out by name, by `..` or
through a symbolic link (`..` counts before links, as a shell's `cd` counts it); the check is made as the file is
opened, so only a process swapping a directory for a link at that very moment could still redirect it. Unconfined,
any path is allowed, as it would be to a command.

Every process a command starts carries a mark (local_marks.py): close() kills them all, those that left their session
(`setsid daemon &`) included, and a new sandbox first ends what a SIGKILLed earlier client left running.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import threading
from pathlib import Path
from typing import Any

from oc_repl.errors import SandboxError, SandboxLost
from oc_repl.sandbox import local_marks
from oc_repl.sandbox.confine import Confinement, sweep_private_tmps
from oc_repl.sandbox.local_process import EXIT_GRACE, LocalProcess, bash_argv, scan_proc
from oc_repl.types import ExecResult

# Letting go of finished processes means a scan of /proc (milliseconds); doing it once per this many commands keeps
# it off the per-call path while bounding the zombies and file descriptors we hold.
PRUNE_AT = 32
_CONFINE_HINT = "install bubblewrap (apt-get install bubblewrap), or run unconfined with --no-confine"


# The model's commands inherit this process's environment minus its secrets: the server's API key (and the like)
# would otherwise be one `env` away, then in the model's history and on the user's screen.
_SECRET_NAMES = re.compile(r"(^OPENAI_|^OC_REPL_|_API_KEY$|_TOKEN$|_SECRET$|_PASSWORD$|^AWS_SECRET)", re.I)


def host_environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not _SECRET_NAMES.search(k)}


class LocalSandbox:
    """Runs everything on this machine, confined unless `confine=False` (see the module doc)."""

    def __init__(self, root: Path, output_limit: int = 1 << 20, confine: bool = True, network: bool = False) -> None:
        self.root = Path(root).expanduser().resolve()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SandboxError(f"cannot use {self.root} as a sandbox: {exc}") from exc
        self.spec = f"local:{self.root}"
        self.workdir = str(self.root)
        self.output_limit = output_limit
        self.confined = confine
        self.network = network or not confine
        self._procs: list[LocalProcess] = []
        self._lock = threading.Lock()
        self._mark = local_marks.new_mark()
        local_marks.sweep()
        sweep_private_tmps()
        self._confinement: Confinement | None = None
        if confine:
            try:
                self._confinement = Confinement(self.root, network)
            except SandboxError as exc:
                raise self._unconfinable(exc) from exc
        atexit.register(self.close)  # a run that ends without closing its sandbox still ends what the model started

    def _unconfinable(self, exc: SandboxError) -> SandboxError:
        return type(exc)(f"cannot confine {self.spec}: {exc.message}", hint=_CONFINE_HINT)

    def ready(self) -> None:
        """Wait for the confinement to be up (it starts in the background when the sandbox is made)."""
        if self._confinement is not None:
            try:
                self._confinement.ready()
            except SandboxError as exc:
                raise self._unconfinable(exc) from exc

    @classmethod
    def from_spec(cls, rest: str, **opts: Any) -> LocalSandbox:
        return cls(Path(rest), **opts)

    def _path(self, path: str | Path) -> Path:
        path = Path(path)
        return path if path.is_absolute() else self.root / path

    def _place(self, path: str | Path) -> Path:
        """The host path of the file a command would reach by `path`; refused when confinement forbids it."""
        target = self._path(path)
        if self._confinement is None:
            return target
        host = self._confinement.host_path(Path(os.path.normpath(target)))
        if host is not None:
            real = Path(os.path.realpath(host))
            if any(real == place or place in real.parents for _inside, place in self._confinement.mounts()):
                return real
        raise SandboxError(
            f"{path} is outside the sandbox directory {self.root} and its /tmp, where this sandbox is confined",
            hint="a confined local: sandbox reads and writes files only there",
        )

    def _start(self, command: str, tty: bool, cwd: str | None, env: dict[str, str] | None) -> LocalProcess:
        full_env = host_environment()
        if tty:
            full_env.update(TERM="xterm", PYTHONUNBUFFERED="1")
        else:
            full_env["TERM"] = "dumb"
            full_env.pop("PYTHONUNBUFFERED", None)
        where = str(self._path(cwd or self.root))
        prefix: list[str] = []
        start_in = where
        openpty = os.openpty
        if self._confinement is not None:
            self.ready()
            if not self._confinement.alive():
                raise SandboxLost(f"the confinement of {self.spec} has ended")
            # Only /tmp is writable of the usual temporary places: tmux and mktemp must not be sent elsewhere.
            full_env["TMPDIR"] = "/tmp"
            full_env.pop("TMUX_TMPDIR", None)
            host = self._confinement.host_path(Path(os.path.normpath(where)))
            if not (host or Path(where)).is_dir():
                raise SandboxError(f"cannot start a command in {where}: no such directory")
            prefix, start_in, openpty = self._confinement.prefix(where), "/", self._confinement.openpty
        full_env.update(env or {})
        full_env[local_marks.MARK] = self._mark
        with bash_argv(command) as (argv, fds):
            proc = LocalProcess(
                [*prefix, *argv],
                tty=tty,
                cwd=start_in,
                env=full_env,
                limit=self.output_limit,
                pass_fds=fds,
                where=where,
                openpty=openpty,
            )
        with self._lock:
            if len(self._procs) >= PRUNE_AT:
                self._prune()
            self._procs.append(proc)
        return proc

    def _prune(self) -> None:
        """Let go of processes that are over, unless something they started still runs (close() must kill it)."""
        done = [p for p in self._procs if p.finished()]
        if not done:
            return
        scan = scan_proc()
        # a finished leader is a zombie, so it is not in the scan: any match is a live process it left behind
        in_use = set() if scan is None else {i for _pid, group, session in scan for i in (group, session)}
        for proc in done:
            if proc.pid not in in_use:
                proc.release()
                self._procs.remove(proc)

    def exec(self, command: str, timeout: float, cwd: str | None = None, user: str | None = None) -> ExecResult:
        """`user` is accepted for the seam's sake; on this machine commands run as the current user."""
        proc = self._start(command, tty=False, cwd=cwd, env=None)
        timed_out = False
        if not proc.wait(timeout):
            if proc.alive():
                proc.kill()
                timed_out = True
            else:  # it ended right at the deadline: let its output drain
                proc.wait(EXIT_GRACE)
        return ExecResult(
            output=proc.read_available(),
            exit_code=None if timed_out else proc.exit_code,
            timed_out=timed_out,
            dropped=proc.dropped,
        )

    def spawn(
        self, command: str, tty: bool = True, cwd: str | None = None, env: dict[str, str] | None = None
    ) -> LocalProcess:
        return self._start(command, tty=tty, cwd=cwd, env=env)

    def write_file(self, path: str, data: bytes) -> None:
        target = self._place(path)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with os.fdopen(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | self._no_link, 0o666), "wb") as f:
                f.write(data)
        except OSError as exc:
            raise SandboxError(f"cannot write {path}: {exc}") from exc

    def read_file(self, path: str) -> bytes:
        target = self._place(path)
        try:
            with os.fdopen(os.open(target, os.O_RDONLY | self._no_link), "rb") as f:
                return f.read()
        except OSError as exc:
            raise SandboxError(f"cannot read {path}: {exc}") from exc

    @property
    def _no_link(self) -> int:
        """Confined, the checked path holds no link: one found at open time was swapped in since, so it is refused."""
        return os.O_NOFOLLOW if self._confinement is not None else 0

    def put(self, src: Path, dest: str) -> None:
        """Copy a directory's contents into `dest`, or a file to `dest` (into it when `dest` is a directory).

        Every directory and file is placed on its own, so a link inside `dest` cannot take the copy elsewhere.
        """
        src = Path(src)
        try:
            if not src.is_dir():
                target = self._place(dest)
                if target.is_dir():
                    target = self._place(Path(self._path(dest), src.name))
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, target)
                return
            for folder, _dirs, files in os.walk(src, followlinks=True):
                inside = self._path(dest) / Path(folder).relative_to(src)
                self._place(inside).mkdir(parents=True, exist_ok=True)
                for name in files:
                    shutil.copy2(Path(folder, name), self._place(inside / name))
        except OSError as exc:
            raise SandboxError(f"cannot copy {src} to {dest}: {exc}") from exc

    def close(self) -> None:
        """Kill every process still running, wherever it went, and end the confinement."""
        atexit.unregister(self.close)
        with self._lock:
            procs, self._procs = self._procs, []
        # Everything goes before the processes are let go: a survivor would hold their output open meanwhile.
        if self._confinement is not None:
            self._confinement.close()
        local_marks.kill_marked(self._mark)
        for proc in procs:
            proc.kill()

    def __enter__(self) -> LocalSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
