"""`oc-repl bench report DIR` and `bench compare DIR...`: the scores, failure modes and comparisons, as text or JSON.

Every figure is computed once (stats.py, compare.py, pertask.py); this module reads bench directories and prints.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from oc_repl.bench.compare import Arm, Comparison, Summary, TaskMove, arms_of, run_labels, summarize
from oc_repl.bench.exact import LEVEL
from oc_repl.bench.pertask import BUCKETS, analyse
from oc_repl.bench.read import read_bench
from oc_repl.bench.results import TrialResult
from oc_repl.bench.stats import ArmStats, Score
from oc_repl.errors import UsageError
from oc_repl.outcome import FAILURE_MODES, infrastructure_mode
from oc_repl.render.human import UNWRAPPED
from oc_repl.render.sanitize import sanitize
from oc_repl.safejson import BadInput

MOVES_SHOWN = 10  # tasks named per comparison in the text; the JSON and the HTML have them all


def load_bench(out: Path) -> tuple[list[TrialResult], dict[str, Any]]:
    """A bench directory's trial records and its plan; a usage error when it holds no trial, or a file in it that
    is not what it should be (named, with its line)."""
    if not out.is_dir():
        raise UsageError(f"{out} is not a bench directory")
    try:
        results, plan = read_bench(out)
    except BadInput as exc:
        raise UsageError(str(exc)) from None
    if not results:
        raise UsageError(f"{out} holds no finished trial", hint="run `oc-repl bench TASKS --out DIR` first")
    return results, plan


def load_summary(out: Path, count_infra: bool = False) -> tuple[Summary, list[TrialResult], dict[str, Any]]:
    results, plan = load_bench(out)
    return summarize(arms_of(results, plan, run=str(out)), count_infra), results, plan


def gather_arms(dirs: Sequence[Path]) -> list[Arm]:
    """Every arm of every directory, labelled by its directory (and its own label when a directory has several)."""
    arms: list[Arm] = []
    for label, out in zip(run_labels(dirs), dirs, strict=True):
        results, plan = load_bench(out)
        found = arms_of(results, plan, run=str(out))
        for arm in found:
            arm.label = label if len(found) == 1 else f"{label}:{arm.label}"
        arms.extend(found)
    return arms


def load_runs(
    dirs: Sequence[Path], count_infra: bool = False, consecutive: bool = False, different_tasks: bool = False
) -> tuple[Summary, list[Arm]]:
    """Every arm of every directory, labelled by its directory (and its own label when a directory has several),
    and their numbers. Runs of a task whose content differs between them are refused unless `different_tasks`."""
    arms = gather_arms(dirs)
    if len(arms) < 2:
        raise UsageError("a comparison needs two arms or more", hint="name two bench directories, or one with two arms")
    summary = summarize(arms, count_infra, consecutive)
    differ = sorted({t for c in summary.comparisons for t in c.tasks_differ})
    if differ and not different_tasks:
        raise UsageError(
            f"the runs ran different versions of {len(differ)} tasks: {', '.join(map(sanitize, differ))}",
            hint="compare runs of the same task contents, or pass --allow-different-tasks (they are named then)",
        )
    return summary, arms


def pass_columns(summary: Summary) -> list[int]:
    """pass@1 and pass@k for the largest k every arm supports (k = the fewest trials of a task)."""
    k = min(a.k for a in summary.arms)
    return [1, k] if k > 1 else [1]


def pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def tokens_cell(a: ArmStats) -> str:
    """Mean tokens in / out per trial; no request is 0 tokens long, so zeros are a server that sent no counts."""
    if not (a.mean_tokens_in or a.mean_tokens_out):
        return "not sent"
    return f"{a.mean_tokens_in:.0f} / {a.mean_tokens_out:.0f}"


def with_interval(score: Score) -> str:
    return f"{pct(score.value)} [{pct(score.low)}–{pct(score.high)}]"


def score_table(summary: Summary) -> Table:
    counted = "counted as failures" if summary.count_infra else "left out"
    title = (
        f"scores (pass@1 and mean partial score with {100 * LEVEL:.0f}% intervals; of planned trials, missing ones "
        f"as zero, then of finished ones; infrastructure failures {counted})"
    )
    table = Table(title=title, title_justify="left")
    table.add_column("arm", no_wrap=True)
    heads = ("tasks", "trials", "infra", "resolved", "pass@1 planned", "pass@1 finished", "partial planned")
    for name in (*heads, "partial finished", *(f"pass@{k}" for k in pass_columns(summary)[1:])):
        table.add_column(name, justify="right")
    for a in summary.arms:
        table.add_row(
            cell(a.label),
            str(a.tasks),
            f"{a.scored}/{a.planned}",
            str(a.infrastructure),
            str(a.resolved),
            with_interval(a.pass1_planned),
            with_interval(a.pass1),
            with_interval(a.partial_planned),
            with_interval(a.partial),
            *(f"{a.pass_at.get(k, 0.0):.3f}" for k in pass_columns(summary)[1:]),
        )
    return table


def protocol_table(summary: Summary) -> Table:
    ks = pass_columns(summary)
    table = Table(title="per arm (turns, tokens and wall time: means per trial)", title_justify="left")
    table.add_column("arm", no_wrap=True)  # narrower columns wrap their headers instead
    for name in ("tasks", "trials", "resolved", *(f"pass@{k}" for k in ks), "mean turns"):
        table.add_column(name, justify="right")
    for name in ("parse err/turn", "salvaged calls", "tokens in/out", "wall/trial", "trial time, summed"):
        table.add_column(name, justify="right")
    for a in summary.arms:
        table.add_row(
            cell(a.label),
            str(a.tasks),
            str(a.scored),
            str(a.resolved),
            *(f"{a.pass_at.get(k, 0.0):.3f}" for k in ks),
            f"{a.mean_turns:.1f}",
            pct(a.parse_error_rate),
            pct(a.salvaged_call_rate),
            tokens_cell(a),
            f"{a.mean_wall_time_s:.1f} s",
            f"{a.total_wall_time_s:.0f} s",
        )
    return table


def failure_table(summary: Summary) -> Table:
    seen = [m for m in FAILURE_MODES if any(a.failure_modes.get(m) for a in summary.arms)]
    table = Table(title="failure modes (trials; infra: the infrastructure's, not the model's)", title_justify="left")
    table.add_column("arm")
    for mode in seen:
        table.add_column(f"{mode} (infra)" if infrastructure_mode(mode) else mode, justify="right")
    for a in summary.arms:
        table.add_row(cell(a.label), *(str(a.failure_modes.get(m, 0)) for m in seen))
    return table


def cell(text: str) -> Text:
    """A name from the bench directory as a table cell: plain text (never rich markup), every hidden character
    shown."""
    return Text(sanitize(text))


def comparison_lines(summary: Summary) -> list[str]:
    lines = []
    for c in summary.comparisons:
        lines.append(c.verdict)
        lines.append(
            f"  on {c.tasks} common tasks: pass@1 {c.difference:+.3f} (95% CI {c.ci_low:+.3f} … {c.ci_high:+.3f}), "
            f"partial {c.partial_difference:+.3f} (95% CI {c.partial_ci_low:+.3f} … {c.partial_ci_high:+.3f}); "
            f"{c.method}; Fisher p = {c.fisher_p:.2g}"
            + (f", McNemar p = {c.mcnemar_p:.2g}" if c.mcnemar_p is not None else "")
        )
        lines.append(f"  gained (resolved only by {c.other}): {', '.join(c.gained) or 'none'}")
        lines.append(f"  lost (resolved only by {c.baseline}): {', '.join(c.lost) or 'none'}")
        shown = c.moved[:MOVES_SHOWN]
        more = f"; {len(c.moved) - len(shown)} more moved less" if len(c.moved) > len(shown) else ""
        said = "; ".join(move_words(m) for m in shown) or "none"
        lines.append(f"  moved most ({c.baseline} → {c.other}, per task): {said}{more}")
        lines.extend(f"  {line}" for line in differ_lines(c))
    return lines


def differ_lines(c: Comparison) -> list[str]:
    """What the two arms of a comparison did not share: settings, and task contents."""
    lines = []
    if c.settings_differ:
        lines.append(f"run with different settings ({c.baseline} vs {c.other}): {'; '.join(c.settings_differ)}")
    if c.tasks_differ:
        lines.append(f"tasks whose content differs between the two: {', '.join(map(sanitize, c.tasks_differ))}")
    return lines


def move_words(m: TaskMove) -> str:
    (c1, n1), (c2, n2) = m.baseline, m.other
    return f"{sanitize(m.task)} {c1}/{n1} → {c2}/{n2} ({100 * m.change:+.0f} pp, Fisher p = {m.p_value:.2g})"


def infra_lines(summary: Summary, results: list[TrialResult]) -> list[str]:
    lines = []
    for a in summary.arms:
        if a.infrastructure:
            modes = ", ".join(f"{mode} {n}" for mode, n in a.infra_modes.items())
            fate = "counted as failures" if summary.count_infra else "left out of the score"
            lines.append(
                f"{a.label}: {a.infrastructure} of {a.trials} trials failed on infrastructure ({modes}): {fate}"
            )
            lines.extend(f"  {mode}: {error}" for mode, error in a.infra_errors.items())
    retried = [r for r in results if r.infra_before]
    if retried:
        again = sum(not r.infrastructure for r in retried)
        lines.append(
            f"{len(retried)} trials were run again after an infrastructure failure; {again} of them then finished"
        )
    return lines


def sweep_lines(summary: Summary) -> list[str]:
    """pass@1 of each arm, in order, with its interval, drawn on one scale."""
    width = 50
    top = max(a.pass1.high for a in summary.arms) or 1.0
    lines = []
    for a in summary.arms:
        row = [" "] * (width + 1)
        lo, hi, at = (round(width * v / top) for v in (a.pass1.low, a.pass1.high, a.pass1.value))
        for i in range(lo, hi + 1):
            row[i] = "─"
        row[lo], row[hi], row[at] = "├", "┤", "●"
        lines.append(f"{sanitize(a.label)[:24]:>24} {''.join(row)} {with_interval(a.pass1)}")
    return lines


def task_lines(results: list[TrialResult], count_infra: bool) -> list[str]:
    found = analyse(results, count_infra)
    buckets = ", ".join(f"{b} {found.buckets[b]}" for b in BUCKETS)
    zero = f"; zero variance (no RL signal): {len(found.zero_variance)}" if found.zero_variance else ""
    return [f"tasks: {buckets}{zero} (oc-repl bench tasks DIR for each)"]


def console_for(console: Console | None) -> Console:
    if console is None:
        console = Console(highlight=False, soft_wrap=True)
        if not console.is_terminal:  # a file or a pipe: the whole table, not one squeezed to 80 columns
            console.width = UNWRAPPED
    return console


def print_lines(console: Console, lines: list[str]) -> None:
    for line in lines:
        console.print(Text(sanitize(line)))


def print_report(out: Path, console: Console | None = None, count_infra: bool = False) -> Summary:
    summary, results, plan = load_summary(out, count_infra)
    console = console_for(console)
    console.print(protocol_table(summary))
    console.print(score_table(summary))
    console.print(failure_table(summary))
    print_lines(console, comparison_lines(summary) + infra_lines(summary, results) + task_lines(results, count_infra))
    print_lines(console, sequential_lines(results, plan))
    planned = sum(a.planned for a in summary.arms)
    missing = planned - sum(a.trials for a in summary.arms)
    if missing > 0:
        print_lines(
            console, [f"{missing} of {planned} planned trials are unfinished: re-run the bench with --out {out}"]
        )
    return summary


def sequential_lines(results: list[TrialResult], plan: dict[str, Any]) -> list[str]:
    """A bench run --until decided: where its anytime-valid comparison stands, as the bench decided it."""
    how = plan.get("sequential")
    arms = [str(a) for a in plan.get("protocols") or []]
    if not isinstance(how, dict) or len(arms) < 2:
        return []
    from oc_repl.bench.sequential import by_arm, decision_lines, decisions

    tasks = [str(t["name"]) for t in plan.get("tasks") or [] if isinstance(t, dict) and t.get("name")]
    found = decisions(by_arm(results, arms), tasks, float(how["alpha"]), float(how["margin"]))
    return ["sequential comparison (--until decided):", *(f"  {line}" for line in decision_lines(found))]


def print_compare(summary: Summary, console: Console | None = None) -> None:
    console = console_for(console)
    console.print(score_table(summary))
    print_lines(console, comparison_lines(summary))
    if len(summary.arms) > 2:
        print_lines(console, ["", "pass@1 by arm, in order (● the rate, ├─┤ its 95% interval):", *sweep_lines(summary)])
    if summary.trend is not None:
        print_lines(console, [summary.trend.words()])


def arm_json(a: ArmStats) -> dict[str, Any]:
    return {k: v for k, v in vars(a).items()}


def summary_json(out: Path, count_infra: bool = False) -> str:
    summary, results, plan = load_summary(out, count_infra)
    data = {**summary.to_dict(), "trials_finished": len(results), "plan": plan}
    data["per_task"] = analyse(results, count_infra).to_dict()
    return json.dumps(data, indent=1)
