"""`oc-repl bench watch DIR`: a bench followed from its directory alone, while another process (here, or on another
machine sharing the directory) runs it.

The plan (bench.json) gives the denominator: every trial planned. Finished trials are their result.json; running
ones are trial directories whose transcript grew lately and that have no result yet. Their transcripts are read as
they grow (from where the last look stopped) for the turn each is at and the server's health.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from oc_repl.bench import harbor_jobs
from oc_repl.bench.benchplan import read_plan
from oc_repl.bench.health import Health
from oc_repl.bench.progress import Progress
from oc_repl.bench.results import RESULT, TRANSCRIPT, TrialResult, read_result
from oc_repl.errors import UsageError
from oc_repl.safejson import BadInput, loads

STALE = 600.0  # seconds without a new event after which an unfinished trial is taken as abandoned, not running


@dataclass
class Followed:
    """A running trial as a transcript shows it."""

    trial: Any
    started: float = field(default_factory=time.monotonic)
    turn: int = 0
    offset: int = 0
    partial: bytes = b""


class Watcher:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.harbor = bool(harbor_jobs.jobs_in(out))  # Harbor's job (its trials' folders are named by Harbor)
        try:
            self.plan = harbor_jobs.load(out)[1] if self.harbor else read_plan(out)
        except BadInput as exc:
            raise UsageError(str(exc)) from None
        if not self.plan:
            raise UsageError(f"{out} is not a bench directory (no bench.json)", hint="start one with `oc-repl bench`")
        self.health = Health(jobs=1, adapt=False)
        self.followed: dict[Path, Followed] = {}
        self.known: dict[Path, TrialResult] = {}
        self.progress = Progress()

    def planned(self) -> list[SimpleNamespace]:
        names = [str(t.get("name")) for t in self.plan.get("tasks") or [] if isinstance(t, dict)]
        arms = [str(a) for a in self.plan.get("protocols") or []]
        k = int(self.plan.get("k") or 0)
        return [
            SimpleNamespace(task=task, arm=arm, attempt=n, label=f"{task} · {arm} · #{n}")
            for n in range(1, k + 1)
            for task in names
            for arm in arms
        ]

    def follow(self, interval: float, once: bool = False, until: Callable[[], bool] | None = None) -> int:
        """Look every `interval` seconds until every planned trial is finished, or `until()` says the run is over
        (a Harbor job: by default once Harbor says it finished and no trial runs)."""
        over = until or (lambda: self.harbor and harbor_jobs.ended(self.out) and not harbor_jobs.running(self.out))
        trials = self.planned()
        self.look(trials, first=True)
        self.progress.begin(trials, list(self.known.values()), self.health)
        try:
            while not once and len(self.known) < len(trials) and not over():
                time.sleep(interval)
                self.look(trials)
                self.progress.refresh(list(self.followed.values()), force=True)
        except KeyboardInterrupt:
            return 130
        finally:
            if once and self.progress.live is None:
                self.progress.console.print(self.progress.render(list(self.followed.values())))
            self.progress.end()
        return 0

    def look(self, trials: list[SimpleNamespace], first: bool = False) -> None:
        if self.harbor:
            return self._look_harbor(trials, first)
        now = time.time()
        for trial in trials:
            directory = self.out / "trials" / trial.task / trial.arm / str(trial.attempt)
            if directory in self.known:
                continue
            result = read_result(directory) if (directory / RESULT).is_file() else None
            if result is not None:
                self.known[directory] = result
                self.followed.pop(directory, None)
                self.health.ended(directory)
                if not first:
                    self.progress.finished(trial, result)
                continue
            transcript = directory / TRANSCRIPT
            with contextlib.suppress(OSError):
                if now - transcript.stat().st_mtime < STALE:
                    self._read(directory, self.followed.setdefault(directory, Followed(trial)))

    def _look_harbor(self, trials: list[SimpleNamespace], first: bool) -> None:
        """A Harbor job: its finished trials read again (numbered as they started), its running ones followed by
        the transcript oc-repl's agent writes into each (another agent's show as running, at no turn)."""
        try:
            results = harbor_jobs.finished(self.out)
        except BadInput:
            return  # a result.json being written: the next look reads it
        by_key = {(t.task, t.arm, t.attempt): t for t in trials}
        for result in results:
            folder = self.out / result.directory
            if folder in self.known:
                continue
            self.known[folder] = result
            self.followed.pop(folder, None)
            self.health.ended(folder)
            trial = by_key.get((result.task, result.label, result.attempt))
            if not first and trial is not None:
                self.progress.finished(trial, result)
        for folder in harbor_jobs.running(self.out):
            label = f"{folder.name.split('__')[0]} · {folder.name}"
            followed = self.followed.setdefault(folder, Followed(SimpleNamespace(label=label)))
            with contextlib.suppress(OSError):
                self._read(folder, followed, harbor_jobs.TRANSCRIPT)

    def _read(self, directory: Path, followed: Followed, transcript: str = TRANSCRIPT) -> None:
        with (directory / transcript).open("rb") as f:
            f.seek(followed.offset)
            data = followed.partial + f.read()
            followed.offset = f.tell()
        *lines, followed.partial = data.split(b"\n")
        for line in lines:
            with contextlib.suppress(ValueError):
                event = loads(line)
                if isinstance(event, dict):
                    self.health.event(directory, event)
                    if event.get("type") == "turn.started" and isinstance(event.get("turn"), int):
                        followed.turn = event["turn"]
