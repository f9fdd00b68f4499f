"""The bench's scheduler: every trial (task × arm × attempt) an `oc-repl run` process of its own, `jobs` at once.

One thread does everything: it builds each task's image when its first trial is due (once per task), starts trials,
reads their event streams without blocking, and writes each result.json when a trial's process has ended. Without
threads, the children can be started so that they die with the bench (Linux), and a killed bench leaves no trial
running. A trial that did not end on its own (interrupted, killed) gets no result.json: a re-run with the same
--out runs it again, and keeps every trial that has one, but for those that failed on infrastructure (unless told
to keep them): they said nothing about the model, and run again, their earlier failures noted in the new record.
Fewer trials start while the server struggles (health.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import selectors
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from oc_repl import signals
from oc_repl.api import RunProcess
from oc_repl.bench.benchplan import PLAN, read_plan, write_plan  # noqa: F401 (where callers found them first)
from oc_repl.bench.health import Health
from oc_repl.bench.results import STDERR, TRANSCRIPT, TrialResult, from_transcript, read_result, trial_dir, write_result
from oc_repl.config import RunSettings
from oc_repl.errors import BuildError, OcReplError
from oc_repl.outcome import Status
from oc_repl.private import make_dirs, open_private
from oc_repl.redact import RedactedStream, Redactor, redactor
from oc_repl.safejson import loads
from oc_repl.sources import to_data
from oc_repl.tasks.model import TaskDir

TRIAL_MEMORY = 512 << 20  # a trial's process and container, with headroom for what the task's commands use
EOF_GRACE = 5.0  # seconds a finished trial's stdout may stay open (a leaked descriptor) before it is let go


def default_jobs() -> int:
    """Trials mostly wait (on the model, on commands), so twice the cores keeps the machine busy without queueing
    the CPU; fewer when the available memory would not hold that many trials."""
    cpus = os.cpu_count() or 1
    try:
        meminfo = Path("/proc/meminfo").read_text()
        available = int(next(line.split()[1] for line in meminfo.splitlines() if line.startswith("MemAvailable:")))
        by_memory = available * 1024 // TRIAL_MEMORY
    except (OSError, StopIteration, ValueError):
        by_memory = 2 * cpus
    return max(1, min(2 * cpus, by_memory))


@dataclass
class Trial:
    task: TaskDir
    arm: str  # the label of its arm: the key of its settings, its directory
    attempt: int

    @property
    def label(self) -> str:
        return f"{self.task.name} · {self.arm} · #{self.attempt}"

    def seed(self, bench_seed: int) -> int:
        """Its own sampling seed, the same in every run of the bench: made from the bench's, its task, arm and
        attempt."""
        key = f"{bench_seed}\0{self.task.name}\0{self.arm}\0{self.attempt}".encode()
        return int.from_bytes(hashlib.sha256(key).digest()[:4], "big") >> 1  # below 2**31: every server takes it


@dataclass
class Running:
    trial: Trial
    process: RunProcess
    directory: Path
    stderr: RedactedStream
    image: str
    started: float = field(default_factory=time.monotonic)
    started_at: float = field(default_factory=time.time)
    turn: int = 0
    ended_at: float | None = None  # when the process was first seen to have exited


def plan_trials(tasks: Sequence[TaskDir], arms: Sequence[str], k: int) -> list[Trial]:
    """Attempt-major: every task and arm gets its first attempt before any gets a second, so a bench stopped early
    still compares arms on the same tasks."""
    return [Trial(task, arm, n) for n in range(1, k + 1) for task in tasks for arm in arms]


def infra_note(result: TrialResult) -> str:
    """An infrastructure failure in one line, as the record of the trial that runs again keeps it."""
    error = result.error.strip().splitlines()
    return f"{result.failure_mode}: {error[0][:200]}" if error else result.failure_mode


class Bench:
    def __init__(
        self,
        out: Path,
        trials: list[Trial],
        settings: dict[str, RunSettings],  # per arm
        jobs: int,
        progress: Any,  # oc_repl.bench.progress.Progress
        keep_failures: bool = False,  # keep the trials that failed on infrastructure instead of running them again
        only_infra: bool = False,  # run only those (a round of --retry-infra)
        adapt: bool = True,
    ) -> None:
        self.out, self.settings, self.jobs, self.progress = out, settings, jobs, progress
        self.redact = redactor_for(settings)
        before = {id(t): r for t in trials if (r := read_result(self._dir(t)))}
        self.finished = {i: r for i, r in before.items() if keep_failures or not r.infrastructure}
        self.earlier = {i: [*r.infra_before, infra_note(r)] for i, r in before.items() if i not in self.finished}
        self.queue = [t for t in trials if id(t) not in self.finished and (not only_infra or id(t) in self.earlier)]
        self.trials = [t for t in trials if id(t) in self.finished or t in self.queue]
        self.health = Health(jobs, adapt)
        self.running: dict[int, Running] = {}
        self.images: dict[str, str | BuildError] = {}
        self.selector = selectors.DefaultSelector()
        self.stop_signal = 0  # the signal that asked the bench to stop

    def _dir(self, trial: Trial) -> Path:
        return trial_dir(self.out, trial.task.name, trial.arm, trial.attempt)

    def run(self) -> int:
        """Runs every unfinished trial; 0 when all are finished, 130 when stopped (Ctrl-C, SIGTERM) before."""
        self.progress.begin(self.trials, list(self.finished.values()), self.health, len(self.earlier))
        try:
            with self._stoppable():
                while self.queue or self.running:
                    while self.queue and len(self.running) < self.health.allowed() and not self.stop_signal:
                        self._start(self.queue.pop(0))
                    self._pump(timeout=0.25)
                    self.progress.refresh(list(self.running.values()))
                    if self.stop_signal:
                        raise KeyboardInterrupt(signal.Signals(self.stop_signal).name)
        except KeyboardInterrupt:
            with signals.deferred():
                self._stop()
            return 130
        finally:
            self.progress.end()
            self.selector.close()
        return 0

    @contextlib.contextmanager
    def _stoppable(self) -> Iterator[None]:
        """Ctrl-C, SIGTERM and SIGHUP stop the bench. Each is also remembered and checked every loop: an exception
        a handler raises while a finalizer runs (a Popen's __del__, say) is printed and dropped by Python."""

        def stop(signum: int, frame: Any) -> None:
            self.stop_signal = signum
            raise KeyboardInterrupt(signal.Signals(signum).name)

        # a SIGINT ignored when the bench started (started in the background) stays ignored
        watched = [s for s in (signal.SIGINT, *signals.STOPS) if signal.getsignal(s) is not signal.SIG_IGN]
        with signals.handled(watched, stop):
            yield

    # --- one trial --------------------------------------------------------------------------------------------

    def _image(self, task: TaskDir) -> str:
        if task.name not in self.images:
            from oc_repl.tasks.image import build_image

            self.progress.building(task.name)
            try:
                self.images[task.name] = build_image(task)
            except BuildError as exc:
                self.images[task.name] = exc
            except OcReplError as exc:  # e.g. no Dockerfile; a daemon that cannot be reached
                self.images[task.name] = BuildError(exc.message, hint=exc.hint)
        image = self.images[task.name]
        if isinstance(image, BuildError):
            raise image
        return image

    def _start(self, trial: Trial) -> None:
        directory = self._dir(trial)
        if directory.exists():  # what an unfinished earlier run of this trial left
            shutil.rmtree(directory)
        make_dirs(directory)
        try:
            image = self._image(trial.task)
        except BuildError as exc:
            self._record(trial, _build_failed(trial, self.settings[trial.arm].protocol, exc))
            return
        settings = self.settings[trial.arm].replace(task=trial.task.path)
        if settings.seed is not None:
            settings = settings.replace(seed=trial.seed(settings.seed))
        process = RunProcess(settings, transcript=directory / TRANSCRIPT, image=image, stderr=subprocess.PIPE)
        assert process.proc.stderr is not None
        stderr = RedactedStream(process.proc.stderr, open_private(directory / STDERR, "wb"), self.redact)
        os.set_blocking(process.fileno(), False)
        running = Running(trial, process, directory, stderr, image)
        self.running[process.fileno()] = running
        self.selector.register(process.fileno(), selectors.EVENT_READ, running)
        self.selector.register(stderr.fileno(), selectors.EVENT_READ, stderr)
        self.progress.started(trial)

    def _pump(self, timeout: float) -> None:
        for key, _ in self.selector.select(timeout=timeout) if self.running else []:
            if isinstance(key.data, RedactedStream):
                if not key.data.pump():  # the trial closed its stderr
                    self.selector.unregister(key.fd)
                continue
            running: Running = key.data
            try:
                lines = running.process.read_lines()
            except BlockingIOError:
                continue
            for line in lines:
                with contextlib.suppress(ValueError):
                    event = loads(line)
                    if not isinstance(event, dict):
                        continue
                    self.health.event(key.fd, event)
                    if event.get("type") == "turn.started":
                        turn = event.get("turn")
                        running.turn = turn if isinstance(turn, int) else running.turn
        now = time.monotonic()
        for fd, running in list(self.running.items()):
            if running.process.poll() is None:
                continue
            running.ended_at = running.ended_at or now
            if running.process.eof or now - running.ended_at > EOF_GRACE:
                self._finish(fd, running)

    def _finish(self, fd: int, running: Running) -> None:
        self.selector.unregister(fd)
        del self.running[fd]
        self.health.ended(fd)
        code = running.process.wait()
        running.process.stdout.close()
        self._close_stderr(running)
        trial = running.trial
        result = from_transcript(
            running.directory / TRANSCRIPT,
            task=trial.task.name,
            protocol=self.settings[trial.arm].protocol,
            attempt=trial.attempt,
            exit_code=code,
            wall_time_s=time.monotonic() - running.started,
            started_at=running.started_at,
            image=running.image,
            task_format=trial.task.format,
            arm=trial.arm,
        )
        if result.outcome == "interrupted":  # it did not end on its own: unfinished, run again next time
            self.progress.unfinished(trial)
            return
        self._record(trial, result)

    def _close_stderr(self, running: Running) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(running.stderr.fileno())
        running.stderr.close()

    def _record(self, trial: Trial, result: TrialResult) -> None:
        result.infra_before = self.earlier.get(id(trial), [])
        write_result(self._dir(trial), result, self.redact)
        self.finished[id(trial)] = result
        self.progress.finished(trial, result)

    def _stop(self) -> None:
        """Every running trial is told to stop (SIGTERM: it cleans up its container) and waited for."""
        for running in self.running.values():
            running.process.terminate()
        for running in list(self.running.values()):
            running.process.close()
            self._close_stderr(running)
        self.running.clear()


def _build_failed(trial: Trial, protocol: str, exc: BuildError) -> TrialResult:
    return TrialResult(
        task=trial.task.name,
        protocol=protocol,
        arm="" if trial.arm == protocol else trial.arm,
        attempt=trial.attempt,
        outcome=Status.BUILD_ERROR.value,
        failure_mode=Status.BUILD_ERROR.failure_mode(),
        resolved=False,
        exit_code=None,
        task_format=trial.task.format,
        started_at=time.time(),
        error=f"{exc.message}\n{exc.hint}".strip(),
        transcript="",
    )


def redactor_for(settings: dict[str, RunSettings]) -> Redactor:
    """The bench's redaction: the secrets of this process's environment and each arm's API key."""
    return redactor(*sorted({each.api_key for each in settings.values()}))


def trial_options(settings: dict[str, RunSettings]) -> dict[str, dict[str, Any]]:
    """The run options each arm's trials get, as bench.json records them: the data each trial is given."""
    return {arm: to_data(each) for arm, each in settings.items()}


def protocol_settings(settings: dict[str, RunSettings]) -> dict[str, dict[str, Any]]:
    """Each arm's protocol's own settings as its trials run them (defaults and `--exact`'s values included), for
    bench.json: what a record of its trials means does not hang on a later release's defaults."""
    found = {}
    for arm, each in settings.items():
        run = each.with_exact()
        found[arm] = {k: v for k, v in run.own(run.protocol_kind().options).items() if v is not None}
    return found
