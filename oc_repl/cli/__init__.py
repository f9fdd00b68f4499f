"""Command line: click commands that only assemble the pieces. Heavy imports happen inside commands."""

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

from oc_repl import __version__
from oc_repl.apikey import key_options
from oc_repl.cli.exits import report_error

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def run_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The options shared by `run` and the interactive shell."""
    options: list[Decorator] = [
        click.option("--api-base", envvar="OPENAI_BASE_URL", help="OpenAI-compatible base URL [sglang default]."),
        *key_options(),
        click.option("--model", help="Model id (default: the first id the server lists)."),
        click.option("--protocol", help="camel-terminal-toolkit (default), terminus-json, terminus-xml or raw."),
        click.option(
            "--history",
            type=click.Choice(["training", "camel-0.2.85", "full"]),
            help="camel history mode: what the model saw in training (default), camel<=0.2.85, or standard.",
        ),
        click.option("--system", help="raw: a system message, as TEXT or @FILE."),
        click.option(
            "--relative-paths",
            type=click.Choice(["workdir", "root"]),
            help="camel: relative file_path of shell_write_content_to_file against the workdir, or / as upstream.",
        ),
        click.option(
            "--wait",
            type=click.Choice(["detect", "exact"]),
            help="terminus: return once the shell is provably idle (detect, default) or sleep every duration (exact).",
        ),
        click.option(
            "--sandbox",
            help="Where commands run: local:<dir> (default local:.), docker:<container>, docker-image:<image>.",
        ),
        click.option(
            "--confine/--no-confine",
            default=None,
            help="local: run the model's commands in bubblewrap: the host read-only, the sandbox directory and a "
            "private /tmp writable, no network (default on).",
        ),
        click.option("--network", is_flag=True, default=None, help="local: let confined commands use the network."),
        click.option(
            "--writable-vcs",
            is_flag=True,
            default=None,
            help="local: let confined commands write the sandbox directory's .git, .hg and .svn (read-only otherwise).",
        ),
        click.option("--workdir", help="Working directory in a docker sandbox (default /workspace, as trained)."),
        click.option("--docker-network", help="Network of a created container (default: none; a task's own)."),
        click.option(
            "--max-processes",
            type=int,
            help="Processes the sandbox may run at once: local: and every container oc-repl creates (default 4096).",
        ),
        click.option(
            "--memory-mb",
            type=int,
            help="Memory (swap included) of the sandbox, in MB: local: and every container oc-repl creates; a task's "
            "own memory_mb wins for its container (default 4096).",
        ),
        click.option("--keep", is_flag=True, default=None, help="Keep a created container and print its name."),
        click.option(
            "--observation-limit",
            type=int,
            help="camel: characters of a tool result the model sees, head and tail kept (16384; 0 = no limit).",
        ),
        click.option("--max-turns", type=int, help="Model turns per task (default 12)."),
        click.option("--loop-limit", type=int, help="Identical turns in a row that stop the run (default 3; 0 off)."),
        click.option(
            "--sampling",
            type=click.Choice(["default", "training"]),
            help="Sampling preset: default (T 0.7, top-p 0.8, 4096 tokens) or training (T 1.0, top-p 1.0, 8192).",
        ),
        click.option("--temperature", type=float, help="Overrides the preset's temperature."),
        click.option("--top-p", type=float, help="Overrides the preset's top-p."),
        click.option("--max-tokens", type=int, help="Overrides the preset's max new tokens."),
        click.option("--stream/--no-stream", default=None, help="Stream replies (default on)."),
        click.option("--retries", type=int, help="Retries for server faults (default 3)."),
        click.option("--idle-timeout", type=float, help="Seconds a stream may stall before it is retried (120)."),
        click.option(
            "--request-timeout",
            type=float,
            help="Seconds an unstreamed reply may take, whole, before it is retried (600).",
        ),
        click.option("--verify", help="Command run in the sandbox after the agent; exit 0 = success."),
        click.option(
            "--verify-file",
            type=click.Path(exists=True, dir_okay=False, path_type=Path),
            help="Script copied into the sandbox and run with bash after the agent.",
        ),
        click.option("--verify-timeout", type=float, help="Seconds the verifier may take (600)."),
        click.option(
            "--timeout",
            type=float,
            help="Seconds the agent may take in all (model and commands; 0 = no limit); a task's own agent timeout "
            "applies too. The verifier still runs after it (exit 7 unless it passes).",
        ),
        click.option(
            "--transcript",
            type=click.Path(dir_okay=False, path_type=Path),
            help="JSONL transcript path (default under ~/.local/state/oc-repl/sessions/).",
        ),
        click.option(
            "--yes", "-y", is_flag=True, default=None, help="Consent to run model-chosen commands on this host."
        ),
        click.option(
            "--exact",
            is_flag=True,
            default=None,
            help="Run exactly as the checkpoint was trained (camel) or evaluated (terminus): synced upstream assets "
            "only, every deviation off (see `oc-repl protocols sync`).",
        ),
        click.option("--profile", help="Profile from the config file."),
        click.option(
            "--config",
            "config_file",
            type=click.Path(dir_okay=False, path_type=Path),
            help="Config file (default ~/.config/oc-repl/config.toml).",
        ),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _settings(params: dict[str, Any]) -> Any:
    from oc_repl.apikey import layered
    from oc_repl.config import load_file, validate

    file_values = load_file(params.pop("config_file", None), params.pop("profile", None))
    given = {k: v for k, v in params.items() if v is not None}
    return validate(layered(file_values, given))


class LazyGroup(click.Group):
    """Subcommands kept in modules of their own are imported only when named (or listed by --help): `run` does not
    pay for bench's, doctor's or export's imports before its first request."""

    lazy = {name: f"oc_repl.cli.cmd_{name}" for name in ("bench", "doctor", "export", "protocols")}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.lazy:
            import importlib

            return getattr(importlib.import_module(self.lazy[name]), name)
        return super().get_command(ctx, name)


@click.group(cls=LazyGroup, invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="oc-repl")
@run_options
@click.pass_context
def main(ctx: click.Context, **params: Any) -> None:
    """Drive a small terminal agent behind an OpenAI-compatible server.

    With no command, opens the interactive shell (same options as `run`).
    """
    if ctx.invoked_subcommand is not None:
        # `oc-repl --model m run ...` means the same as `oc-repl run --model m ...`
        ctx.obj = _typed(ctx, params)
        return
    from oc_repl.cli.cmd_shell import run_shell

    sys.exit(run_shell(_settings_or_exit(params)))


def _typed(ctx: click.Context, params: dict[str, Any]) -> dict[str, Any]:
    """The options given on the command line itself (not from the environment or a default)."""
    typed = click.core.ParameterSource.COMMANDLINE
    return {k: v for k, v in params.items() if v is not None and ctx.get_parameter_source(k) == typed}


def _settings_or_exit(params: dict[str, Any]) -> Any:
    from oc_repl.errors import OcReplError

    try:
        return _settings(params)
    except OcReplError as exc:
        sys.exit(report_error(exc))


@main.command()
@run_options
@click.option("--json", "json_output", is_flag=True, default=None, help="JSONL events on stdout instead of the answer.")
@click.option("--task-name", help="Task name shown to the model (default: derived from the instruction).")
@click.option(
    "--task",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="A terminal-bench task directory: its image, instruction and tests.",
)
@click.option("--image", help="With --task: use this image instead of building the task's Dockerfile.")
@click.option(
    "--attempts",
    type=click.IntRange(min=1),
    default=1,
    help="Repeat until verified, at most N times, each in a fresh container (--task or docker-image: sandboxes).",
)
@click.argument("instruction", nargs=-1)
@click.pass_context
def run(ctx: click.Context, instruction: tuple[str, ...], attempts: int, **params: Any) -> None:
    """Run one task; stdout gets the final answer, the exit code the outcome."""
    from oc_repl.cli.cmd_run import run_command

    # typed flags (here or before `run`) > environment > file > defaults
    given = {**{k: v for k, v in params.items() if v is not None}, **(ctx.obj or {}), **_typed(ctx, params)}
    sys.exit(run_command(_settings_or_exit(given), " ".join(instruction), attempts))


@main.command()
@click.argument("transcript", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def show(transcript: Path) -> None:
    """Render a saved transcript (a bad line is named on stderr and makes the exit status 2)."""
    from oc_repl.cli.cmd_show import show_transcript

    sys.exit(show_transcript(transcript))
