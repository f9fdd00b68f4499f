"""The Python API: what `oc-repl run`, `oc-repl bench` and the shell are built on, kept thin over the runner
(oc_repl/session.py), which executes a run's plan (oc_repl/plan.py).

    from oc_repl import Settings, load_task, run_task, iter_events

    settings = Settings(api_base="http://127.0.0.1:30000/v1", sandbox="docker-image:python:3.12")
    result = run_task("create hello.txt", settings=settings, on_event=print)   # in this process
    result.status, result.exit_code, result.verify, result.attempt

    for event in iter_events(task=load_task("examples/tasks/write-greeting"), settings=settings):
        ...                                  # typed events of a run in a process of its own, as they happen

`run_task` runs in the calling thread; the agent's time limits (`timeout`, a task's agent timeout) are enforced only
in the main thread, where signals arrive. `iter_events` runs `oc-repl run --json` as a child process, which enforces
them wherever it is called from, and isolates a crash: `bench` runs every trial that way.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import selectors
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from oc_repl.apikey import KEY_ENV
from oc_repl.config import RunSettings, validate
from oc_repl.errors import OcReplError, UsageError
from oc_repl.event_read import parse_event
from oc_repl.plan import check_attempts
from oc_repl.session import Fanout, TaskResult, run_attempts
from oc_repl.sources import explicit, to_data
from oc_repl.tasks.model import TaskDir, load_task
from oc_repl.types import Consent, refuse

Settings = RunSettings
__all__ = ["RunProcess", "Settings", "TaskDir", "TaskResult", "iter_events", "load_task", "run_attempts", "run_task"]


def _with_task(settings: RunSettings | None, task: TaskDir | Path | str | None) -> RunSettings:
    """The settings validated as the command line validates them, with the task dir set when one is given."""
    values = explicit(settings or RunSettings())
    if task is not None:
        values["task"] = task.path if isinstance(task, TaskDir) else Path(task)
    return validate(values)


def run_task(
    instruction: str = "",
    *,
    task: TaskDir | Path | str | None = None,
    settings: RunSettings | None = None,
    attempts: int = 1,
    on_event: Callable[[Any], None] | None = None,
    transcript: Path | None = None,
    consent: Consent = refuse,
) -> TaskResult:
    """One run in this process: an instruction (in `settings.sandbox`) or a task directory; typed result. A `local:`
    sandbox runs model-chosen commands on this host only with `yes=True` or a yes from `consent` (given the question):
    the library never asks at a terminal."""
    from oc_repl.transcript import TranscriptWriter

    settings = _with_task(settings, task)
    writer = TranscriptWriter(transcript, secrets=(settings.api_key,)) if transcript else None
    sinks = [sink for sink in (writer, on_event) if sink is not None]
    try:
        return run_attempts(
            settings, instruction, Fanout(*sinks), attempts=attempts, consent=consent, transcript=str(transcript or "")
        )
    finally:
        if writer is not None:
            writer.close()


# --- runs in a process of their own ----------------------------------------------------------------------------------


def _die_with_parent(parent: int, libc: Any) -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: the child gets SIGTERM if its parent dies, so a killed bench leaves no run (or container) behind."""
    with contextlib.suppress(OSError, AttributeError):
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent died before the line above: no signal will come, so go now
        os._exit(128 + signal.SIGTERM)


def _libc() -> Any:
    """The C library, loaded in the parent: nothing is imported between fork and exec (and a one-shot run, which
    never starts a child, never loads ctypes)."""
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


class RunProcess:
    """`oc-repl run --json` as a child process. Its stdout lines are read without blocking (`read_lines`) or as they
    come (`lines`, `events`); `terminate` stops it as SIGTERM does any run: cleaned up, outcome `interrupted`."""

    def __init__(
        self,
        settings: RunSettings,
        instruction: str = "",
        *,
        transcript: Path | None = None,
        image: str | None = None,
        attempts: int = 1,
        stderr: IO[bytes] | int | None = None,  # a file, subprocess.PIPE, or None for nowhere
    ) -> None:
        # The settings go as data on stdin, the key by environment: neither is on the command line.
        data = to_data(settings.replace(json_output=True, transcript=transcript, image=image or settings.image))
        argv = [sys.executable, "-m", "oc_repl", "run", "--settings-json", "-"]
        argv += ["--attempts", str(attempts)] if attempts != 1 else []
        argv += ["--", instruction] if instruction else []
        self.proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=stderr if stderr is not None else subprocess.DEVNULL,
            stdin=subprocess.PIPE,
            env={**os.environ, KEY_ENV: settings.api_key},
            preexec_fn=functools.partial(_die_with_parent, os.getpid(), _libc()) if sys.platform == "linux" else None,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        with contextlib.suppress(BrokenPipeError), self.proc.stdin as stdin:  # a child that died at once says why
            stdin.write(json.dumps(data).encode())
        self.stdout = self.proc.stdout
        self._partial = b""
        self.eof = False

    def fileno(self) -> int:
        return self.stdout.fileno()

    def read_lines(self) -> list[str]:
        """The complete lines available now (call when the pipe is readable); `eof` turns true at its end."""
        data = os.read(self.fileno(), 1 << 16)
        if not data:
            self.eof = True
            data, self._partial = self._partial, b""
            return [data.decode("utf-8", "replace")] if data.strip() else []
        *lines, self._partial = (self._partial + data).split(b"\n")
        return [line.decode("utf-8", "replace") for line in lines if line.strip()]

    def lines(self) -> Iterator[str]:
        with selectors.DefaultSelector() as selector:
            selector.register(self.stdout, selectors.EVENT_READ)
            while not self.eof:
                selector.select()
                yield from self.read_lines()

    def events(self) -> Iterator[Any]:
        for line in self.lines():
            yield parse_event(line)

    def poll(self) -> int | None:
        return self.proc.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self.proc.wait(timeout)

    def terminate(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()

    def close(self) -> None:
        """Stops the run if it still goes on, and waits for its cleanup."""
        self.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(60)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.stdout.close()


def iter_events(
    instruction: str = "",
    *,
    task: TaskDir | Path | str | None = None,
    settings: RunSettings | None = None,
    attempts: int = 1,
    transcript: Path | None = None,
) -> Iterator[Any]:
    """The typed events of one run in a child process, as they happen; leaving the loop early stops the run."""
    import tempfile

    settings = _with_task(settings, task)
    check_attempts(settings, attempts)
    with tempfile.TemporaryFile() as stderr:
        run = RunProcess(settings, instruction, transcript=transcript, attempts=attempts, stderr=stderr)
        ended = False
        try:
            for event in run.events():
                ended = ended or event.type == "thread.completed"
                yield event
            code = run.wait()
        finally:
            run.close()
        if not ended:  # it stopped before its first thread began (a usage error, a crash): say why, not nothing
            stderr.seek(0)
            why = stderr.read().decode("utf-8", "replace").strip() or f"exit {code}"
            raise (UsageError if code == 2 else OcReplError)(f"the run did not start: {why}")
