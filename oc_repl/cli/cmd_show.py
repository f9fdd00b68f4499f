"""`oc-repl show TRANSCRIPT`: a saved transcript rendered as the run showed it, on stdout.

A viewer shows what it can: every good line is shown, every bad one is named (file and line) on stderr, and any bad
line makes the exit status 2. A last line without its newline is what a killed run leaves: it is named, not an error.
"""

from __future__ import annotations

from pathlib import Path

import click

from oc_repl.cli.exits import report_error
from oc_repl.errors import UsageError
from oc_repl.safejson import BadInput

LISTED = 10  # bad lines named one by one; the rest are counted


def show_transcript(transcript: Path) -> int:
    from oc_repl.render.human import HumanRenderer, make_console
    from oc_repl.render.sanitize import sanitize
    from oc_repl.transcript import numbered_events

    render = HumanRenderer(make_console(stderr=False))  # the rendering is what was asked for: stdout, for `| less`
    bad: list[BadInput] = []
    shown = 0
    try:
        for _number, event in numbered_events(transcript):
            if isinstance(event, BadInput):
                bad.append(event)
                continue
            render(event)
            shown += 1
    except BadInput as unreadable:
        return report_error(UsageError(sanitize(str(unreadable))))
    if bad and not shown:
        return report_error(UsageError(f"{sanitize(str(transcript))} is not an oc-repl transcript: {_why(bad[0])}"))
    for line in bad[:LISTED]:
        note = " (the run that wrote it stopped mid-line)" if line.cut else ""
        click.echo(f"oc-repl: {sanitize(str(transcript))}:{line.line}: {_why(line)}{note}", err=True)
    if len(bad) > LISTED:
        click.echo(f"oc-repl: … and {len(bad) - LISTED} more bad lines", err=True)
    return 2 if any(not line.cut for line in bad) else 0


def cast_transcript(transcript: Path, target: Path, speed: float, idle_cap: float) -> int:
    """The transcript as an asciicast v2 recording (oc_repl/render/cast.py)."""
    from oc_repl.render.cast import write_cast
    from oc_repl.render.sanitize import sanitize

    try:
        write_cast(transcript, target, speed, idle_cap)
    except BadInput as unreadable:
        return report_error(UsageError(sanitize(str(unreadable))))
    except OSError as exc:
        return report_error(UsageError(f"cannot write {sanitize(str(target))}: {exc.strerror}"))
    click.echo(f"recording: {sanitize(str(target))}", err=True)
    return 0


def _why(bad: BadInput) -> str:
    from oc_repl.render.sanitize import one_line

    why = one_line(bad.why)
    return why if len(why) <= 200 else why[:200] + "…"
