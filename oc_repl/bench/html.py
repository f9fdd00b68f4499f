"""`oc-repl bench report DIR --html FILE`: one self-contained HTML file (plotly's script and the recording player
inlined once; nothing is fetched when it opens) with the scores (pass@1 and partial, both denominators), the
comparisons and their verdicts, pass@k curves, a failure-mode chart, infrastructure failures, each task's rate per
arm and its change, the per-task buckets, the task × arm grid of outcomes, and from every trial a link to its
transcript (rendered next to it as transcript.html) and to its recording, which plays in the page. `bench compare
--html` writes the same page of several runs' arms."""

from __future__ import annotations

import html
import io
import os
from pathlib import Path
from urllib.parse import quote

from oc_repl.bench.compare import Arm, Summary, arms_of, summarize
from oc_repl.bench.html_compare import (
    STYLE,
    buckets_table,
    figure_html,
    per_task_table,
    rows_html,
    scores_table,
    sweep_figure,
    verdicts,
)
from oc_repl.bench.html_compare import text as _text
from oc_repl.bench.pertask import analyse
from oc_repl.bench.player import CAST_SCRIPT, PLAYER_CSS, PLAYER_HTML, PLAYER_JS, write_recording
from oc_repl.bench.report import infra_lines, load_bench, pass_columns, pct, tokens_cell
from oc_repl.bench.results import TrialResult, inside, transcript_of
from oc_repl.outcome import FAILURE_MODES
from oc_repl.private import make_dirs, write_atomic

TRANSCRIPT_HTML = "transcript.html"
PAGES_PER_WORKER = 8  # trials' pages a worker makes at a time; fewer in all are made here
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
    "server_timeout": "#909090",
    "sandbox_error": "#a0a0a0",
    "build_error": "#505050",
    "usage_error": "#303030",
    "internal_error": "#000000",
}

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


def _pages(out: Path, result: TrialResult) -> tuple[Path, Path] | None:
    """transcript.html and the recording beside the trial's transcript, made when missing or older; None when the
    trial has no transcript inside the bench directory."""
    transcript = transcript_of(out, result)
    if transcript is None or not inside(transcript.parent, out):
        return None
    page = transcript.parent / TRANSCRIPT_HTML
    if page.is_symlink() or not page.is_file() or page.stat().st_mtime < transcript.stat().st_mtime:
        title = f"{result.task} · {result.label} · #{result.attempt}: {result.failure_mode}"
        render_transcript(transcript, page, title)
    return page, write_recording(transcript, transcript.parent)


def _pages_of(cells: list[tuple[Path, TrialResult]]) -> list[tuple[Path, Path] | None]:
    """Every trial's pages, made on every core once there are enough to share (each is made once: a page newer
    than its transcript is kept)."""
    workers = min(os.cpu_count() or 1, len(cells) // PAGES_PER_WORKER)
    if workers < 2:
        return [_pages(out, r) for out, r in cells]
    from concurrent.futures import ProcessPoolExecutor

    outs, results = zip(*cells, strict=True)
    with ProcessPoolExecutor(workers) as pool:
        return list(pool.map(_pages, outs, results, chunksize=PAGES_PER_WORKER))


def _link(page: Path, report_dir: Path) -> str:
    """A relative link to `page`: each character that could start a scheme, a query or a fragment is escaped, so
    it always names a file below the directories the two share."""
    return quote(os.path.relpath(page, report_dir), safe="/")


def pass_at_k_figure(summary: Summary) -> str:
    import plotly.graph_objects as go

    figure = go.Figure()
    for a in summary.arms:
        ks = sorted(a.pass_at)
        figure.add_trace(go.Scatter(x=ks, y=[a.pass_at[k] for k in ks], mode="lines+markers", name=_text(a.label)))
    figure.update_layout(
        title="pass@k",
        xaxis_title="k",
        yaxis_title="pass@k",
        yaxis_range=[0, 1.05],
        height=380,
        template="plotly_white",
    )
    figure.update_xaxes(dtick=1)
    return figure_html(figure, "pass-at-k")


def failure_figure(summary: Summary) -> str:
    import plotly.graph_objects as go

    figure = go.Figure()
    names = [_text(a.label) for a in summary.arms]
    for mode in FAILURE_MODES:
        counts = [a.failure_modes.get(mode, 0) for a in summary.arms]
        if any(counts):
            figure.add_trace(go.Bar(x=names, y=counts, name=mode, marker_color=COLOURS[mode]))
    figure.update_layout(
        title="failure modes", barmode="stack", yaxis_title="trials", height=380, template="plotly_white"
    )
    return figure_html(figure, "failure-modes")


def _table(summary: Summary) -> str:
    ks = pass_columns(summary)
    head = ["arm", "tasks", "trials", "resolved", *(f"pass@{k}" for k in ks), "mean turns"]
    head += ["parse errors/turn", "salvaged calls", "tokens in/out per trial", "wall time per trial"]
    rows = [
        [a.label, a.tasks, a.scored, a.resolved, *(f"{a.pass_at.get(k, 0.0):.3f}" for k in ks), f"{a.mean_turns:.1f}"]
        + [pct(a.parse_error_rate), pct(a.salvaged_call_rate), tokens_cell(a)]
        + [f"{a.mean_wall_time_s:.1f} s"]
        for a in summary.arms
    ]
    return rows_html("protocols", head, rows)


def _chip(r: TrialResult, pages: tuple[Path, Path] | None, report_dir: Path) -> str:
    infra = " (infrastructure)" if r.infrastructure else ""
    title = _text(
        f"#{r.attempt}: {r.failure_mode}{infra}, partial {r.partial:.2f}, {r.turns} turns, {r.wall_time_s:.1f} s"
    )
    style = f"background:{COLOURS.get(r.failure_mode, '#000')}"
    if pages is None:
        return f'<a class="chip" style="{style}" title="{title}">{r.attempt}</a>'
    page, cast = pages
    chip = (
        f'<a class="chip" style="{style}" title="{title}" href="{html.escape(_link(page, report_dir))}">{r.attempt}</a>'
    )
    script = html.escape(_link(cast.parent / CAST_SCRIPT, report_dir))
    play = f'<button class="play" type="button" title="play the recording" data-src="{script}">▶</button>'
    return chip + play + f'<a class="cast" href="{html.escape(_link(cast, report_dir))}" title="asciicast v2">⇩</a>'


def _grid(summary: Summary, arms: list[Arm], report_dir: Path) -> str:
    by_cell: dict[tuple[str, str], list[tuple[Path, TrialResult]]] = {}
    for arm in arms:
        for r in sorted(arm.trials, key=lambda r: r.attempt):
            by_cell.setdefault((r.task, arm.label), []).append((Path(arm.run), r))
    cells = [cell for trials in by_cell.values() for cell in trials]
    pages = dict(zip((id(r) for _, r in cells), _pages_of(cells), strict=True))
    labels = [a.label for a in summary.arms]
    header = "<tr><th>task</th>" + "".join(f"<th>{_text(a)}</th>" for a in labels) + "</tr>"
    rows = []
    for task in summary.tasks:
        row = [f"<td>{_text(task)}</td>"]
        for label in labels:
            trials = [r for _, r in by_cell.get((task, label), [])]
            chips = "".join(_chip(r, pages[id(r)], report_dir) for r in trials)
            count = f" {sum(r.resolved for r in trials)}/{len(trials)}" if trials else "—"
            row.append(f"<td>{chips}{count}</td>")
        rows.append("<tr>" + "".join(row) + "</tr>")
    return f'<table id="grid">{header}{"".join(rows)}</table>'


def write_html(out: Path, target: Path, count_infra: bool = False) -> Path:
    """`bench report --html`: the page of one bench directory's arms."""
    results, plan = load_bench(out)
    arms = arms_of(results, plan, run=str(out))
    summary = summarize(arms, count_infra)
    note = f"{out} · {len(results)} finished trials · {len(summary.tasks)} tasks · k = {plan.get('k', '?')}"
    return write_page(summary, arms, target, f"oc-repl bench: {out.name}", note)


def write_compare_html(summary: Summary, arms: list[Arm], target: Path) -> Path:
    """`bench compare --html`: the same page, of the runs' arms side by side."""
    runs = sorted({a.run for a in arms if a.run})
    trials = sum(len(a.trials) for a in arms)
    note = f"{', '.join(runs)} · {trials} finished trials · {len(summary.tasks)} tasks"
    return write_page(summary, arms, target, "oc-repl bench compare", note)


def write_page(summary: Summary, arms: list[Arm], target: Path, title: str, note: str) -> Path:
    from plotly.offline import get_plotlyjs

    target = target.resolve()
    make_dirs(target.parent)
    results = [r for arm in arms for r in arm.trials]
    legend = " ".join(
        f'<span class="chip" style="background:{COLOURS[m]}">{m}</span>'
        for m in FAILURE_MODES
        if any(a.failure_modes.get(m) for a in summary.arms)
    )
    infra = "".join(f"<li>{_text(line.strip())}</li>" for line in infra_lines(summary, results)) or "<li>none</li>"
    counted = "counted as failures" if summary.count_infra else "left out of the scores"
    sweep = f'<div class="figure">{sweep_figure(summary)}</div>' if len(summary.arms) > 1 else ""
    grid = _grid(summary, arms, target.parent)
    body = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{_text(title)}</title>
<style>{STYLE}{PLAYER_CSS}</style><script>{get_plotlyjs()}</script><script>{PLAYER_JS}</script></head>
<body>
<h1>{_text(title)}</h1>
<p class="note">{_text(note)}</p>
<h2>Scores</h2>
<p class="note">pass@1 and the mean partial score (passed tests / tests; Harbor's reward as it is), of the trials
planned (each missing one unresolved, scoring zero) and of those finished; infrastructure failures {counted}.</p>
{scores_table(summary)}
<h2>Comparisons</h2>
{verdicts(summary)}
{sweep}
<h2>Per arm</h2>
{_table(summary)}
<div class="figure">{pass_at_k_figure(summary)}</div>
<div class="figure">{failure_figure(summary)}</div>
<h2>Infrastructure</h2>
<ul id="infrastructure">{infra}</ul>
<h2>Per task</h2>
<p class="note">Each arm's resolved trials of those that count and mean partial score, and each comparison's change
of the task's rate.</p>
{per_task_table(summary)}
{buckets_table(analyse(results, summary.count_infra))}
<h2>Task × arm</h2>
<p class="note">One chip per trial (its attempt number), coloured by how it ended; click it for its transcript, ▶ to
play its recording here, ⇩ for the recording (asciicast v2). {legend}</p>
{PLAYER_HTML}
{grid}
</body></html>
"""
    write_atomic(target, body)
    return target
