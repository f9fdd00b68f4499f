"""Command line: click commands that only assemble the pieces, their settings options made from the table in
oc_repl/config.py. Heavy imports happen inside commands."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

if "httpx" not in sys.modules:
    # httpx imports its own command-line tool whenever click and rich are installed, as they are here: some 80 ms of
    # every run's start, for a tool this process never runs. A None entry makes that one import fail at once, and
    # httpx then defines a stub in its place (its own fallback for when the tool's dependencies are missing).
    sys.modules.setdefault("httpx._main", None)  # type: ignore[assignment]

from oc_repl import __version__, startup
from oc_repl.apikey import KEY_ENV, warn_on_flag
from oc_repl.cli.exits import report_error
from oc_repl.config import OPTIONS
from oc_repl.rows import FLAG, RUN, Option

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def setting_option(option: Option, hidden: bool = False) -> click.Option:
    """A setting's click option, as the table declares it. Unset it stays None, whatever the default: a flag only
    names what was typed (the environment, the file and the defaults come in `oc_repl.sources.resolve`)."""
    decls, kwargs = list(option.flags), {"default": None, "help": option.described(), "hidden": hidden}
    if option.negation:
        decls[0] = f"{option.flag}/{option.negation}"
    elif option.kind == "bool":
        kwargs["is_flag"] = True
    elif option.choices:
        kwargs["type"] = click.Choice(option.choices)
    elif option.path:
        exists, kind = option.path.rpartition(" ")[::2]
        kwargs["type"] = click.Path(
            exists=bool(exists), dir_okay=kind in ("dir", "path"), file_okay=kind in ("file", "path"), path_type=Path
        )
    elif option.kind != "str":
        kwargs["type"] = {"int": int, "float": float}[option.kind]
    if option.secret:
        kwargs["callback"] = warn_on_flag
    return click.Option([*decls, option.name], **kwargs)


def setting_options(*surfaces: str, hidden: str | None = None) -> Decorator:
    """The click options of the settings taken on any of `surfaces`, in the table's order; those also on `hidden`
    are parsed (to be refused with a reason) but left out of --help."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        params = fn.__dict__.setdefault("__click_params__", [])
        params.extend(
            setting_option(o, hidden=hidden in o.on) for o in reversed(OPTIONS.values()) if o.on & set(surfaces)
        )
        return fn

    return decorate


class TakesSettings(click.Command):
    """A command whose options are the table's rows on `surfaces` (those also on `hidden` parsed but left out of
    --help). The rows of installed packages' kinds join them when --help is asked for, or when a flag no built-in
    row has is given: reading the packages' entry points is left out of every other start (oc_repl/plugins.py)."""

    def __init__(self, *args: Any, surfaces: tuple[str, ...] = (), hidden: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.surfaces, self.hidden_on, self.installed = set(surfaces), hidden, False

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if {"--help", "-h"} & set(args):
            self._install()
        try:
            return super().parse_args(ctx, list(args))
        except click.NoSuchOption:
            if self.installed:
                raise
            self._install()
            return super().parse_args(ctx, args)

    def _install(self) -> None:
        from oc_repl.config import with_plugins

        self.installed = True
        rows = {name: row for name, row in with_plugins().items() if row.on & self.surfaces}
        # a row that chooses among kinds now names the installed ones in its help too
        self.params = [
            setting_option(rows[p.name], self.hidden_on in rows[p.name].on) if p.name in rows else p
            for p in self.params
        ]
        taken = {param.name for param in self.params}
        self.params += [setting_option(row, self.hidden_on in row.on) for row in rows.values() if row.name not in taken]


def run_options(hidden: str | None = None) -> Decorator:
    """The options shared by `run`, the interactive shell and `bench`: the settings, then the config file's."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn = click.option(
            "--config",
            "config_file",
            type=click.Path(dir_okay=False, path_type=Path),
            help="Config file (default ~/.config/oc-repl/config.toml).",
        )(fn)
        fn = click.option("--profile", help="Profile from the config file.")(fn)
        return setting_options(FLAG, hidden=hidden)(fn)

    return decorate


def typed(params: dict[str, Any]) -> dict[str, Any]:
    """The options given on the command line (the rest are None)."""
    return {name: value for name, value in params.items() if value is not None}


def _settings(params: dict[str, Any]) -> Any:
    from oc_repl.config import validate
    from oc_repl.sources import load_file, resolve

    given = typed(params)
    config_file = given.pop("config_file", None)
    file_values = load_file(config_file, given.pop("profile", None))
    return validate(resolve(given, file_values)).replace(config_file=config_file)


def _from_data(params: dict[str, Any], data: bytes) -> Any:
    from oc_repl.errors import UsageError
    from oc_repl.safejson import loads
    from oc_repl.sources import from_data

    try:
        values = loads(data)
    except ValueError as exc:
        raise UsageError(f"the settings data is not JSON: {exc}") from None
    return from_data(values, {k: v for k, v in params.items() if k not in ("config_file", "profile")})


class LazyGroup(TakesSettings, click.Group):
    """Subcommands kept in modules of their own are imported only when named (or listed by --help): `run` does not
    pay for bench's, doctor's or export's imports before its first request."""

    # bench's group is made in cmd_bench, with its report, compare, tasks and watch commands from cmd_bench_report
    lazy = {name: f"oc_repl.cli.cmd_{name}" for name in ("doctor", "export", "protocols", "resume")}
    lazy["bench"] = "oc_repl.cli.cmd_bench"

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[Any, Any, list[str]]:
        """`oc-repl "TASK"` (what is no command's name) opens the shell with that first task, as Codex does."""
        if args and not args[0].startswith("-") and self.get_command(ctx, args[0]) is None:
            return "shell", first_task, args
        return super().resolve_command(ctx, args)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.lazy:
            import importlib

            return getattr(importlib.import_module(self.lazy[name]), name)
        return super().get_command(ctx, name)


@click.group(
    cls=LazyGroup,
    invoke_without_command=True,
    context_settings={"help_option_names": ["-h", "--help"]},
    surfaces=(FLAG,),
)
@click.version_option(__version__, "--version", prog_name="oc-repl")
@run_options()
@click.pass_context
def main(ctx: click.Context, **params: Any) -> None:
    """Drive a small terminal agent behind an OpenAI-compatible server.

    With no command, opens the interactive shell (same options as `run`); `oc-repl [OPTIONS] "TASK"` opens it with
    that first task; `oc-repl resume` continues the last conversation.
    """
    if ctx.invoked_subcommand != "run":  # a run's start-up ends when its thread starts (session.py)
        startup.settled()
    if ctx.invoked_subcommand is not None:
        # `oc-repl --model m run ...` means the same as `oc-repl run --model m ...`
        ctx.obj = typed(params)
        return
    from oc_repl.cli.cmd_shell import run_shell

    sys.exit(run_shell(_settings_or_exit(params)))


@click.command(hidden=True, context_settings={"ignore_unknown_options": True})
@click.argument("task", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def first_task(ctx: click.Context, task: tuple[str, ...]) -> None:
    """The shell, its first task given on the command line (options go before it)."""
    from oc_repl.cli.cmd_shell import run_shell

    sys.exit(run_shell(_settings_or_exit(ctx.obj or {}), first_task=" ".join(task)))


def _settings_or_exit(params: dict[str, Any], data: bytes | None = None) -> Any:
    from oc_repl.errors import OcReplError

    try:
        return _settings(params) if data is None else _from_data(params, data)
    except OcReplError as exc:
        sys.exit(report_error(exc))


@main.command(cls=TakesSettings, surfaces=(FLAG, RUN))
@run_options()
@setting_options(RUN)
@click.option(
    "--attempts",
    type=click.IntRange(min=1),
    default=1,
    help="Repeat until verified, at most N times, each in a fresh container (--task or docker-image: sandboxes).",
)
@click.option(
    "--settings-json",
    type=click.File("rb"),
    hidden=True,
    help="Every setting as JSON (- for stdin), as a parent process hands them over: no config file is read, and of "
    f"the environment only ${KEY_ENV}.",
)
@click.argument("instruction", nargs=-1)
@click.pass_context
def run(ctx: click.Context, instruction: tuple[str, ...], attempts: int, settings_json: Any, **params: Any) -> None:
    """Run one task; stdout gets the final answer, the exit code the outcome."""
    from oc_repl.cli.cmd_run import run_command

    given = {**(ctx.obj or {}), **typed(params)}  # typed here beats typed before `run`
    settings = _settings_or_exit(given, None if settings_json is None else settings_json.read())
    sys.exit(run_command(settings, " ".join(instruction), attempts))


@main.command()
@click.argument("transcript", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--cast",
    "cast_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write an asciicast v2 recording of the run here instead (terminus: its screens; others: the session).",
)
@click.option("--speed", type=click.FloatRange(min=0.01), default=1.0, help="With --cast: play this many times faster.")
@click.option(
    "--idle-cap",
    type=click.FloatRange(min=0.01),
    default=2.0,
    help="With --cast: seconds a pause may last at most (default 2).",
)
def show(transcript: Path, cast_file: Path | None, speed: float, idle_cap: float) -> None:
    """Render a saved transcript (a bad line is named on stderr and makes the exit status 2)."""
    from oc_repl.cli.cmd_show import cast_transcript, show_transcript

    if cast_file is not None:
        sys.exit(cast_transcript(transcript, cast_file, speed, idle_cap))
    sys.exit(show_transcript(transcript))
