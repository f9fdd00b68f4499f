"""`oc-repl bench report DIR`, `bench compare DIR DIR...`, `bench tasks DIR...` and `bench watch DIR`: the numbers of
benches, as text, JSON or HTML, and a bench followed while another process runs it."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import click

from oc_repl.cli.exits import report_error

COUNT_INFRA_HELP = "Count infrastructure failures (server, sandbox, image) as failures instead of leaving them out."
DIRS = click.Path(exists=True, file_okay=False, path_type=Path)


def _html_option(fn: Any) -> Any:
    return click.option(
        "--html", "html_file", type=click.Path(dir_okay=False, path_type=Path), help="Write the HTML report here."
    )(fn)


def report_and_exit(out: Path, html_file: Path | None, count_infra: bool, rounds: int = 0) -> None:
    """The report of a bench that just ran; a non-zero exit when every trial failed on infrastructure."""
    from oc_repl.bench.report import load_bench
    from oc_repl.outcome import Status

    _report(out, html_file, as_json=False, count_infra=count_infra)
    results, _ = load_bench(out)
    infra = [r for r in results if r.infrastructure]
    if not infra:
        return
    causes = Counter(r.outcome for r in infra)
    last = {r.outcome: r.error.strip().splitlines()[0] for r in infra if r.error.strip()}
    said = "; ".join(
        f"{Status(s).failure_mode()} ×{n}" + (f" ({last[s]})" if s in last else "") for s, n in causes.items()
    )
    if rounds:
        click.echo(f"{len(infra)} trials still fail on infrastructure after {rounds} rounds: {said}", err=True)
    if len(infra) == len(results):
        click.echo(f"every trial failed on infrastructure: {said}", err=True)
        sys.exit(Status(causes.most_common(1)[0][0]).exit_code)


def _report(out: Path, html_file: Path | None, as_json: bool, count_infra: bool) -> None:
    from oc_repl.bench.report import print_report, summary_json
    from oc_repl.errors import OcReplError

    try:
        if as_json:
            click.echo(summary_json(out, count_infra))
        else:
            print_report(out, count_infra=count_infra)
        if html_file is not None:
            from oc_repl.bench.html import write_html

            click.echo(f"HTML report: {write_html(out, html_file, count_infra)}", err=True)
    except OcReplError as exc:
        sys.exit(report_error(exc))


@click.command("report")
@click.argument("out", type=DIRS)
@_html_option
@click.option("--json", "as_json", is_flag=True, help="The numbers as JSON on stdout instead of the tables.")
@click.option("--count-infra", is_flag=True, help=COUNT_INFRA_HELP)
def report(out: Path, html_file: Path | None, as_json: bool, count_infra: bool) -> None:
    """The scores (pass@1 and partial, both denominators), pass@k, failure modes, infrastructure failures and the
    comparisons of a bench directory's arms (or a Harbor job's: its trials read as a bench's)."""
    _report(out, html_file, as_json, count_infra)


@click.command("compare")
@click.argument("dirs", nargs=-1, required=True, type=DIRS)
@_html_option
@click.option("--json", "as_json", is_flag=True, help="The numbers as JSON on stdout instead of the tables.")
@click.option("--count-infra", is_flag=True, help=COUNT_INFRA_HELP)
@click.option(
    "--sweep",
    is_flag=True,
    help="The runs are checkpoints in order: compare each with the one before it; with three or more, the trend.",
)
@click.option(
    "--allow-different-tasks",
    is_flag=True,
    help="Compare runs although a task's content (instruction, tests, environment) differs between them.",
)
def compare_runs(
    dirs: tuple[Path, ...],
    html_file: Path | None,
    as_json: bool,
    count_infra: bool,
    sweep: bool,
    allow_different_tasks: bool,
) -> None:
    """Compare runs (bench directories or Harbor jobs: checkpoints, servers, settings), or the arms of one: each
    one's pass@1 (Wilson 95% interval), pass@k and mean partial score (bootstrap interval); each against the first
    (or, --sweep, the one before) on their common tasks: the paired difference, an exact test, the tasks that flip or
    moved, the settings and task contents that differ, and whether the difference is separable at this sample size."""
    from oc_repl.bench.report import load_runs, print_compare
    from oc_repl.errors import OcReplError

    try:
        summary, arms = load_runs(list(dirs), count_infra, consecutive=sweep, different_tasks=allow_different_tasks)
        if as_json:
            click.echo(json.dumps(summary.to_dict(), indent=1))
        else:
            print_compare(summary)
        if html_file is not None:
            from oc_repl.bench.html import write_compare_html

            click.echo(f"HTML report: {write_compare_html(summary, arms, html_file)}", err=True)
    except OcReplError as exc:
        sys.exit(report_error(exc))


@click.command("tasks")
@click.argument("dirs", nargs=-1, required=True, type=DIRS)
@click.option("--json", "as_json", is_flag=True, help="The analysis as JSON on stdout instead of the table.")
@click.option("--count-infra", is_flag=True, help=COUNT_INFRA_HELP)
@click.option(
    "--zero-variance",
    "zero_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the tasks whose trials all scored the same here, as a task filter (`bench --skip-tasks FILE`).",
)
def tasks(dirs: tuple[Path, ...], as_json: bool, count_infra: bool, zero_file: Path | None) -> None:
    """Per task, across all trials of the runs given: its bucket (truly-cold, partial-stuck, ever-solved), the mean
    and spread of its reward, its trials' failure signatures, and where solved and failed trials first part."""
    from dataclasses import replace

    from oc_repl.bench.compare import run_labels
    from oc_repl.bench.pertask import analyse, task_filter
    from oc_repl.bench.report import load_bench
    from oc_repl.errors import OcReplError
    from oc_repl.private import write_atomic

    try:
        runs = [(label, load_bench(out)[0]) for label, out in zip(run_labels(list(dirs)), dirs, strict=True)]
    except OcReplError as exc:
        sys.exit(report_error(exc))
    # over several runs every trial is named with its run, as `bench compare` names their arms
    results = [replace(r, arm=f"{label}:{r.label}") if len(runs) > 1 else r for label, found in runs for r in found]
    found = analyse(results, count_infra)
    if as_json:
        click.echo(json.dumps(found.to_dict(), indent=1))
    else:
        from oc_repl.bench.report_tasks import print_tasks

        print_tasks(found)
    if zero_file is not None:
        write_atomic(zero_file, task_filter(found.zero_variance))
        click.echo(f"{len(found.zero_variance)} zero-variance tasks written to {zero_file}", err=True)


@click.command("watch")
@click.argument("dirs", nargs=-1, required=True, type=DIRS)
@click.option("--interval", type=click.FloatRange(min=0.1), default=2.0, help="Seconds between looks (default 2).")
@click.option("--once", is_flag=True, help="Print the state once and stop.")
@click.option(
    "--html",
    "html_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the page here, rewritten every look; a browser showing it reloads it as often.",
)
def watch(dirs: tuple[Path, ...], interval: float, once: bool, html_file: Path | None) -> None:
    """Follow a bench (or a Harbor job) another process runs (another terminal, another machine sharing the
    directory): its trials finished of those planned, each arm's score with its interval, infrastructure failures,
    the server's health as its trials' transcripts tell it, the running trials; until every planned trial is
    finished. Several DIRs (checkpoints side by side) or --html: every arm's pass@1 and partial score with their
    intervals, each against the first with the paired difference so far, the sequential decision so far, each
    run's server health."""
    from oc_repl.errors import OcReplError

    try:
        if len(dirs) == 1 and html_file is None:
            from oc_repl.bench.watch import Watcher

            sys.exit(Watcher(dirs[0]).follow(interval, once))
        from oc_repl.bench.watch_runs import watch_runs

        sys.exit(watch_runs(list(dirs), interval, once, html_file))
    except OcReplError as exc:
        sys.exit(report_error(exc))


COMMANDS = (report, compare_runs, tasks, watch)  # bench's own, beside `bench run` (cli/cmd_bench.py)
