"""`oc-repl bench plan [PILOT...]`: how many trials a comparison needs (oc_repl/bench/planning.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from oc_repl.cli.exits import report_error

DIRS = click.Path(exists=True, file_okay=False, path_type=Path)


@click.command("plan")
@click.argument("pilots", nargs=-1, type=DIRS)
@click.option("--difference", type=click.FloatRange(0, 100, min_open=True), required=True,
              help="The smallest difference in pass@1 that matters, in percentage points.")  # fmt: skip
@click.option("--alpha", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.05, show_default=True)
@click.option("--power", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.8, show_default=True)
@click.option("--tasks", "n_tasks", type=click.IntRange(min=1), help="Without a pilot: how many tasks.")
@click.option("--rate", type=click.FloatRange(0, 1, min_open=True, max_open=True), help="Without a pilot: pass@1.")
@click.option("--icc", type=click.FloatRange(0, 1, max_open=True), default=0.0, show_default=True,
              help="Without a pilot: how alike a task's trials are (0: no more than any two trials).")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="The plan as JSON on stdout.")
def plan(
    pilots: tuple[Path, ...],
    difference: float,
    alpha: float,
    power: float,
    n_tasks: int | None,
    rate: float | None,
    icc: float,
    as_json: bool,
) -> None:
    """The trials per task and arm (and in all, and the hours at the pilot's rate) a comparison of two arms needs to
    see DIFFERENCE with this power: from pilots (bench directories or Harbor jobs of the same tasks: each task's own
    variance, its first two arms), or without one from --tasks, --rate and --icc, said as such. Tasks no pilot trial
    told apart are named, with what leaving them out saves and costs."""
    from oc_repl.bench import planning
    from oc_repl.errors import OcReplError, UsageError

    try:
        if pilots:
            counts, per_hour = _pilot_counts(list(pilots))
            found = planning.from_pilot(counts, difference / 100, alpha, power, per_hour)
        elif n_tasks and rate:
            found = planning.from_assumptions(n_tasks, rate, icc, difference / 100, alpha, power)
        else:
            raise UsageError("name pilot runs, or state --tasks and --rate (and --icc)")
    except OcReplError as exc:
        sys.exit(report_error(exc))
    if as_json:
        click.echo(json.dumps(found.to_dict(), indent=2))
    else:
        click.echo("\n".join(planning.plan_lines(found)))


def _pilot_counts(dirs: list[Path]) -> tuple[dict[str, list[tuple[int, int]]], float | None]:
    """task -> (resolved, trials) of the pilots' first two arms (infrastructure failures left out), and the trials
    finished an hour."""
    from oc_repl.bench.report import load_bench

    arms: dict[str, dict[str, list[int]]] = {}
    first, last, finished = float("inf"), 0.0, 0
    for out in dirs:
        results, _ = load_bench(out)
        for r in results:
            if r.infrastructure:
                continue
            cell = arms.setdefault(f"{out}:{r.label}", {}).setdefault(r.task, [0, 0])
            cell[0] += bool(r.resolved)
            cell[1] += 1
            if r.started_at:
                first, last, finished = min(first, r.started_at), max(last, r.started_at + r.wall_time_s), finished + 1
    chosen = list(arms.values())[:2]
    tasks = set.intersection(*(set(a) for a in chosen)) if chosen else set()
    counts = {t: [(a[t][0], a[t][1]) for a in chosen] for t in sorted(tasks)}
    per_hour = finished / (last - first) * 3600 if finished and last > first else None
    return counts, per_hour
