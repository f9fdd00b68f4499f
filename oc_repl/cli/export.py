"""`oc-repl export TRANSCRIPT|BENCH_DIR --format openai-chat`: episodes as training data, one JSON line each."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from oc_repl.cli.report import report_error


@click.command()
@click.argument("source", type=click.Path(exists=True, path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["openai-chat"]),
    default="openai-chat",
    show_default=True,
    help="openai-chat: the exact messages and tools the model saw, plus its replies (README: Export).",
)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write here instead of stdout.")
def export(source: Path, fmt: str, output: Path | None) -> None:
    """Write each episode of a transcript, or of every trial of a bench directory, as one JSON line."""
    from oc_repl.errors import UsageError
    from oc_repl.export import export as episodes

    out = output.open("w", encoding="utf-8") if output else sys.stdout
    count = 0
    try:
        for episode in episodes(source):
            out.write(json.dumps(episode, ensure_ascii=False) + "\n")
            count += 1
    finally:
        if output:
            out.close()
    if not count:
        sys.exit(report_error(UsageError(f"{source} holds no episode with a model reply to export")))
    click.echo(f"{count} episodes exported", err=True)
