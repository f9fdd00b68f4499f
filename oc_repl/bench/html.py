"""`oc-repl bench report DIR --html FILE`: one self-contained HTML file (plotly's script inlined once; nothing is
fetched when it opens) with the per-protocol table, pass@k curves, a failure-mode chart, the task × protocol grid
of outcomes, and a link from every trial to its transcript, rendered next to it as transcript.html."""

from __future__ import annotations

import html
import io
import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

from oc_repl.bench.report import comparison_lines, load_summary, pass_columns, tokens_cell
from oc_repl.bench.results import TrialResult, inside, transcript_of
from oc_repl.bench.stats import Summary
from oc_repl.outcome import FAILURE_MODES
from oc_repl.private import make_dirs, write_atomic
from oc_repl.render.sanitize import sanitize

TRANSCRIPT_HTML = "transcript.html"
# One colour per failure mode, resolved green and the model's own failures warm; infrastructure greys.
COLOURS = {
    "resolved": "#2ca02c",
    "unresolved": "#d62728",
    "tampered": "#e41a9c",
    "agent_timeout": "#ff7f0e",
    "test_timeout": "#e377c2",
    "parse_error": "#9467bd",
    "turn_cap": "#bcbd22",
    "loop": "#8c564b",
    "context_length_exceeded": "#17becf",
    "server_error": "#7f7f7f",
    "sandbox_error": "#a0a0a0",
    "build_error": "#505050",
    "usage_error": "#303030",
    "internal_error": "#000000",
}
STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
.chip { display: inline-block; min-width: 1.6em; margin: 1px; padding: 1px 4px; border-radius: 3px;
        color: white; text-decoration: none; font-size: 85%; text-align: center; }
.figure { max-width: 900px; }
.note { color: #555; }
"""


# rich's page, with a title; {stylesheet} stays empty with inline styles
TRANSCRIPT_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="UTF-8"><title>TITLE</title>
<style>{stylesheet} body {{ color: {foreground}; background-color: {background}; }}</style></head>
<body><pre style="font-family:'DejaVu Sans Mono',Menlo,consolas,monospace"><code>{code}</code></pre></body></html>
"""


def render_transcript(transcript: Path, target: Path, title: str = "") -> None:
    """The transcript as `oc-repl show` renders it, kept as HTML (colours inline, no script)."""
    from rich.console import Console

    from oc_repl.render.human import HumanRenderer
    from oc_repl.transcript import read_events

    console = Console(record=True, file=io.StringIO(), width=160, color_system="truecolor", highlight=False)
    render = HumanRenderer(console=console)
    for event in read_events(transcript, on_bad_line=lambda *_: None):
        render(event)
    title = _text(title or transcript.name).replace("{", "{{").replace("}", "}}")
    write_atomic(target, console.export_html(inline_styles=True, code_format=TRANSCRIPT_PAGE.replace("TITLE", title)))


def _transcript_page(out: Path, result: TrialResult) -> Path | None:
    """transcript.html beside the trial's transcript, rendered when it is missing or older; None when the trial has
    no transcript inside the bench directory."""
    transcript = transcript_of(out, result)
    if transcript is None:
        return None
    page = transcript.parent / TRANSCRIPT_HTML
    if not inside(page.parent, out):
        return None
    if page.is_symlink() or not page.is_file() or page.stat().st_mtime < transcript.stat().st_mtime:
        render_transcript(
            transcript, page, f"{result.task} · {result.protocol} · #{result.attempt}: {result.failure_mode}"
        )
    return page


def _text(text: object) -> str:
    """Text from a bench directory, as HTML: escaped, every hidden character shown (plotly's labels also read
    entities, never tags or links, from it)."""
    return html.escape(sanitize(str(text)))


def _link(page: Path, report_dir: Path) -> str:
    """A relative link to `page`: each character that could start a scheme, a query or a fragment is escaped, so
    it always names a file below the directories the two share."""
    return quote(os.path.relpath(page, report_dir), safe="/")


def _figure(figure: Any, div_id: str) -> str:
    return figure.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config={"displaylogo": False})


def pass_at_k_figure(summary: Summary) -> str:
    import plotly.graph_objects as go

    figure = go.Figure()
    for p in summary.protocols:
        ks = sorted(p.pass_at)
        figure.add_trace(go.Scatter(x=ks, y=[p.pass_at[k] for k in ks], mode="lines+markers", name=_text(p.protocol)))
    figure.update_layout(
        title="pass@k",
        xaxis_title="k",
        yaxis_title="pass@k",
        yaxis_range=[0, 1.05],
        height=380,
        template="plotly_white",
    )
    figure.update_xaxes(dtick=1)
    return _figure(figure, "pass-at-k")


def failure_figure(summary: Summary) -> str:
    import plotly.graph_objects as go

    figure = go.Figure()
    names = [_text(p.protocol) for p in summary.protocols]
    for mode in FAILURE_MODES:
        counts = [p.failure_modes.get(mode, 0) for p in summary.protocols]
        if any(counts):
            figure.add_trace(go.Bar(x=names, y=counts, name=mode, marker_color=COLOURS[mode]))
    figure.update_layout(
        title="failure modes", barmode="stack", yaxis_title="trials", height=380, template="plotly_white"
    )
    return _figure(figure, "failure-modes")


def _table(summary: Summary) -> str:
    ks = pass_columns(summary)
    head = ["protocol", "tasks", "trials", "resolved", *(f"pass@{k}" for k in ks), "mean turns"]
    head += ["parse errors/turn", "salvaged calls", "tokens in/out per trial", "wall time per trial"]
    rows = []
    for p in summary.protocols:
        cells = [p.protocol, p.tasks, p.trials, p.resolved, *(f"{p.pass_at[k]:.3f}" for k in ks)]
        cells += [f"{p.mean_turns:.1f}", f"{100 * p.parse_error_rate:.1f}%", f"{100 * p.salvaged_call_rate:.1f}%"]
        cells += [tokens_cell(p), f"{p.mean_wall_time_s:.1f} s"]
        rows.append("<tr>" + "".join(f"<td>{_text(c)}</td>" for c in cells) + "</tr>")
    header = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    return f'<table id="protocols"><tr>{header}</tr>{"".join(rows)}</table>'


def _grid(summary: Summary, results: list[TrialResult], out: Path, report_dir: Path) -> str:
    by_cell: dict[tuple[str, str], list[TrialResult]] = {}
    for r in results:
        by_cell.setdefault((r.task, r.protocol), []).append(r)
    protocols = [p.protocol for p in summary.protocols]
    header = "<tr><th>task</th>" + "".join(f"<th>{_text(p)}</th>" for p in protocols) + "</tr>"
    rows = []
    for task in summary.tasks:
        cells = [f"<td>{_text(task)}</td>"]
        for protocol in protocols:
            trials = sorted(by_cell.get((task, protocol), []), key=lambda r: r.attempt)
            chips = []
            for r in trials:
                page = _transcript_page(out, r)
                title = _text(f"#{r.attempt}: {r.failure_mode}, {r.turns} turns, {r.wall_time_s:.1f} s")
                style = f"background:{COLOURS.get(r.failure_mode, '#000')}"
                link = f' href="{html.escape(_link(page, report_dir))}"' if page else ""
                chips.append(f'<a class="chip" style="{style}" title="{title}"{link}>{r.attempt}</a>')
            solved = sum(r.resolved for r in trials)
            count = f" {solved}/{len(trials)}" if trials else "—"
            cells.append(f"<td>{''.join(chips)}{count}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return f'<table id="grid">{header}{"".join(rows)}</table>'


def write_html(out: Path, target: Path) -> Path:
    from plotly.offline import get_plotlyjs

    summary, results, plan = load_summary(out)
    target = target.resolve()
    make_dirs(target.parent)
    comparisons = "".join(f"<li>{_text(line.strip())}</li>" for line in comparison_lines(summary))
    legend = " ".join(
        f'<span class="chip" style="background:{COLOURS[m]}">{m}</span>'
        for m in FAILURE_MODES
        if any(p.failure_modes.get(m) for p in summary.protocols)
    )
    body = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>oc-repl bench: {_text(out.name)}</title>
<style>{STYLE}</style><script>{get_plotlyjs()}</script></head>
<body>
<h1>oc-repl bench</h1>
<p class="note">{_text(out)} · {len(results)} finished trials · {len(summary.tasks)} tasks ·
k = {_text(plan.get("k", "?"))}</p>
<h2>Per protocol</h2>
{_table(summary)}
<ul id="comparisons">{comparisons}</ul>
<div class="figure">{pass_at_k_figure(summary)}</div>
<div class="figure">{failure_figure(summary)}</div>
<h2>Task × protocol</h2>
<p class="note">One chip per trial (its attempt number), coloured by how it ended; click it for its transcript.
{legend}</p>
{_grid(summary, results, out, target.parent)}
</body></html>
"""
    write_atomic(target, body)
    return target
