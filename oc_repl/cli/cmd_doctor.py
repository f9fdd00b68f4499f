"""`oc-repl doctor`: probe the configured model server and say what to fix."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from oc_repl.cli import TakesSettings, setting_options
from oc_repl.config import DOCTOR

_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red"}


@click.command(cls=TakesSettings, surfaces=(DOCTOR,))
@setting_options(DOCTOR)
@click.option("--timeout", type=float, default=120.0, show_default=True, help="Seconds one probe may take.")
@click.option("--json", "json_output", is_flag=True, help="Print the checks as JSON.")
@click.option("--profile", help="Profile from the config file.")
@click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path), help="Config file to read.")
def doctor(json_output: bool, timeout: float, **params: Any) -> None:
    """Probe the model server: reachable? tool parser on? where does thinking go? context? speed? which wires?

    Exits 1 when the server cannot serve the default protocol, 0 otherwise.
    """
    from oc_repl.config import OPTIONS, validate
    from oc_repl.doctor import diagnose
    from oc_repl.errors import OcReplError
    from oc_repl.sources import load_file, resolve

    try:
        file_values = load_file(params.pop("config_file"), params.pop("profile"))
        mine = {k: v for k, v in file_values.items() if DOCTOR in OPTIONS[k].on}
        settings = validate(resolve(params, mine))
    except OcReplError as exc:
        from oc_repl.cli.exits import report_error

        sys.exit(report_error(exc))
    report = diagnose(
        settings.api_base,
        settings.api_key,
        settings.model,
        timeout=timeout,
        wire=settings.wire,
        tokenizer=settings.tokenizer,
        waiting=_waiting,
    )
    if json_output:
        import json

        click.echo(json.dumps(report.as_dict(), indent=2, ensure_ascii=False))
    else:
        _print(report)
    sys.exit(report.exit_code)


def _waiting(what: str) -> None:
    """Each probe says what it waits on as it starts, on stderr: a slow server makes the doctor take a while."""
    click.echo(f"doctor: waiting on {what}", err=True)


def _print(report: Any) -> None:
    from rich.markup import escape
    from rich.table import Table

    from oc_repl.render.human import make_console

    console = make_console(stderr=False)
    table = Table(title=f"oc-repl doctor: {report.api_base}" + (f" ({report.model})" if report.model else ""))
    table.add_column("check", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("finding")
    for check in report.checks:
        style = _STYLE[check.status]
        table.add_row(check.name, f"[{style}]{check.status}[/]", escape(check.finding))
    console.print(table)
    # Fixes are commands to copy: printed whole below the table rather than wrapped inside a cell.
    for check in report.checks:
        if check.fix and check.status != "ok":
            console.print(f"[bold]fix ({check.name}):[/] {escape(check.fix)}", soft_wrap=True)
    if report.blocking:
        console.print("[bold red]This server cannot serve the default protocol yet.[/]", soft_wrap=True)
