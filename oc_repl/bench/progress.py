"""Live progress of a bench on stderr: trials done/total, resolved so far per protocol, the running trials, an ETA.

On a terminal it is one rich display redrawn in place (by the scheduler's own loop: no refresh thread); elsewhere
(a log, CI) it is one line per finished trial.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

REDRAW_EVERY = 0.25  # seconds


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


class Progress:
    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True, highlight=False)
        self.live: Live | None = None
        self.total = self.done = self.done_here = 0
        self.resolved: dict[str, int] = {}
        self.finished_per_protocol: dict[str, int] = {}
        self.status = ""
        self.began = time.monotonic()
        self._drawn = 0.0

    # --- what the scheduler reports ----------------------------------------------------------------------------

    def begin(self, trials: list[Any], already: list[Any]) -> None:
        self.total, self.done = len(trials), len(already)
        for trial in trials:
            self.resolved.setdefault(trial.protocol, 0)
            self.finished_per_protocol.setdefault(trial.protocol, 0)
        for result in already:
            self._count(result)
        if already:
            self.console.print(f"{len(already)} of {self.total} trials already finished in this directory: kept")
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
        self._count(result)
        if self.live is None:
            passed = f" {result.tests_passed}/{result.tests_total} tests" if result.tests_total else ""
            self.console.print(
                f"[{self.done}/{self.total}] {trial.label}: {result.failure_mode}{passed} "
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

    def _count(self, result: Any) -> None:
        self.resolved[result.protocol] = self.resolved.get(result.protocol, 0) + bool(result.resolved)
        self.finished_per_protocol[result.protocol] = self.finished_per_protocol.get(result.protocol, 0) + 1

    def eta(self) -> float | None:
        """Seconds left at the pace of the trials this run finished (those found finished cost nothing)."""
        if not self.done_here:
            return None
        return (time.monotonic() - self.began) / self.done_here * (self.total - self.done)

    def refresh(self, running: list[Any], force: bool = False) -> None:
        now = time.monotonic()
        if self.live is None or (not force and now - self._drawn < REDRAW_EVERY):
            return
        self._drawn = now
        self.live.update(self.render(running), refresh=True)

    def render(self, running: list[Any]) -> Group:
        eta = self.eta()
        head = Text.assemble(
            (f"trials {self.done}/{self.total}", "bold"),
            f" · running {len(running)} · elapsed {_duration(time.monotonic() - self.began)}",
            f" · ETA {_duration(eta)}" if eta is not None else " · ETA …",
        )
        per_protocol = Text(
            "   ".join(
                f"{p}: {self.resolved[p]}/{self.finished_per_protocol[p]} resolved" for p in sorted(self.resolved)
            ),
            style="cyan",
        )
        table = Table.grid(padding=(0, 2))
        for r in sorted(running, key=lambda r: r.started):
            table.add_row(
                Text(r.trial.label), Text(f"turn {r.turn}", style="dim"), _duration(time.monotonic() - r.started)
            )
        parts: list[Any] = [head, per_protocol, table]
        if self.status:
            parts.append(Text(self.status, style="yellow"))
        return Group(*parts)
