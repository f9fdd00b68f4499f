"""The bench's scheduler: every trial (task × protocol × attempt) an `oc-repl run` process of its own, `jobs` at once.

One thread does everything: it builds each task's image when its first trial is due (once per task), starts trials,
reads their event streams without blocking, and writes each result.json when a trial's process has ended. Without
threads, the children can be started so that they die with the bench (Linux), and a killed bench leaves no trial
running. A trial that did not end on its own (interrupted, killed) gets no result.json: a re-run with the same
--out runs it again, and keeps every trial that has one.
"""

from __future__ import annotations

import contextlib
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

from oc_repl import __version__, signals
from oc_repl.api import RunProcess
from oc_repl.bench.results import (
    STDERR,
    TRANSCRIPT,
    TrialResult,
    from_transcript,
    read_result,
    trial_dir,
    write_json_atomic,
    write_result,
)
from oc_repl.config import OPTIONS, RunSettings
from oc_repl.errors import BuildError, OcReplError, UsageError
from oc_repl.private import make_dirs, open_private
from oc_repl.redact import RedactedStream, Redactor, redactor
from oc_repl.safejson import BadInput, load_file, loads
from oc_repl.sources import KEY, to_data
from oc_repl.tasks.model import TaskDir

PLAN = "bench.json"
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
    protocol: str
    attempt: int

    @property
    def label(self) -> str:
        return f"{self.task.name} · {self.protocol} · #{self.attempt}"


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


def plan_trials(tasks: Sequence[TaskDir], protocols: Sequence[str], k: int) -> list[Trial]:
    """Attempt-major: every task and protocol gets its first attempt before any gets a second, so a bench stopped
    early still compares protocols on the same tasks."""
    return [Trial(task, protocol, n) for n in range(1, k + 1) for task in tasks for protocol in protocols]


def write_plan(
    out: Path, tasks: Sequence[TaskDir], k: int, options: dict[str, dict[str, Any]], redact: Redactor | None = None
) -> None:
    """DIR/bench.json: what this bench runs. A re-run must give a protocol the same run options, or its trials would
    mix two setups."""
    try:
        before = read_plan(out).get("run_options") or {}
    except BadInput as exc:
        raise UsageError(str(exc), hint="choose another --out, or remove that file") from None
    for protocol, now in options.items():
        if protocol in before:
            changed = _changes(_recorded(before[protocol]), now)
            if changed:
                raise UsageError(
                    f"{out} holds {protocol} trials run with other options ({changed})",
                    hint="re-run with the same options to finish it, or choose another --out",
                )
    plan = {
        "version": __version__,
        "tasks": [{"name": t.name, "path": str(t.path), "format": t.format} for t in tasks],
        "protocols": list(options),
        "k": k,
        "run_options": {**before, **options},
        "updated_at": time.time(),
    }
    make_dirs(out)
    write_json_atomic(out / PLAN, plan, redact)


def _changes(before: dict[str, Any], now: dict[str, Any]) -> str:
    """The settings that differ between two records of a protocol's run options (an unnamed one has its default)."""
    changes = []
    for name, option in OPTIONS.items():
        default = str(option.default) if isinstance(option.default, Path) else option.default
        was, is_ = before.get(name, default), now.get(name, default)
        if name not in KEY and was != is_:
            changes.append(f"{option.flag} was {was}, now {is_}")
    return ", ".join(changes)


def _recorded(options: dict[str, Any] | list[str]) -> dict[str, Any]:
    """A protocol's recorded run options as data. Benches before settings went to trials as data recorded the flags
    of `oc-repl run` instead: those are read back by the table (a flag, with its value unless it is a switch)."""
    if isinstance(options, dict):
        return options
    switches = {o.flag: (o.name, True) for o in OPTIONS.values() if o.kind == "bool"}
    switches.update({o.negation: (o.name, False) for o in OPTIONS.values() if o.negation})
    valued = {o.flag: o for o in OPTIONS.values() if o.kind != "bool"}
    parse = {"int": int, "float": float, "str": str, "Path": str}
    data: dict[str, Any] = {}
    args = iter(options)
    for flag in args:
        if flag in switches:
            data[switches[flag][0]] = switches[flag][1]
        elif flag in valued:
            value: Any = next(args, "")
            with contextlib.suppress(ValueError):  # a value that is not of its type stays text: never the same as now
                value = parse[valued[flag].kind](value)
            data[valued[flag].name] = value
    return data


def read_plan(out: Path) -> dict[str, Any]:
    """DIR/bench.json, {} when there is none; a BadInput naming it when it is not a plan."""
    path = out / PLAN
    if not path.exists():
        return {}
    plan = load_file(path)
    problem = _plan_problem(plan)
    if problem:
        raise BadInput(path, f"not a bench plan: {problem}")
    return plan


def _plan_problem(plan: Any) -> str:
    if not isinstance(plan, dict):
        return "not a JSON object"
    shapes = {
        "protocols": lambda v: isinstance(v, list) and all(isinstance(p, str) for p in v),
        "tasks": lambda v: isinstance(v, list) and all(isinstance(t, dict) for t in v),
        "k": lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
        "run_options": lambda v: isinstance(v, dict) and all(_options_shape(a) for a in v.values()),
        "version": lambda v: isinstance(v, str),
    }
    return next(
        (f"{name}: not of its type" for name, fits in shapes.items() if name in plan and not fits(plan[name])), ""
    )


def _options_shape(options: Any) -> bool:
    """A protocol's run options: settings data, or (in benches before that) a list of flags."""
    if isinstance(options, list):
        return all(isinstance(flag, str) for flag in options)
    return isinstance(options, dict) and all(isinstance(name, str) for name in options)


class Bench:
    def __init__(
        self,
        out: Path,
        trials: list[Trial],
        settings: dict[str, RunSettings],  # per protocol
        jobs: int,
        progress: Any,  # oc_repl.bench.progress.Progress
    ) -> None:
        self.out, self.settings, self.jobs, self.progress = out, settings, jobs, progress
        self.redact = redactor_for(settings)
        # A trial whose image could not be built never ran: a re-run (after the Dockerfile is fixed) tries again.
        self.finished = {id(t): r for t in trials if (r := read_result(self._dir(t))) and r.outcome != "build_error"}
        self.queue = [t for t in trials if id(t) not in self.finished]
        self.trials = trials
        self.running: dict[int, Running] = {}
        self.images: dict[str, str | BuildError] = {}
        self.selector = selectors.DefaultSelector()
        self.stop_signal = 0  # the signal that asked the bench to stop

    def _dir(self, trial: Trial) -> Path:
        return trial_dir(self.out, trial.task.name, trial.protocol, trial.attempt)

    def run(self) -> int:
        """Runs every unfinished trial; 0 when all are finished, 130 when stopped (Ctrl-C, SIGTERM) before."""
        self.progress.begin(self.trials, list(self.finished.values()))
        try:
            with self._stoppable():
                while self.queue or self.running:
                    while self.queue and len(self.running) < self.jobs and not self.stop_signal:
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
            self._record(trial, _build_failed(trial, exc))
            return
        settings = self.settings[trial.protocol].replace(task=trial.task.path)
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
                    if isinstance(event, dict) and event.get("type") == "turn.started":
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
        code = running.process.wait()
        running.process.stdout.close()
        self._close_stderr(running)
        trial = running.trial
        result = from_transcript(
            running.directory / TRANSCRIPT,
            task=trial.task.name,
            protocol=trial.protocol,
            attempt=trial.attempt,
            exit_code=code,
            wall_time_s=time.monotonic() - running.started,
            started_at=running.started_at,
            image=running.image,
            task_format=trial.task.format,
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


def _build_failed(trial: Trial, exc: BuildError) -> TrialResult:
    return TrialResult(
        task=trial.task.name,
        protocol=trial.protocol,
        attempt=trial.attempt,
        outcome="build_error",
        failure_mode="build_error",
        resolved=False,
        exit_code=None,
        task_format=trial.task.format,
        started_at=time.time(),
        error=f"{exc.message}\n{exc.hint}".strip(),
        transcript="",
    )


def redactor_for(settings: dict[str, RunSettings]) -> Redactor:
    """The bench's redaction: the secrets of this process's environment and each protocol's API key."""
    return redactor(*sorted({each.api_key for each in settings.values()}))


def trial_options(settings: dict[str, RunSettings]) -> dict[str, dict[str, Any]]:
    """The run options each protocol's trials get, as bench.json records them: the data each trial is given."""
    return {protocol: to_data(each) for protocol, each in settings.items()}
