"""`oc-repl run`: one task, its events rendered for people (stderr) or machines (stdout), the answer on stdout."""

from __future__ import annotations

import signal
import sys
import uuid
from collections.abc import Callable
from typing import Any

from oc_repl.config import RunSettings
from oc_repl.session import Fanout, Session


def _interrupt_on_sigterm() -> None:
    # A terminated run cleans up like an interrupted one: sessions killed, transcript closed.
    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def run_task(settings: RunSettings, instruction: str) -> int:
    from oc_repl.transcript import TranscriptWriter, default_path

    _interrupt_on_sigterm()
    if settings.json_output:
        from oc_repl.render.jsonl import JsonlRenderer

        renderer: Callable[[Any], None] = JsonlRenderer()
    else:
        from oc_repl.render.human import HumanRenderer

        renderer = HumanRenderer()
    transcript = TranscriptWriter(
        settings.transcript or default_path(uuid.uuid4().hex[:12]), secrets=(settings.api_key,)
    )
    result = Session(settings, Fanout(transcript, renderer)).run(instruction, close_after=True)
    transcript.close()
    if not settings.json_output and result.final_answer:
        answer = result.final_answer.rstrip("\n")
        if sys.stdout.isatty():  # on a terminal the answer is display, and gets the same cleaning as the rest
            from oc_repl.render.sanitize import sanitize

            answer = sanitize(answer)
        sys.stdout.write(answer + "\n")
    return result.exit_code
