"""`oc-repl export TRANSCRIPT|BENCH_DIR --format openai-chat`: episodes as training data, one JSON line each."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from oc_repl.cli.exits import report_error


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
    """Write each episode of a transcript, or of every trial of a bench directory, as one JSON line.

    Every episode is read before anything is written: a bad line stops the export (exit 2, naming the file and the
    line) and leaves no part of it behind."""
    from collections import Counter

    from oc_repl.errors import UsageError
    from oc_repl.events import json_text
    from oc_repl.export import export as episodes
    from oc_repl.redact import redactor
    from oc_repl.safejson import BadInput
    from oc_repl.sources import configured_key

    left_out: Counter[str] = Counter()
    try:
        found = list(episodes(source, lambda why: left_out.update([why])))
    except BadInput as exc:
        sys.exit(report_error(UsageError(str(exc), hint="a record that cannot be read is not exported in part")))
    if not found:
        sys.exit(report_error(UsageError(f"{source} holds no episode with a model reply to export")))
    redact = redactor(configured_key())
    text = "".join(json_text(redact.data(episode)) + "\n" for episode in found)
    if output is None:
        sys.stdout.write(text)
    else:
        from oc_repl.private import make_dirs, open_private

        make_dirs(output.parent)
        with open_private(output, "w") as out:
            out.write(text)
    click.echo(f"{len(found)} episodes exported", err=True)
    if left_out:  # training data loses nothing quietly: what holds no episode is counted, with why
        why = ", ".join(f"{count} {reason}" for reason, count in left_out.most_common())
        click.echo(f"{sum(left_out.values())} skipped: {why}", err=True)
