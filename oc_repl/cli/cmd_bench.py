"""`oc-repl bench TASK_DIR...` (the trials); `bench report DIR`, `bench compare DIR DIR...`, `bench tasks DIR...` and
`bench watch DIR` (cli/cmd_bench_report.py)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click

from oc_repl.cli import TakesSettings, run_options, typed
from oc_repl.cli.cmd_bench_plan import plan
from oc_repl.cli.cmd_bench_report import COMMANDS, report_and_exit
from oc_repl.cli.exits import report_error
from oc_repl.rows import FLAG, TRIAL

RETRY_JOBS_DIVISOR = 2  # each round of --retry-infra runs at most half as many trials at once as the one before


class DefaultToRun(click.Group):
    """`oc-repl bench TASKS...` means `oc-repl bench run TASKS...`; `oc-repl bench report DIR` is the report."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("-h", "--help"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


@click.group(cls=DefaultToRun)
def bench() -> None:
    """Run tasks × arms × attempts as separate trials and report pass@k (see `bench run --help`)."""


def per_arm_settings(ctx: click.Context, params: dict[str, Any]) -> dict[str, Any]:
    """Settings for each arm's trials, resolved as `run` resolves them (flags > env > file > defaults): one arm per
    protocol, and per model or server when several are given. What a bench sets for each trial itself is refused as
    a flag and left out of the config file's values."""
    from oc_repl.bench.arms import arm_specs, split
    from oc_repl.bench.probe import served_models
    from oc_repl.config import OPTIONS, options_on, validate
    from oc_repl.errors import UsageError
    from oc_repl.protocols import names as protocol_names
    from oc_repl.sources import load_file, resolve

    given = {**(ctx.find_root().obj or {}), **typed(params)}
    per_trial = options_on(TRIAL)
    refused = [option.flag for option in per_trial if option.name in given]
    if refused:
        flags = ", ".join(refused)
        raise UsageError(f"bench sets {flags} for each trial itself", hint="drop it: a task dir brings its tests")
    file_values = load_file(given.pop("config_file", None), given.pop("profile", None))
    values = resolve(given, {k: v for k, v in file_values.items() if k not in {o.name for o in per_trial}})
    names = split(values.pop("protocol", OPTIONS["protocol"].default))
    known = protocol_names()  # data folders and entry points alike
    unknown = [p for p in names if p not in known]
    if unknown or not names:
        raise UsageError(f"unknown protocol {', '.join(unknown) or '(none)'}", hint=f"known: {', '.join(known)}")
    models, api_bases = split(values.pop("model", None)), split(values.pop("api_base", None))
    served = served_models(api_bases, str(values.get("api_key") or "")) if len(api_bases) > 1 and not models else {}
    specs = arm_specs(list(dict.fromkeys(names)), models, api_bases, served)
    settings = {}
    for spec in specs:
        arm = {**values, "protocol": spec.protocol}
        arm.update({k: v for k, v in (("model", spec.model), ("api_base", spec.api_base)) if v is not None})
        settings[spec.label] = validate(arm)
    return settings


def recorded_settings(out: Path, params: dict[str, Any]) -> tuple[dict[str, Any], list[Any], int]:
    """A bench run again from its directory alone: each arm's recorded run options (flags given now over them), its
    tasks and its k, as bench.json holds them."""
    from oc_repl.bench.benchplan import read_plan
    from oc_repl.errors import UsageError
    from oc_repl.safejson import BadInput
    from oc_repl.sources import from_data
    from oc_repl.tasks.model import load_task

    try:
        plan = read_plan(out)
    except BadInput as exc:
        raise UsageError(str(exc)) from None
    if not plan.get("tasks") or not isinstance(plan.get("run_options"), dict):
        raise UsageError("name the task dirs", hint=f"{out} holds no bench plan to run again from (bench.json)")
    flags = {k: v for k, v in typed(params).items() if k not in ("config_file", "profile")}
    settings = {arm: from_data(options, flags) for arm, options in plan["run_options"].items()}
    tasks = [load_task(Path(str(t.get("path")))) for t in plan["tasks"]]
    return settings, tasks, int(plan.get("k") or 1)


@bench.command("run", cls=TakesSettings, surfaces=(FLAG,), hidden=TRIAL)
@run_options(hidden=TRIAL)
@click.argument("task_dirs", nargs=-1, type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("-k", "attempts", type=click.IntRange(min=1), help="Trials per task and arm (default 1).")
@click.option(
    "-j",
    "--jobs",
    type=click.IntRange(min=1),
    help="Trials at once at most (default: twice the cores, fewer if memory is short; fewer while the server "
    "struggles).",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Results directory (default under ~/.local/state/oc-repl/bench/); run again with the same one to finish it "
    "(then TASK_DIRS may be left out).",
)
@click.option(
    "--html", "html_file", type=click.Path(dir_okay=False, path_type=Path), help="Also write the HTML report."
)
@click.option(
    "--keep-failures",
    is_flag=True,
    help="Keep the trials that failed on infrastructure (server, sandbox, image) instead of running them again.",
)
@click.option(
    "--retry-infra",
    "retry_rounds",
    type=click.IntRange(min=1),
    is_flag=False,
    flag_value=1,
    help="Run again only the trials that failed on infrastructure, in place, with fewer at once; N rounds "
    "(default 1), each with half the trials at once of the one before.",
)
@click.option(
    "--skip-tasks",
    type=click.File("r"),
    help="A file of task names, one a line, to leave out (e.g. from `bench tasks --zero-variance FILE`).",
)
@click.option("--count-infra", is_flag=True, help="Count infrastructure failures as failures in the report.")
@click.option(
    "--harbor",
    "harbor_env",
    metavar="ENV",
    help="Hand the trials to Harbor (docker, daytona, modal, e2b, runloop, gke, … or an environment's import path): "
    "its environments, -j trials at once, its retries (--retry-infra N: max_retries N), its verifier (oc-repl's "
    "does not run); Harbor-format task dirs or --dataset. --out is then a Harbor job (re-run to resume it with "
    "Harbor's own resume), which every bench command reads. Needs Harbor: pip install 'oc-repl[harbor]'.",
)
@click.option("--dataset", metavar="NAME@VERSION", help="With --harbor: a dataset of Harbor's registry.")
@click.option(
    "--until",
    type=click.Choice(["decided"]),
    help="Run in rounds (one trial of every task with every arm), at most k, and stop once an anytime-valid test "
    "decides each arm against the first: separable, or equivalent within --margin (see README, Planning and stopping).",
)
@click.option(
    "--margin",
    type=click.FloatRange(min=0, min_open=True),
    default=5.0,
    show_default=True,
    help="With --until decided: a difference in pass@1 (percentage points) too small to matter.",
)
@click.option(
    "--alpha",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    default=0.05,
    show_default=True,
    help="With --until decided: each error rate, held at every look.",
)
@click.pass_context
def run_bench(
    ctx: click.Context,
    task_dirs: tuple[Path, ...],
    attempts: int | None,
    jobs: int | None,
    out: Path | None,
    html_file: Path | None,
    keep_failures: bool,
    retry_rounds: int | None,
    skip_tasks: Any,
    count_infra: bool,
    harbor_env: str | None,
    dataset: str | None,
    until: str | None,
    margin: float,
    alpha: float,
    **params: Any,
) -> None:
    """Run every task in TASK_DIRS (task dirs, or folders of them) k times with each arm: each --protocol (a,b,...),
    with each --model or --api-base when several are given (a,b,...; the n-th model on the n-th server).

    Each trial is a separate `oc-repl run` in a fresh container of the task's image (built once per task); the other
    options apply to every trial. DIR/trials/<task>/<arm>/<n>/ holds each transcript and result.json. Every server
    is checked before the first trial (exit 5 when one does not answer). Trials that failed on infrastructure run
    again when the bench is re-run, unless --keep-failures.
    """
    from oc_repl import paths
    from oc_repl.bench.pertask import read_task_filter
    from oc_repl.bench.probe import check_servers
    from oc_repl.bench.runner import default_jobs, protocol_settings, redactor_for, trial_options, write_plan
    from oc_repl.errors import OcReplError, UsageError
    from oc_repl.sandbox.docker_container import connect
    from oc_repl.tasks.model import find_tasks

    if harbor_env is not None or dataset is not None:
        if until:
            sys.exit(report_error(UsageError("--until decided runs rounds on the local bench, not on Harbor's engine")))
        how = {"jobs": jobs, "retries": retry_rounds or 0, "count_infra": count_infra, "html_file": html_file}
        sys.exit(_on_harbor(ctx, params, harbor_env, task_dirs, dataset, attempts, out, skip_tasks, **how))
    try:
        if task_dirs:
            settings, tasks, k = per_arm_settings(ctx, params), find_tasks(task_dirs), attempts or 1
        elif out is not None:
            settings, tasks, k = recorded_settings(out, params)
            k = attempts or k
        else:
            raise UsageError("name the task dirs (or --out DIR of a bench to run again)")
        if skip_tasks is not None:
            skipped = read_task_filter(skip_tasks.read())
            tasks = [t for t in tasks if t.name not in skipped]
        connect()  # an unreachable daemon is one clear error now, not a failed build for every task
        out = out or paths.state_dir() / "bench" / time.strftime("%Y%m%dT%H%M%S")
        jobs = jobs or (default_jobs() // (RETRY_JOBS_DIVISOR if retry_rounds else 1)) or 1

        def make(at_once: int) -> Any:
            return _make(out, tasks, settings, k, at_once, keep_failures=keep_failures, only_infra=bool(retry_rounds))

        sequential = {"alpha": alpha, "margin": margin / 100, "budget": k} if until else None
        if sequential and len(settings) < 2:
            raise UsageError("--until decided compares arms: give two or more (--protocol a,b, --model m1,m2, …)")
        first = make(jobs)
        if first.queue:
            check_servers(settings)
        recorded = (trial_options(settings), redactor_for(settings), protocol_settings(settings))
        write_plan(out, tasks, 1 if sequential else k, *recorded, sequential=sequential)
    except OcReplError as exc:
        sys.exit(report_error(exc))
    if sequential:
        rounds = {"tasks": tasks, "settings": settings, "jobs": jobs, "keep_failures": keep_failures, **sequential}
        code = _until_decided(out, k, recorded, rounds)
        if code:
            sys.exit(code)
        report_and_exit(out, html_file, count_infra)
        sys.exit(0)
    code = _run_rounds(first, retry_rounds or 0, make)
    if code:
        click.echo(f"bench stopped: re-run with --out {out} to finish the missing trials", err=True)
        sys.exit(code)
    report_and_exit(out, html_file, count_infra, retry_rounds or 0)


def _on_harbor(
    ctx: click.Context,
    params: dict[str, Any],
    environment: str | None,
    task_dirs: tuple[Path, ...],
    dataset: str | None,
    attempts: int | None,
    out: Path | None,
    skip_tasks: Any,
    *,
    jobs: int | None,
    retries: int,
    count_infra: bool,
    html_file: Path | None,
) -> int:
    """The bench on Harbor's engine (oc_repl/bench/harbor_engine.py); its exit code."""
    from oc_repl import paths
    from oc_repl.bench import harbor_engine, harbor_jobs
    from oc_repl.bench.pertask import read_task_filter
    from oc_repl.bench.probe import check_servers
    from oc_repl.bench.runner import default_jobs
    from oc_repl.errors import OcReplError, UsageError
    from oc_repl.tasks.model import find_tasks

    try:
        if environment is None:
            raise UsageError("--dataset runs on Harbor's engine", hint="name its environment: --harbor docker")
        settings = per_arm_settings(ctx, params)
        check_servers(settings)
        if out is not None and harbor_jobs.is_job(out):
            click.echo(f"bench: resuming Harbor's job {out} as it was started (its own config)", err=True)
            config = None
        elif task_dirs or dataset:
            out = out or paths.state_dir() / "bench" / time.strftime("%Y%m%dT%H%M%S")
            if out.exists() and any(out.iterdir()):
                raise UsageError(f"{out} is not empty and holds no Harbor job", hint="choose another --out")
            tasks = [] if dataset else find_tasks(task_dirs)
            skipped = read_task_filter(skip_tasks.read()) if skip_tasks is not None else set()
            at_once = jobs or default_jobs()
            k = attempts or 1
            config = harbor_engine.job_config(out, settings, tasks, dataset, k, at_once, environment, retries, skipped)
        else:
            raise UsageError("name the task dirs or --dataset (or --out DIR of a Harbor job to resume)")
        harbor_engine.harbor_command()
        click.echo(f"bench: Harbor runs the trials on {environment}, the job in {out}", err=True)
        key = next(iter(settings.values())).api_key or ""
    except OcReplError as exc:
        return report_error(exc)
    code = harbor_engine.run(out, config, key)
    if code:
        click.echo(f"bench stopped: re-run with --harbor {environment} --out {out} to resume it", err=True)
        return code
    report_and_exit(out, html_file, count_infra, 0)
    return 0


def _until_decided(out: Path, budget: int, recorded: tuple[Any, ...], how: dict[str, Any]) -> int:
    """Round after round (attempt r of every task and arm, infrastructure failures run again), until every arm is
    decided against the first or `budget` rounds ran; what was decided, and why it stopped, said."""
    from oc_repl.bench.results import load_results
    from oc_repl.bench.runner import write_plan
    from oc_repl.bench.sequential import by_arm, decision_lines, decisions

    tasks, settings = how["tasks"], how["settings"]
    for r in range(1, budget + 1):
        write_plan(out, tasks, r, *recorded)
        bench = _make(out, tasks, settings, r, how["jobs"], keep_failures=how["keep_failures"], only_infra=False)
        if bench.queue:
            click.echo(f"bench: round {r} of at most {budget}: {len(bench.queue)} trials", err=True)
            code = bench.run()
            if code:
                click.echo(f"bench stopped: re-run with --out {out} --until decided to go on", err=True)
                return code
        found = decisions(
            by_arm(load_results(out), list(settings)), [t.name for t in tasks], how["alpha"], how["margin"]
        )
        for line in decision_lines(found):
            click.echo(f"bench: {line}", err=True)
        if all(d.verdict != "not yet" for _, _, d in found):
            click.echo(f"bench: decided after {r} rounds; stopped ({budget - r} rounds of the budget left)", err=True)
            return 0
    click.echo(f"bench: the budget of {budget} rounds is spent and not every comparison is decided", err=True)
    return 0


def _make(out: Path, tasks: list[Any], settings: dict[str, Any], k: int, jobs: int, **how: bool) -> Any:
    from oc_repl.bench.progress import Progress
    from oc_repl.bench.runner import Bench, plan_trials

    return Bench(out, plan_trials(tasks, list(settings), k), settings, jobs, Progress(), **how)


def _run_rounds(first: Any, rounds: int, make: Any) -> int:
    """The bench (or the first round of --retry-infra), then each further round on what the one before left failing
    on infrastructure, with half as many trials at once."""
    bench, jobs = first, first.jobs
    for n in range(max(1, rounds)):
        if n:
            jobs = max(1, jobs // RETRY_JOBS_DIVISOR)
            bench = make(jobs)
        if not bench.queue:
            break
        what = f"trials that failed on infrastructure (round {n + 1} of {rounds})" if rounds else "trials"
        click.echo(f"bench: {len(bench.queue)} {what}, at most {bench.jobs} at once, results in {bench.out}", err=True)
        code = bench.run()
        if code:
            return code
    return 0


for command in COMMANDS:
    bench.add_command(command)
bench.add_command(plan)
