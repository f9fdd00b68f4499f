"""A confined local sandbox's verdict: its verifier run sealed, and its change set, both through its first process.

Sealed: the verifier's files (a `--verify-file` script, pytest's plugin, the FIFO its record comes through) are put in
a directory of the client's that the sandbox sees read-only (confine.VERIFIER_HOME, a mount point nothing inside can
move), and the verifier holds the sandbox's one capability, which no command does (local_init.py seal_setup): what the
agent left running can neither change what the verifier reads nor trace it or look into its /proc. It runs beside
them, with the sandbox's own view and network.

The change set: every path of every place the sandbox may write (its directory, its /tmp and homes), walked by the
first process when the sandbox opens and at each look, compared by inode, size, times and mode.
"""

from __future__ import annotations

import marshal
import os
import posixpath
import shutil
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from oc_repl.errors import SandboxError
from oc_repl.sandbox.confine import VERIFIER_HOME
from oc_repl.sandbox.local_process import EXIT_GRACE
from oc_repl.types import Change, FileFacts, Look, VerifierJob, VerifierRun

if TYPE_CHECKING:
    from oc_repl.types import Process


class Confined(Protocol):
    """What a verifier's run and look need of the confined sandbox (sandbox/local.py), which uses them."""

    def start(
        self, command: str, tty: bool, cwd: str | None, env: dict[str, str] | None, sealed: bool = False
    ) -> Process: ...

    def read_file(self, path: str) -> bytes: ...

    def channel(self) -> Any: ...  # its init process's channel (init_channel.py)


RECORD_LIMIT = 8 << 20
_FIELDS = ("mode", "size", "dev", "ino", "mtime", "ctime", "sha256", "md5", "head", "link", "target", "error")


def _inside(path: str, host: Path) -> Path:
    relative = posixpath.relpath(path, VERIFIER_HOME)
    if relative.startswith(".."):
        raise SandboxError(f"a verifier's file outside its own directory: {path}")
    return host / relative


class _Record(threading.Thread):
    """Reads the FIFO pytest's record comes through, from the host's side, as the verifier writes it."""

    def __init__(self, fifo: Path) -> None:
        super().__init__(name="oc-repl-record", daemon=True)
        os.mkfifo(fifo, 0o666)
        os.chmod(fifo, 0o666)
        self.read_fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        self.keep_fd = os.open(fifo, os.O_WRONLY | os.O_CLOEXEC)  # no end of file between its writers
        os.set_blocking(self.read_fd, True)
        self.data = bytearray()
        self.start()

    def run(self) -> None:
        while chunk := os.read(self.read_fd, 1 << 16):
            if len(self.data) < RECORD_LIMIT:
                self.data += chunk

    def collect(self) -> bytes:
        os.close(self.keep_fd)  # the verifier's processes are gone: this was the last writer
        self.join(5.0)
        os.close(self.read_fd)
        return bytes(self.data)


def run_sealed(box: Confined, host: Path, job: VerifierJob) -> VerifierRun:
    if any(d != VERIFIER_HOME for d in job.private):
        raise SandboxError("a local: sandbox gives a verifier no directory of its own but oc-repl's")
    for entry in host.iterdir():
        shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    for path, data, mode in job.files:
        target = _inside(path, host)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        target.chmod(mode | 0o444)
    record = _Record(_inside(job.record, host)) if job.record else None
    proc = box.start(job.command, tty=False, cwd=job.cwd or None, env=job.env, sealed=True)
    timed_out = False
    if not proc.wait(job.timeout):
        if proc.alive():
            proc.kill()
            timed_out = True
        else:
            proc.wait(EXIT_GRACE)
    collected = {}
    for path in job.collect:
        try:
            collected[path] = box.read_file(path)
        except SandboxError:
            collected[path] = None
    return VerifierRun(
        output=proc.read_available(),
        exit_code=None if timed_out else proc.exit_code,
        timed_out=timed_out,
        dropped=proc.dropped,
        collected=collected,
        records=record.collect() if record is not None else b"",
        sealed=True,
    )


class LocalLook(Look):
    """The change set of every place a confined sandbox may write, since it opened, walked by its first process."""

    how = "the confined sandbox's own first process, walking every place it may write"
    tells_created = True

    def __init__(self, box: Confined, roots: list[str]) -> None:
        self.box, self.roots = box, roots
        self.base = self._walk()

    def _answer(self, op: str, **fields: object) -> tuple[dict, object]:
        answer, fds = self.box.channel().request(op, **fields)
        with os.fdopen(fds[0], "rb") as f:
            return answer, marshal.loads(f.read())

    def _walk(self) -> dict[str, tuple]:
        answer, found = self._answer("walk", roots=self.roots, skip=[VERIFIER_HOME])
        if answer.get("overflow"):
            raise SandboxError("too many files where the sandbox may write: the change set cannot be taken whole")
        return found  # type: ignore[return-value]

    def changes(self) -> list[Change]:
        now = self._walk()
        found = [Change(path=p, what="created") for p in now.keys() - self.base.keys()]
        found += [Change(path=p, what="removed") for p in self.base.keys() - now.keys()]
        found += [Change(path=p, what="changed") for p in now.keys() & self.base.keys() if now[p] != self.base[p]]
        return sorted(found, key=lambda c: c.path)

    def files(self, paths: list[str], digest: bool = True) -> dict[str, FileFacts]:
        if not paths:
            return {}
        _answer, found = self._answer("facts", paths=paths, digest=digest)
        return {p: FileFacts(**{k: v for k, v in f.items() if k in _FIELDS}) for p, f in found.items()}  # type: ignore[union-attr]

    def read(self, paths: list[str]) -> dict[str, bytes | None]:
        found: dict[str, bytes | None] = {}
        for path in paths:
            try:
                found[path] = self.box.read_file(path)
            except SandboxError:
                found[path] = None
        return found

    def listing(self, directories: list[str]) -> dict[str, list[str] | None]:
        raise SandboxError("listing is not offered by a local sandbox's look")
