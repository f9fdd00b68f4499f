"""`oc-repl bench TASK_DIR...` (the trials) and `oc-repl bench report DIR` (the numbers, as text, JSON or HTML)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click

from oc_repl.cli import run_options, typed
from oc_repl.cli.exits import report_error
from oc_repl.config import TRIAL


class DefaultToRun(click.Group):
    """`oc-repl bench TASKS...` means `oc-repl bench run TASKS...`; `oc-repl bench report DIR` is the report."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("-h", "--help"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


@click.group(cls=DefaultToRun)
def bench() -> None:
    """Run tasks × protocols × attempts as separate trials and report pass@k (see `bench run --help`)."""


def per_protocol_settings(ctx: click.Context, params: dict[str, Any]) -> dict[str, Any]:
    """Settings for each protocol's trials, resolved as `run` resolves them (flags > env > file > defaults). What a
    bench sets for each trial itself is refused as a flag and left out of the config file's values."""
    from oc_repl.config import OPTIONS, options_on, validate
    from oc_repl.errors import UsageError
    from oc_repl.protocols import manifests
    from oc_repl.sources import load_file, resolve

    given = {**(ctx.find_root().obj or {}), **typed(params)}
    per_trial = options_on(TRIAL)
    refused = [option.flag for option in per_trial if option.name in given]
    if refused:
        flags = ", ".join(refused)
        raise UsageError(f"bench sets {flags} for each trial itself", hint="drop it: a task dir brings its tests")
    file_values = load_file(given.pop("config_file", None), given.pop("profile", None))
    values = resolve(given, {k: v for k, v in file_values.items() if k not in {o.name for o in per_trial}})
    names = [p.strip() for p in str(values.pop("protocol", OPTIONS["protocol"].default)).split(",") if p.strip()]
    known = manifests()
    unknown = [p for p in names if p not in known]
    if unknown or not names:
        raise UsageError(f"unknown protocol {', '.join(unknown) or '(none)'}", hint=f"known: {', '.join(known)}")
    return {name: validate({**values, "protocol": name}) for name in dict.fromkeys(names)}


@bench.command("run")
@run_options(hidden=TRIAL)
@click.argument("task_dirs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("-k", "attempts", type=click.IntRange(min=1), default=1, help="Trials per task and protocol (default 1).")
@click.option(
    "-j",
    "--jobs",
    type=click.IntRange(min=1),
    help="Trials at once (default: twice the cores, fewer if memory is short).",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Results directory (default under ~/.local/state/oc-repl/bench/); run again with the same one to finish it.",
)
@click.option(
    "--html", "html_file", type=click.Path(dir_okay=False, path_type=Path), help="Also write the HTML report."
)
@click.pass_context
def run_bench(
    ctx: click.Context,
    task_dirs: tuple[Path, ...],
    attempts: int,
    jobs: int | None,
    out: Path | None,
    html_file: Path | None,
    **params: Any,
) -> None:
    """Run every task in TASK_DIRS (task dirs, or folders of them) k times with each --protocol (a,b,...).

    Each trial is a separate `oc-repl run` in a fresh container of the task's image (built once per task); the other
    options apply to every trial. DIR/trials/<task>/<protocol>/<n>/ holds each transcript and result.json.
    """
    from oc_repl import paths
    from oc_repl.bench.progress import Progress
    from oc_repl.bench.runner import Bench, default_jobs, plan_trials, redactor_for, trial_options, write_plan
    from oc_repl.errors import OcReplError
    from oc_repl.sandbox.docker_container import connect
    from oc_repl.tasks.model import find_tasks

    try:
        settings = per_protocol_settings(ctx, params)
        tasks = find_tasks(task_dirs)
        connect()  # an unreachable daemon is one clear error now, not a failed build for every task
        out = out or paths.state_dir() / "bench" / time.strftime("%Y%m%dT%H%M%S")
        write_plan(out, tasks, attempts, trial_options(settings), redactor_for(settings))
    except OcReplError as exc:
        sys.exit(report_error(exc))
    trials = plan_trials(tasks, list(settings), attempts)
    jobs = jobs or default_jobs()
    click.echo(f"bench: {len(trials)} trials, {jobs} at once, results in {out}", err=True)
    code = Bench(out, trials, settings, jobs, Progress()).run()
    if code:
        click.echo(f"bench stopped: re-run with --out {out} to finish the missing trials", err=True)
        sys.exit(code)
    _report(out, html_file, as_json=False)


def _report(out: Path, html_file: Path | None, as_json: bool) -> None:
    from oc_repl.bench.report import print_report, summary_json
    from oc_repl.errors import OcReplError

    try:
        if as_json:
            click.echo(summary_json(out))
        else:
            print_report(out)
        if html_file is not None:
            from oc_repl.bench.html import write_html

            click.echo(f"HTML report: {write_html(out, html_file)}", err=True)
    except OcReplError as exc:
        sys.exit(report_error(exc))


@bench.command("report")
@click.argument("out", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--html", "html_file", type=click.Path(dir_okay=False, path_type=Path), help="Write the HTML report here."
)
@click.option("--json", "as_json", is_flag=True, help="The numbers as JSON on stdout instead of the table.")
def report(out: Path, html_file: Path | None, as_json: bool) -> None:
    """The per-protocol table (pass@k, rates, means), failure modes and paired comparisons of a bench directory."""
    _report(out, html_file, as_json)
