"""`oc-repl bench tasks DIR...` as text: one row per task, then the buckets and the zero-variance tasks."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from oc_repl.bench.pertask import BUCKETS, TaskReport
from oc_repl.bench.report import cell, console_for, print_lines


def print_tasks(found: TaskReport, console: Console | None = None) -> None:
    console = console_for(console)
    table = Table(title="per task (reward: the partial score of each trial)", title_justify="left")
    for name in ("task", "trials", "resolved", "bucket", "reward mean ± sd", "signatures (trials)", "first divergence"):
        table.add_column(name, justify="right" if name in ("trials", "resolved") else "left")
    for t in found.tasks:
        signatures = ", ".join(f"{name} {n}" for name, n in t.signatures.items())
        d = t.divergence
        parted = f"turn {d.turn}: {d.solved} {d.solved_action!r} / {d.failed} {d.failed_action!r}" if d else ""
        zero = " (zero variance)" if t.zero_variance else ""
        table.add_row(
            cell(t.task),
            str(t.trials),
            str(t.resolved),
            t.bucket,
            f"{t.reward_mean:.3f} ± {t.reward_sd:.3f}{zero}",
            cell(signatures),
            cell(parted),
        )
    console.print(table)
    buckets = ", ".join(f"{b}: {found.buckets[b]}" for b in BUCKETS)
    zero = ", ".join(found.zero_variance) or "none"
    print_lines(console, [f"buckets: {buckets}", f"zero variance (no signal for a group-relative RL step): {zero}"])
