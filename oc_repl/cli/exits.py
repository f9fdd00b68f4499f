"""How every command reports an error that stops it: the same style as errors during a run, on stderr."""

from __future__ import annotations

from typing import Any


def report_error(exc: Any) -> int:
    """Show an OcReplError (message and hint) as the run's renderer shows errors; returns its exit code."""
    from oc_repl.events import Error
    from oc_repl.render.human import HumanRenderer

    HumanRenderer()(Error(kind=exc.kind, message=exc.message, hint=exc.hint))
    return int(exc.exit_code)
