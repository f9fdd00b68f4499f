"""`oc-repl run`: one task, its events rendered for people (stderr) or machines (stdout), the answer on stdout."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from oc_repl.cli.exits import report_error
from oc_repl.config import RunSettings
from oc_repl.errors import OcReplError, UsageError
from oc_repl.fanout import Later
from oc_repl.session import Fanout


def open_transcript(settings: RunSettings, thread: str) -> Any:
    """The run's transcript writer; a path that cannot be written is a usage error, before anything runs."""
    from oc_repl.transcript import TranscriptWriter, default_path

    path = settings.transcript or default_path(thread)
    try:
        return TranscriptWriter(path, secrets=(settings.api_key,))
    except OSError as exc:
        raise UsageError(f"cannot write the transcript to {path}: {exc.strerror or exc}") from exc


def renderer_for(settings: RunSettings) -> Callable[[Any], None]:
    if settings.json_output:
        from oc_repl.render.jsonl import JsonlRenderer

        return JsonlRenderer()
    return Later(human_renderer)


def human_renderer() -> Callable[[Any], None]:
    from oc_repl.render.human import HumanRenderer

    return HumanRenderer()


def ask_consent(question: str) -> bool:
    """The consent hook of the command line: a yes/no on stderr when stdin is a terminal, else a no. Ctrl-D (end of
    input) is a no; Ctrl-C interrupts as everywhere."""
    if not sys.stdin.isatty():
        return False
    sys.stderr.write(f"{question} [y/N]: ")
    sys.stderr.flush()
    try:
        answer = input()
    except EOFError:
        sys.stderr.write("\n")
        return False
    return answer.strip().lower() in ("y", "yes")


def run_command(settings: RunSettings, instruction: str, attempts: int = 1) -> int:
    from oc_repl.plan import check_attempts
    from oc_repl.session import run_attempts

    try:
        check_attempts(settings, attempts)
        transcript = open_transcript(settings, uuid.uuid4().hex[:12])
    except OcReplError as exc:
        return report_error(exc)
    kept = transcript.path.stat().st_size  # what the file held before this run (an appended transcript)
    try:
        from oc_repl.cli.notices import SyncNotice

        emit = Fanout(transcript, renderer_for(settings), SyncNotice())
        result = run_attempts(
            settings, instruction, emit, attempts=attempts, consent=ask_consent, transcript=str(transcript.path)
        )
    except OcReplError as exc:
        return report_error(exc)
    finally:
        transcript.close()
    from oc_repl.thread_events import refused as refused_run

    refused = refused_run(result.status, result.turns)
    if refused:  # a run refused before it started leaves no transcript: there is nothing of it to replay
        drop_written(transcript.path, kept)
    try:
        if not settings.json_output and result.final_answer:
            answer = result.final_answer.rstrip("\n")
            if sys.stdout.isatty():  # on a terminal the answer is display: hidden characters shown, as everywhere
                from oc_repl.render.sanitize import sanitize

                answer = sanitize(answer)
            sys.stdout.write(answer + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        from oc_repl.render.jsonl import silence

        silence(sys.stdout)
    try:  # a reader of stderr that is gone (`2>&1 | head -3`) does not change how the run ended
        if not settings.json_output:
            if attempts > 1:
                sys.stderr.write(f"attempt {result.attempt} of at most {attempts}: {result.status}\n")
            if not refused:
                sys.stderr.write(f"transcript: {transcript.path}  (replay: oc-repl show {transcript.path})\n")
        sys.stderr.flush()
    except BrokenPipeError:
        from oc_repl.render.jsonl import silence

        silence(sys.stderr)
    return result.exit_code


def drop_written(path: Path, size: int) -> None:
    """The transcript as it was before this run: removed when the run made it, cut back when it appended to one."""
    try:
        if size:
            os.truncate(path, size)
        else:
            path.unlink()
    except OSError:
        pass  # a record that cannot be taken back stays, as every other one does
