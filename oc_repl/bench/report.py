"""`oc-repl bench report DIR`: the per-protocol table, failure modes and paired comparisons, as text or JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from oc_repl.bench.results import load_results
from oc_repl.bench.runner import read_plan
from oc_repl.bench.stats import ProtocolStats, Summary, summarize
from oc_repl.errors import UsageError
from oc_repl.outcome import FAILURE_MODES
from oc_repl.render.human import UNWRAPPED
from oc_repl.render.sanitize import sanitize
from oc_repl.safejson import BadInput


def load_summary(out: Path) -> tuple[Summary, list[Any], dict[str, Any]]:
    """The summary of a bench directory, its trial records and its plan; a usage error when it holds no trial, or
    a file in it that is not what it should be (named, with its line)."""
    if not out.is_dir():
        raise UsageError(f"{out} is not a bench directory")
    try:
        results = load_results(out)
        plan = read_plan(out)
    except BadInput as exc:
        raise UsageError(str(exc)) from None
    if not results:
        raise UsageError(f"{out} holds no finished trial", hint="run `oc-repl bench TASKS --out DIR` first")
    return summarize(results, plan.get("protocols") or ()), results, plan


def pass_columns(summary: Summary) -> list[int]:
    """pass@1 and pass@k for the largest k every protocol supports (k = the fewest trials of a task)."""
    k = min(p.k for p in summary.protocols)
    return [1, k] if k > 1 else [1]


def tokens_cell(p: ProtocolStats) -> str:
    """Mean tokens in / out per trial; no request is 0 tokens long, so zeros are a server that sent no counts."""
    if not (p.mean_tokens_in or p.mean_tokens_out):
        return "not sent"
    return f"{p.mean_tokens_in:.0f} / {p.mean_tokens_out:.0f}"


def _pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def protocol_table(summary: Summary) -> Table:
    ks = pass_columns(summary)
    table = Table(title="per protocol (turns, tokens and wall time: means per trial)", title_justify="left")
    table.add_column("protocol", no_wrap=True)  # narrower columns wrap their headers instead
    for name in ("tasks", "trials", "resolved", *(f"pass@{k}" for k in ks), "mean turns"):
        table.add_column(name, justify="right")
    # The trials' times added up, not the bench's wall time: trials run side by side under -j.
    for name in ("parse err/turn", "salvaged calls", "tokens in/out", "wall/trial", "trial time sum"):
        table.add_column(name, justify="right")
    for p in summary.protocols:
        table.add_row(
            _cell(p.protocol),
            str(p.tasks),
            str(p.trials),
            str(p.resolved),
            *(f"{p.pass_at[k]:.3f}" for k in ks),
            f"{p.mean_turns:.1f}",
            _pct(p.parse_error_rate),
            _pct(p.salvaged_call_rate),
            tokens_cell(p),
            f"{p.mean_wall_time_s:.1f} s",
            f"{p.total_wall_time_s:.0f} s",
        )
    return table


def failure_table(summary: Summary) -> Table:
    seen = [m for m in FAILURE_MODES if any(p.failure_modes.get(m) for p in summary.protocols)]
    table = Table(title="failure modes (trials)", title_justify="left")
    table.add_column("protocol")
    for mode in seen:
        table.add_column(mode, justify="right")
    for p in summary.protocols:
        table.add_row(_cell(p.protocol), *(str(p.failure_modes.get(m, 0)) for m in seen))
    return table


def _cell(text: str) -> Text:
    """A name from the bench directory as a table cell: plain text (never rich markup), every hidden character
    shown."""
    return Text(sanitize(text))


def comparison_lines(summary: Summary) -> list[str]:
    lines = []
    for c in summary.comparisons:
        lines.append(
            f"{c.other} vs {c.baseline} on {c.tasks} tasks: pass@1 {c.difference:+.3f} "
            f"(95% CI {c.ci_low:+.3f} … {c.ci_high:+.3f}; {c.method})"
        )
        lines.append(f"  gained (resolved only by {c.other}): {', '.join(c.gained) or 'none'}")
        lines.append(f"  lost (resolved only by {c.baseline}): {', '.join(c.lost) or 'none'}")
    return lines


def print_report(out: Path, console: Console | None = None) -> Summary:
    summary, results, plan = load_summary(out)
    if console is None:
        console = Console(highlight=False, soft_wrap=True)
        if not console.is_terminal:  # a file or a pipe: the whole table, not one squeezed to 80 columns
            console.width = UNWRAPPED
    console.print(protocol_table(summary))
    console.print(failure_table(summary))
    for line in comparison_lines(summary):
        console.print(Text(sanitize(line)))
    planned = len(plan.get("tasks") or []) * len(plan.get("protocols") or []) * int(plan.get("k") or 0)
    if planned > len(results):
        unfinished = f"{planned - len(results)} of {planned} planned trials are unfinished"
        console.print(Text(sanitize(f"{unfinished}: re-run the bench with --out {out}")))
    return summary


def summary_json(out: Path) -> str:
    summary, results, plan = load_summary(out)
    data = {**summary.to_dict(), "trials_finished": len(results), "plan": plan}
    return json.dumps(data, indent=1)
