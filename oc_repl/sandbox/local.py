"""The local driver: commands run on this machine, under a directory of the user's choosing.

Confined (the default; see confine.py and local_view.py), the sandbox sees the host read-only with what it shares
hidden, can write only its directory and a private /tmp, has no network unless `network=True`, holds no capability,
and lives in namespaces of its own that die with it. Every command and every file operation (`write_file`,
`read_file`, `put`) happens inside, through the sandbox's first process, so a file operation reaches exactly what a
command would reach by the same path, with the same permissions: the kernel, not a check made beforehand, decides.
Relative paths are taken against the sandbox directory.

Unconfined (`confine=False`), a command can do whatever the user running oc-repl can do, network included, and files
are handled by this process. Every process a command starts then carries a mark (local_marks.py): close() kills them
all, those that left their session (`setsid daemon &`) included, and a new sandbox first ends what a SIGKILLed earlier
client left running.

Either way a directory that would expose the host (`/`, the home directory or one holding it, a system directory)
is refused.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import stat
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from oc_repl.errors import SandboxError, SandboxLost
from oc_repl.events import Isolation
from oc_repl.sandbox import local_marks, local_vcs, local_view
from oc_repl.sandbox.confine import VERIFIER_HOME, Confinement
from oc_repl.sandbox.init_channel import ConfinedProcess
from oc_repl.sandbox.limits import DEFAULT as DEFAULT_LIMITS
from oc_repl.sandbox.limits import Limits
from oc_repl.sandbox.local_process import EXIT_GRACE, CapturedProcess, LocalProcess, bash_argv, scan_proc
from oc_repl.sandbox.local_verdict import LocalLook, run_sealed
from oc_repl.sandbox.meter import CallMeter, Metered, metered
from oc_repl.sandbox.unsealed import run_unsealed
from oc_repl.types import ExecResult, Leftover, Look, Sandbox, VerifierJob, VerifierRun

# Letting go of finished processes means a scan of /proc (milliseconds); doing it once per this many commands keeps
# it off the per-call path while bounding the zombies and file descriptors we hold.
PRUNE_AT = 32
_CONFINE_HINT = "install bubblewrap (apt-get install bubblewrap), or run unconfined with --no-confine"
_CHUNK = 1 << 20


# Unconfined, the model's commands inherit this process's environment minus its secrets: the server's API key (and
# the like) would otherwise be one `env` away. Confined, they get an allow-list (local_view.CommandEnvironment).
_SECRET_NAMES = re.compile(r"(^OPENAI_|^OC_REPL_|_API_KEY$|_TOKEN$|_SECRET$|_PASSWORD$|^AWS_SECRET)", re.I)


def host_environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not _SECRET_NAMES.search(k)}


class LocalSandbox(Metered, Sandbox):
    """Runs everything on this machine, confined unless `confine=False` (see the module doc)."""

    on_host = True

    def __init__(
        self,
        root: Path,
        output_limit: int = 1 << 20,
        confine: bool = True,
        network: bool = False,
        writable_vcs: bool = False,
        limits: Limits = DEFAULT_LIMITS,
        private_files: Sequence[Path] = (),
    ) -> None:
        """`private_files`: the client's own (its config and API key files) that a confined sandbox covers, beside
        the default config file it always covers."""
        local_view.refuse_exposing(Path(root).expanduser())
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
        self._procs: list[CapturedProcess] = []
        self._lock = threading.Lock()
        self._mark = local_marks.new_mark()
        self.meter = CallMeter()
        self._confinement: Confinement | None = None
        self._environment: local_view.CommandEnvironment | None = None  # made at the first command
        if confine:
            try:
                self._confinement = Confinement(self.root, network, writable_vcs, limits, private_files)
            except SandboxError as exc:
                raise self._unconfinable(exc) from exc
        else:
            local_marks.sweep()
        # taken while bubblewrap starts, and before any command can run (none does before ready())
        self._vcs_baseline = local_vcs.found(self.root)
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

    @staticmethod
    def gone(rest: str) -> str:
        """Why a conversation cannot be taken up in this sandbox again ("" when it can)."""
        return "" if Path(rest).is_dir() else f"the conversation's sandbox directory {rest} no longer exists"

    def isolation(self) -> Isolation:
        """What holds the sandbox's commands in, as it is in force."""
        if self._confinement is None:
            return Isolation(confinement="none", network="host", limits="none")
        self.ready()
        held, processes, memory = self._confinement.limits_in_force()
        network = "host" if self.network else "none"
        return Isolation(
            confinement="bubblewrap", network=network, limits=held, max_processes=processes, memory_mb=memory
        )

    def _path(self, path: str | Path) -> Path:
        path = Path(path)
        return path if path.is_absolute() else self.root / path

    def channel(self) -> Any:
        assert self._confinement is not None
        self.ready()
        if not self._confinement.alive():
            raise SandboxLost(f"the confinement of {self.spec} has ended")
        return self._confinement.channel

    def start(
        self, command: str, tty: bool, cwd: str | None, env: dict[str, str] | None, sealed: bool = False
    ) -> CapturedProcess:
        """A command (`sealed`: a verifier, in a confined sandbox; local_verdict.py)."""
        terminal = {"TERM": "xterm", "PYTHONUNBUFFERED": "1"} if tty else {"TERM": "dumb"}
        where = str(self._path(cwd or self.root))
        if self._confinement is not None:
            channel = self.channel()
            if self._environment is None:
                self._environment = local_view.CommandEnvironment(self._confinement.writable)
            full_env = self._environment({**terminal, **(env or {})})
            with bash_argv(command, first_fd=3) as (argv, fds):
                proc: CapturedProcess = ConfinedProcess(
                    channel,
                    argv,
                    tty=tty,
                    cwd=where,
                    env=full_env,
                    limit=self.output_limit,
                    pass_fds=fds,
                    sealed=sealed,
                )
        else:
            full_env = {k: v for k, v in host_environment().items() if k != "PYTHONUNBUFFERED"}
            full_env.update({**terminal, **(env or {}), local_marks.MARK: self._mark})
            with bash_argv(command) as (argv, fds):
                proc = LocalProcess(argv, tty=tty, cwd=where, env=full_env, limit=self.output_limit, pass_fds=fds)
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
        in_use: set[int] = set()
        if self._confinement is None:
            scan = scan_proc()
            # a finished leader is a zombie, so it is not in the scan: any match is a live process it left behind
            in_use = set() if scan is None else {i for _pid, group, session in scan for i in (group, session)}
        for proc in done:
            if proc.pid not in in_use:
                proc.release()
                self._procs.remove(proc)

    @metered
    def exec(self, command: str, timeout: float, cwd: str | None = None, user: str | None = None) -> ExecResult:
        """`user` is accepted for the seam's sake; on this machine commands run as the current user."""
        proc = self.start(command, tty=False, cwd=cwd, env=None)
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

    @metered
    def spawn(
        self,
        command: str,
        tty: bool = True,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        wait: float = 0.0,
    ) -> CapturedProcess:
        return self.start(command, tty=tty, cwd=cwd, env=env)

    # --- files: opened inside the confinement when there is one ------------------------------------------------

    def _open(self, path: str | Path, write: bool, parents: bool = False) -> int:
        target = str(self._path(path))
        if self._confinement is None:
            if write and parents:
                Path(target).parent.mkdir(parents=True, exist_ok=True)
            flags = os.O_NOCTTY | os.O_NONBLOCK | os.O_CLOEXEC
            flags |= (os.O_WRONLY | os.O_CREAT | os.O_TRUNC) if write else os.O_RDONLY
            fd = os.open(target, flags, 0o666)
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                raise SandboxError(f"{path} is not a regular file")
            os.set_blocking(fd, True)
            return fd
        _answer, fds = self.channel().request("open", path=target, write=write, parents=parents)
        return fds[0]

    def _kind(self, path: str | Path) -> str:
        target = str(self._path(path))
        if self._confinement is not None:
            return self.channel().request("kind", path=target)[0]["kind"]
        try:
            mode = os.stat(target).st_mode
        except FileNotFoundError:
            return "none"
        return "dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else "other"

    def _mkdir(self, path: str | Path) -> None:
        if self._confinement is not None:
            self.channel().request("mkdir", path=str(self._path(path)))
        else:
            Path(self._path(path)).mkdir(parents=True, exist_ok=True)

    @metered
    def write_file(self, path: str, data: bytes) -> None:
        try:
            fd = self._open(path, write=True, parents=True)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        except SandboxError as exc:
            raise SandboxError(f"cannot write {path}: {exc.message}") from exc
        except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
            raise SandboxError(f"cannot write {path}: {getattr(exc, 'strerror', None) or exc}") from exc

    @metered
    def read_file(self, path: str) -> bytes:
        try:
            with os.fdopen(self._open(path, write=False), "rb") as f:
                return f.read()
        except SandboxError as exc:
            raise SandboxError(f"cannot read {path}: {exc.message}") from exc
        except (OSError, ValueError) as exc:
            raise SandboxError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from exc

    @metered
    def put(self, src: Path, dest: str) -> None:
        """Copy a directory's contents into `dest`, or a file to `dest` (into it when `dest` is a directory)."""
        src = Path(src)
        try:
            if not src.is_dir():
                target = self._path(dest)
                if self._kind(target) == "dir":
                    target = target / src.name
                self._copy(src, target)
                return
            for folder, _dirs, files in os.walk(src, followlinks=True):
                inside = self._path(dest) / Path(folder).relative_to(src)
                self._mkdir(inside)
                for name in files:
                    self._copy(Path(folder, name), inside / name)
        except (OSError, SandboxError) as exc:
            why = exc.message if isinstance(exc, SandboxError) else exc.strerror or exc
            raise SandboxError(f"cannot copy {src} to {dest}: {why}") from exc

    def _copy(self, src: Path, target: Path) -> None:
        with open(src, "rb") as source, os.fdopen(self._open(target, write=True, parents=True), "wb") as out:
            shutil.copyfileobj(source, out, _CHUNK)
            os.fchmod(out.fileno(), stat.S_IMODE(os.fstat(source.fileno()).st_mode))

    def vcs_dirs_made(self) -> list[str]:
        """Every `.git`, `.hg` and `.svn` (directory, file or link) under the sandbox directory that was not there
        when the sandbox opened, by its path: the user's own git, hg or svn would obey it there, unconfined."""
        ours = self._confinement.placeholders if self._confinement is not None else []
        return local_vcs.made_since(self.root, self._vcs_baseline, ours)

    # --- the end ----------------------------------------------------------------------------------------------

    @metered
    def agent_processes(self, keep: frozenset[int] = frozenset()) -> list[Leftover]:
        """Every process of the sandbox (those of `keep` and what they run under marked as the protocol's own)."""
        if self._confinement is None:
            return [Leftover(pid=pid, command=command) for pid, command in local_marks.marked(self._mark)]
        answer, _ = self.channel().request("list", keep=sorted(keep))
        return [
            Leftover(
                pid=int(d["pid"]),
                command=str(d["command"]),
                cwd=str(d["cwd"]),
                files=list(d["files"]),
                threads=int(d.get("threads", 1)),
                own=bool(d.get("own")),
            )
            for d in answer.get("found", [])
        ]

    @property
    def verifier_home(self) -> str:  # type: ignore[override]  # a confined sandbox's is read-only inside
        return VERIFIER_HOME if self._confinement is not None else super().verifier_home

    def run_verifier(self, job: VerifierJob) -> VerifierRun:
        if self._confinement is None:
            return run_unsealed(self, job)
        self.ready()
        return run_sealed(self, self._confinement.verifier_dir, job)

    def look(self) -> Look | None:
        """Every place a confined sandbox may write, walked by its first process; none for an unconfined one, which
        can write anywhere its user can."""
        if self._confinement is None:
            return None
        self.ready()
        roots = [str(p) for p in self._confinement.writable if str(p) not in ("/dev", "/proc")]
        return LocalLook(self, roots)

    def left_on_host(self) -> list[str]:
        return [
            f"{path}: a version-control directory; its hooks and settings run at the next command of it there"
            for path in self.vcs_dirs_made()
        ]

    @metered
    def end_agent_processes(self) -> int:
        """Kill every process of the sandbox; how many could not be."""
        with self._lock:
            procs, self._procs = self._procs, []
        left = 0
        if self._confinement is None:
            local_marks.kill_marked(self._mark)
        else:
            left = int(self.channel().request("stop")[0].get("left", 0))
        for proc in procs:
            proc.kill()
        return left

    def close(self) -> None:
        """Kill every process still running, wherever it went, and end the confinement."""
        atexit.unregister(self.close)
        with self._lock:
            procs, self._procs = self._procs, []
        # Everything goes before the processes are let go: a survivor would hold their output open meanwhile.
        if self._confinement is not None:
            self._confinement.close()
        else:
            local_marks.kill_marked(self._mark)
        for proc in procs:
            proc.kill()

    def __enter__(self) -> LocalSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
