"""Live progress of a bench on stderr: trials done/total, each arm's score so far with its interval, infrastructure
failures so far, the server's health (requests in flight, tokens/s, the last error), the running trials, an ETA.

On a terminal it is one rich display redrawn in place (by the scheduler's own loop: no refresh thread); elsewhere
(a log, CI) it is one line per finished trial, and one per change of how many trials run at once. `bench watch`
draws the same display from a bench directory another process is filling.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from oc_repl.bench.exact import wilson

REDRAW_EVERY = 0.25  # seconds


def duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


class Tally:
    """Per arm: the trials that count, those resolved, and infrastructure failures (left out of the score)."""

    def __init__(self) -> None:
        self.scored: dict[str, int] = {}
        self.resolved: dict[str, int] = {}
        self.infra: dict[str, int] = {}

    def arm(self, label: str) -> None:
        for counts in (self.scored, self.resolved, self.infra):
            counts.setdefault(label, 0)

    def add(self, result: Any) -> None:
        label = result.label
        self.arm(label)
        if result.infrastructure:
            self.infra[label] += 1
        else:
            self.scored[label] += 1
            self.resolved[label] += bool(result.resolved)

    def verdicts(self) -> list[str]:
        lines = []
        for label in sorted(self.scored):
            c, n = self.resolved[label], self.scored[label]
            low, high = wilson(c, n)
            rate = f"{100 * c / n:.1f}% [{100 * low:.1f}–{100 * high:.1f}]" if n else "–"
            infra = f" · {self.infra[label]} infra" if self.infra[label] else ""
            lines.append(f"{label}: {c}/{n} resolved, pass@1 {rate}{infra}")
        return lines


class Progress:
    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True, highlight=False)
        self.live: Live | None = None
        self.total = self.done = self.done_here = 0
        self.tally = Tally()
        self.health: Any = None  # oc_repl.bench.health.Health
        self.status = ""
        self.began = time.monotonic()
        self._drawn = 0.0
        self._noted = 0

    # --- what the scheduler reports ----------------------------------------------------------------------------

    def begin(self, trials: list[Any], already: list[Any], health: Any = None, again: int = 0) -> None:
        self.total, self.done, self.health = len(trials), len(already), health
        for trial in trials:
            self.tally.arm(trial.arm)
        for result in already:
            self.tally.add(result)
        if already:
            self.console.print(f"{len(already)} of {self.total} trials already finished in this directory: kept")
        if again:
            self.console.print(f"{again} trials that failed on infrastructure run again")
        if self.console.is_terminal:
            self.live = Live(console=self.console, auto_refresh=False, transient=False)
            self.live.start()
        self.refresh([])

    def building(self, task: str) -> None:
        self.status = f"building the image of {task}"
        self.refresh([], force=True)

    def started(self, trial: Any) -> None:
        self.status = ""

    def finished(self, trial: Any, result: Any) -> None:
        self.done += 1
        self.done_here += 1
        self.tally.add(result)
        if self.live is None:
            passed = f" {result.tests_passed}/{result.tests_total} tests" if result.tests_total else ""
            infra = " (infrastructure)" if result.infrastructure else ""
            self.console.print(
                f"[{self.done}/{self.total}] {trial.label}: {result.failure_mode}{infra}{passed} "
                f"({result.turns} turns, {result.wall_time_s:.1f} s)",
                soft_wrap=True,
            )

    def unfinished(self, trial: Any) -> None:
        if self.live is None:
            self.console.print(f"{trial.label}: interrupted (it runs again when the bench is re-run)", soft_wrap=True)

    def end(self) -> None:
        if self.live is not None:
            self.refresh([], force=True)  # the last state, not the one before the last trial ended
            self.live.stop()
            self.live = None

    # --- drawing --------------------------------------------------------------------------------------------------

    def eta(self) -> float | None:
        """Seconds left at the pace of the trials this run finished (those found finished cost nothing)."""
        if not self.done_here:
            return None
        return (time.monotonic() - self.began) / self.done_here * (self.total - self.done)

    def refresh(self, running: list[Any], force: bool = False) -> None:
        notes = self.health.notes if self.health is not None else []
        for note in notes[self._noted :]:  # a change of concurrency is said once, also in a log
            if self.live is None:
                self.console.print(note, soft_wrap=True)
        self._noted = len(notes)
        now = time.monotonic()
        if self.live is None or (not force and now - self._drawn < REDRAW_EVERY):
            return
        self._drawn = now
        self.live.update(self.render(running), refresh=True)

    def render(self, running: list[Any]) -> Group:
        eta = self.eta()
        head = Text.assemble(
            (f"trials {self.done}/{self.total}", "bold"),
            f" · running {len(running)} · elapsed {duration(time.monotonic() - self.began)}",
            f" · ETA {duration(eta)}" if eta is not None else " · ETA …",
        )
        infra = sum(self.tally.infra.values())
        if infra:
            head.append(f" · {infra} infrastructure failures so far", style="yellow")
        parts: list[Any] = [head, Text("\n".join(self.tally.verdicts()), style="cyan")]
        if self.health is not None:
            parts.append(Text(self.health.line(), style="dim"))
            if self.health.notes:
                parts.append(Text(self.health.notes[-1], style="yellow"))
        table = Table.grid(padding=(0, 2))
        for r in sorted(running, key=lambda r: r.started):
            table.add_row(
                Text(r.trial.label), Text(f"turn {r.turn}", style="dim"), duration(time.monotonic() - r.started)
            )
        parts.append(table)
        if self.status:
            parts.append(Text(self.status, style="yellow"))
        return Group(*parts)
