"""The parts of the HTML reports that compare arms (the scores table, the verdicts, pass@1 with its interval per
arm as a line, each task's rate per arm and its change, the per-task buckets); html.py makes the page of them that
`bench report --html` and `bench compare --html` both write."""

from __future__ import annotations

import html
from typing import Any

from oc_repl.bench.compare import Summary
from oc_repl.bench.pertask import BUCKETS, TaskReport
from oc_repl.bench.report import differ_lines, pass_columns, with_interval
from oc_repl.bench.stats import ArmStats
from oc_repl.render.sanitize import sanitize

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
.chip { display: inline-block; min-width: 1.6em; margin: 1px; padding: 1px 4px; border-radius: 3px;
        color: white; text-decoration: none; font-size: 85%; text-align: center; }
.figure { max-width: 900px; }
.note { color: #555; }
.separable { color: #2ca02c; } .not-separable { color: #555; }
"""


def text(value: object) -> str:
    """Text from a bench directory, as HTML: escaped, every hidden character shown (plotly's labels also read
    entities, never tags or links, from it)."""
    return html.escape(sanitize(str(value)))


def figure_html(figure: Any, div_id: str) -> str:
    return figure.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config={"displaylogo": False})


def rows_html(table_id: str, head: list[str], rows: list[list[object]]) -> str:
    header = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{text(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table id="{table_id}"><tr>{header}</tr>{body}</table>'


def scores_table(summary: Summary) -> str:
    ks = pass_columns(summary)
    head = ["arm", "tasks", "trials", "infra", "resolved", "pass@1 planned", "pass@1 finished"]
    head += ["partial planned", "partial finished", *(f"pass@{k}" for k in ks)]
    rows = [
        [a.label, a.tasks, f"{a.scored}/{a.planned}", a.infrastructure, a.resolved, with_interval(a.pass1_planned)]
        + [with_interval(a.pass1), with_interval(a.partial_planned), with_interval(a.partial)]
        + [f"{a.pass_at.get(k, 0.0):.3f}" for k in ks]
        for a in summary.arms
    ]
    return rows_html("scores", head, rows)


def verdicts(summary: Summary) -> str:
    items = []
    for c in summary.comparisons:
        kind = "separable" if c.separable else "not-separable"
        flips = f"gained: {', '.join(c.gained) or 'none'}; lost: {', '.join(c.lost) or 'none'}"
        detail = (
            f"pass@1 {c.difference:+.3f} (95% CI {c.ci_low:+.3f} … {c.ci_high:+.3f}), partial "
            f"{c.partial_difference:+.3f} (95% CI {c.partial_ci_low:+.3f} … {c.partial_ci_high:+.3f}) on {c.tasks} "
            f"tasks; {c.method}"
        )
        moves = rows_html(
            f"moved-{len(items)}",
            ["task", c.baseline, c.other, "change", "Fisher p"],
            [
                [m.task, "/".join(map(str, m.baseline)), "/".join(map(str, m.other)), f"{100 * m.change:+.0f} pp"]
                + [f"{m.p_value:.2g}"]
                for m in c.moved
            ],
        )
        items.append(
            f'<li class="{kind}">{text(c.verdict)}<br><span class="note">{text(detail)}<br>{text(flips)}'
            + "".join(f"<br>{text(line)}" for line in differ_lines(c))
            + f"</span>{moves}</li>"
        )
    return f'<ul id="comparisons">{"".join(items)}</ul>'


def sweep_figure(summary: Summary) -> str:
    """pass@1 of each arm in order, with its Wilson interval, as a line."""
    import plotly.graph_objects as go

    labels = [text(a.label) for a in summary.arms]
    values = [a.pass1.value for a in summary.arms]
    figure = go.Figure(
        go.Scatter(
            x=labels,
            y=values,
            mode="lines+markers",
            name="pass@1",
            error_y={
                "type": "data",
                "symmetric": False,
                "array": [a.pass1.high - a.pass1.value for a in summary.arms],
                "arrayminus": [a.pass1.value - a.pass1.low for a in summary.arms],
            },
        )
    )
    figure.update_layout(
        title="pass@1 by arm, with 95% Wilson intervals", yaxis_title="pass@1", height=380, template="plotly_white"
    )
    return figure_html(figure, "sweep")


def buckets_table(found: TaskReport) -> str:
    head = ["task", "trials", "resolved", "bucket", "reward mean", "reward sd", "signatures", "first divergence"]
    rows = []
    for t in found.tasks:
        d = t.divergence
        parted = f"turn {d.turn}: {d.solved} {d.solved_action!r} / {d.failed} {d.failed_action!r}" if d else ""
        signatures = ", ".join(f"{name} {n}" for name, n in t.signatures.items())
        zero = " (zero variance)" if t.zero_variance else ""
        rows.append([t.task, t.trials, t.resolved, t.bucket, f"{t.reward_mean:.3f}", f"{t.reward_sd:.3f}{zero}"])
        rows[-1] += [signatures, parted]
    counts = " · ".join(f"{b}: {found.buckets[b]}" for b in BUCKETS)
    zero = ", ".join(found.zero_variance) or "none"
    note = f'<p class="note">{text(counts)} · zero variance (no RL signal): {text(zero)}</p>'
    return note + rows_html("tasks", head, rows)


def per_task_table(summary: Summary) -> str:
    """Per task: each arm's resolved/trials and mean partial score, and each comparison's change of rate (pp)."""
    head = [h for a in summary.arms for h in (f"{a.label} resolved", f"{a.label} partial")]
    head += [f"{c.other} − {c.baseline}" for c in summary.comparisons]
    by_label = {a.label: a for a in summary.arms}
    rows = []
    for task in summary.tasks:
        row: list[object] = [task]
        for a in summary.arms:
            n, c = a.per_task.get(task, (0, 0))
            row += [f"{c}/{n}", f"{a.per_task_partial[task] / n:.2f}"] if n else ["—", "—"]
        for comparison in summary.comparisons:
            rates = [_rate(by_label[label], task) for label in (comparison.baseline, comparison.other)]
            row.append("—" if None in rates else f"{100 * (rates[1] - rates[0]):+.0f} pp")  # type: ignore[operator]
        rows.append(row)
    return rows_html("per-task", ["task", *head], rows)


def _rate(arm: ArmStats, task: str) -> float | None:
    n, c = arm.per_task.get(task, (0, 0))
    return c / n if n else None
