"""`oc-repl bench watch DIR DIR ...` (or one DIR with --html): several runs followed side by side while they run
(local benches and Harbor jobs alike): every arm's pass@1 and partial score with their intervals as trials land, each
arm against the first (the paired difference so far, with its test), the sequential decision so far (sequential.py, at
the first run's --until settings or alpha 0.05 and a 5 pp margin), and each run's server health as its running
trials' transcripts tell it. `--html FILE` writes the same page for a browser, which reloads it every interval."""

from __future__ import annotations

import io
import time
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.text import Text

from oc_repl.bench.compare import run_labels, summarize
from oc_repl.bench.report import comparison_lines, gather_arms, score_table
from oc_repl.bench.sequential import decision_lines, decisions
from oc_repl.bench.watch import Watcher
from oc_repl.errors import UsageError
from oc_repl.private import write_atomic

ALPHA, MARGIN = 0.05, 0.05  # the sequential decision's, where the first run was not itself run --until decided


class RunsWatch:
    def __init__(self, dirs: list[Path]) -> None:
        self.dirs = dirs
        self.watchers = [Watcher(d) for d in dirs]
        self.labels = run_labels(dirs)
        how = self.watchers[0].plan.get("sequential") or {}
        self.alpha, self.margin = float(how.get("alpha", ALPHA)), float(how.get("margin", MARGIN))
        self._scored: tuple[int, list[Any]] = (-1, [])

    def look(self) -> int:
        """Read what landed; the trials finished in all runs."""
        for watcher in self.watchers:
            watcher.look(watcher.planned(), first=True)
        return sum(len(w.known) for w in self.watchers)

    def done(self) -> bool:
        return all(len(w.known) >= len(w.planned()) for w in self.watchers)

    def page(self) -> Group:
        planned = sum(len(w.planned()) for w in self.watchers)
        known = sum(len(w.known) for w in self.watchers)
        parts: list[Any] = [Text(f"trials {known}/{planned} finished in {len(self.dirs)} runs", style="bold")]
        parts.extend(self._scores(known))
        for label, watcher in zip(self.labels, self.watchers, strict=True):
            running = len(watcher.followed)
            parts.append(Text(f"{label}: {len(watcher.known)} finished, {running} running; {watcher.health.line()}"))
        return Group(*parts)

    def _scores(self, known: int) -> list[Any]:
        """The scores, comparisons and decision of the runs' finished trials, read again only when more finished
        (every look rewrites the page; the runs' records need reading only when they changed)."""
        if self._scored[0] == known:
            return self._scored[1]
        parts: list[Any] = []
        finished = [d for d, w in zip(self.dirs, self.watchers, strict=True) if w.known]
        if finished:
            arms = gather_arms(finished)
            summary = summarize(arms)
            parts.append(score_table(summary))
            parts.extend(Text(line) for line in comparison_lines(summary) if not line.startswith("  gained"))
            tasks = sorted(set.intersection(*(set(a.planned_tasks or {t.task for t in a.trials}) for a in arms)))
            if len(arms) > 1:
                found = decisions({a.label: a.trials for a in arms}, tasks, self.alpha, self.margin)
                parts.append(Text("sequential decision so far:"))
                parts.extend(Text(f"  {line}") for line in decision_lines(found))
        self._scored = (known, parts)
        return parts

    def write_html(self, path: Path, interval: float) -> None:
        console = Console(record=True, file=io.StringIO(), width=160, force_terminal=False)
        console.print(self.page())
        html = console.export_html(inline_styles=True)
        refresh = f'<meta http-equiv="refresh" content="{max(1, round(interval))}">\n<title>oc-repl bench watch</title>'
        write_atomic(path, html.replace("<head>", f"<head>\n{refresh}", 1))

    def follow(self, interval: float, once: bool, html: Path | None, console: Console) -> int:
        shown = -1
        try:
            while True:
                known = self.look()
                if html is not None:
                    self.write_html(html, interval)
                if known != shown:
                    console.print(self.page())
                    shown = known
                if once or self.done():
                    return 0
                time.sleep(interval)
        except KeyboardInterrupt:
            return 130


def watch_runs(dirs: list[Path], interval: float, once: bool, html: Path | None) -> int:
    if len(set(dirs)) < len(dirs):
        raise UsageError("a run is named twice")
    from oc_repl.render.human import make_console

    return RunsWatch(dirs).follow(interval, once, html, make_console(stderr=True))
