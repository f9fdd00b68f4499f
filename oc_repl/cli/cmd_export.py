"""`oc-repl export TRANSCRIPT|BENCH_DIR --format openai-chat`: episodes as training data, one JSON line each."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from oc_repl.cli.exits import report_error
from oc_repl.export import FORMATS


@click.command()
@click.argument("source", type=click.Path(exists=True, path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="openai-chat",
    show_default=True,
    help="openai-chat: the exact messages and tools the model saw, plus its replies; tokens: per turn the prompt "
    "and output ids, the output logprobs and the loss mask, and the reward, for RL (text-wire runs; README: Export).",
)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write here instead of stdout.")
def export(source: Path, fmt: str, output: Path | None) -> None:
    """Write each episode of a transcript, or of every trial of a bench directory, as one JSON line.

    Every episode is read before anything is written: a bad line stops the export (exit 2, naming the file and the
    line) and leaves no part of it behind. Episodes go to a file as they are read, a turn at a time, so memory stays
    flat however many there are and however long."""
    from oc_repl.errors import UsageError
    from oc_repl.redact import redactor
    from oc_repl.sources import configured_key

    left_out: Counter[str] = Counter()
    redact = redactor(configured_key())
    try:
        count = _write(source, output, fmt, redact.data, left_out)
    except BrokenPipeError:
        raise  # a reader that stopped (`| head`): handled as for every command
    except OSError as exc:  # a place that cannot be written (or read): the user's to fix, said plainly
        where = f" ({exc.filename})" if exc.filename else ""
        sys.exit(report_error(UsageError(f"cannot export: {exc.strerror or exc}{where}")))
    click.echo(f"{count} episodes exported", err=True)
    if left_out:  # training data loses nothing quietly: what holds no episode is counted, with why
        click.echo(_skipped(left_out), err=True)


def _skipped(left_out: Counter[str]) -> str:
    why = ", ".join(f"{n} {reason}" for reason, n in left_out.most_common())
    return f"{sum(left_out.values())} skipped: {why}"


def _write(source: Path, output: Path | None, fmt: str, redact: Callable[[Any], Any], left_out: Counter[str]) -> int:
    """Every episode of `source` written, its data redacted; how many. The whole export is written aside first
    (beside -o, to replace it at once; else a file of its own, copied to stdout at the end): a bad line found late,
    or an exit on the way, leaves nothing behind."""
    import shutil
    import tempfile

    from oc_repl.errors import UsageError
    from oc_repl.export import export as episodes
    from oc_repl.private import atomic_writer, make_dirs
    from oc_repl.safejson import BadInput

    if output is not None:
        make_dirs(output.parent)
    with atomic_writer(output) if output else tempfile.TemporaryFile("w+", encoding="utf-8") as spool:
        count = 0
        try:
            for episode in episodes(source, lambda why: left_out.update([why]), fmt):
                episode.write(spool, redact)
                count += 1
        except BadInput as exc:
            sys.exit(report_error(UsageError(str(exc), hint="a record that cannot be read is not exported in part")))
        if not count:
            why = f" ({_skipped(left_out)})" if left_out else ""
            sys.exit(report_error(UsageError(f"{source} holds no episode with a model reply to export{why}")))
        if output is None:
            spool.seek(0)
            shutil.copyfileobj(spool, sys.stdout)
    return count
