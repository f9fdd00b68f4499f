"""`oc-repl doctor`: probe the configured model server and say what to fix."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from oc_repl.apikey import with_key_options

_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red"}


@click.command()
@click.option("--api-base", envvar="OPENAI_BASE_URL", help="OpenAI-compatible base URL [sglang default].")
@with_key_options
@click.option("--model", help="Model id (default: the first id the server lists).")
@click.option("--timeout", type=float, default=120.0, show_default=True, help="Seconds one probe may take.")
@click.option("--json", "json_output", is_flag=True, help="Print the checks as JSON.")
@click.option("--profile", help="Profile from the config file.")
@click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path), help="Config file to read.")
def doctor(json_output: bool, timeout: float, **params: Any) -> None:
    """Probe the model server: reachable? tool parser on? where does thinking go? context? speed?

    Exits 1 when the server cannot serve the default protocol, 0 otherwise.
    """
    from oc_repl.apikey import PAIR, layered
    from oc_repl.config import load_file, validate
    from oc_repl.doctor import diagnose
    from oc_repl.errors import OcReplError

    try:
        file_values = load_file(params.pop("config_file"), params.pop("profile"))
        keys = ("api_base", *PAIR, "model")
        given = {k: v for k, v in params.items() if v is not None}
        settings = validate(layered({k: v for k, v in file_values.items() if k in keys}, given))
    except OcReplError as exc:
        from oc_repl.cli.exits import report_error

        sys.exit(report_error(exc))
    report = diagnose(settings.api_base, settings.api_key, settings.model, timeout=timeout)
    if json_output:
        import json

        click.echo(json.dumps(report.as_dict(), indent=2, ensure_ascii=False))
    else:
        _print(report)
    sys.exit(report.exit_code)


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
