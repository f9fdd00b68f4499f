"""`oc-repl resume [TRANSCRIPT]`: take up the last shell conversation (or the one a transcript holds) where it
stopped: the protocol's history rebuilt from the transcript, in the same sandbox, or a refusal saying why not."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from oc_repl.cli import _settings_or_exit, run_options
from oc_repl.errors import OcReplError, UsageError

START_ANEW = "start a new conversation instead: oc-repl --sandbox SPEC"


def latest_transcript() -> Path:
    """The newest shell transcript under the default folder."""
    from oc_repl import paths

    found = sorted(
        (paths.state_dir() / "sessions").glob("*/*/*/*-shell.jsonl"), key=lambda p: p.stat().st_mtime, reverse=True
    )
    if not found:
        raise UsageError("there is no shell conversation to resume", hint="oc-repl opens one; or name a transcript")
    return found[0]


def last_conversation(path: Path) -> tuple[Any, Any]:
    """The conversation the transcript ends with, as the shell saved it after its last task; when the shell was
    stopped during a task (killed, say), as the model last saw it: the last request it was sent. With it, the last
    `thread.started` of that conversation (None when the transcript has none)."""
    from oc_repl.transcript import read_events

    saved, started, asked, threads = None, None, None, {}
    try:
        for event in read_events(path, on_bad_line=lambda *_: None):
            if event.type == "conversation.saved":
                saved, asked = event, None
            elif event.type == "thread.started":
                started = threads[event.thread_id] = event
            elif event.type == "request.sent":
                asked = (started, event.request.get("messages") or [])
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    conversation = _conversation(path, saved, asked)
    return conversation, threads.get(conversation.thread_id)


def _conversation(path: Path, saved: Any, asked: tuple[Any, list[Any]] | None) -> Any:
    from oc_repl.events import ConversationSaved

    if asked is None or asked[0] is None:
        if saved is None:
            raise UsageError(f"{path} holds no conversation that can be resumed", hint=START_ANEW)
        return saved
    thread, messages = asked
    if saved is not None and saved.thread_id == thread.thread_id:
        return ConversationSaved(
            thread_id=thread.thread_id, protocol=saved.protocol, sandbox=saved.sandbox, messages=messages,
            tasks=saved.tasks + 1,
        )  # fmt: skip
    # a conversation that never finished a task: its sandbox as the thread named it, when that names it alone
    reachable = thread.sandbox if _reattachable(thread.sandbox) else None
    if reachable is None and thread.sandbox != "none":
        raise UsageError(
            f"the conversation in {path} ran in {thread.sandbox}, whose container was not recorded before the shell "
            "stopped: it cannot be taken up in the same sandbox",
            hint=START_ANEW,
        )
    return ConversationSaved(
        thread_id=thread.thread_id, protocol=thread.protocol, sandbox=reachable or "", messages=messages, tasks=1
    )


def _reattachable(spec: str) -> bool:
    from oc_repl.sandbox.kinds import kind_of

    try:
        return kind_of(spec).reattachable
    except UsageError:  # "none", or a sandbox of no kind oc-repl opens (Harbor's)
        return False


def conversation_settings(started: Any) -> tuple[dict[str, Any], list[str]]:
    """What a conversation's last thread (its `thread.started`) ran with, as settings: its server, model, turn cap
    and verifier; and what of it cannot be set again, said why."""
    if started is None:
        return {}, []
    options = started.options
    found = {"api_base": started.api_base, "model": started.model, "max_turns": options.get("max_turns")}
    found["verify"] = options.get("verify")
    lost = []
    verify_file = options.get("verify_file")
    if verify_file and Path(verify_file).is_file():
        found["verify_file"] = Path(verify_file)
    elif verify_file:
        lost.append(f"its verify file {verify_file} is gone (/verify CMD sets a verifier)")
    return {k: v for k, v in found.items() if v}, lost


def check_sandbox(spec: str) -> None:
    """The sandbox is still there: the local directory, or the container (kept, or not yet expired), running."""
    if not _reattachable(spec):
        return
    from oc_repl.sandbox import driver
    from oc_repl.sandbox.kinds import target_of

    why = driver(spec).gone(target_of(spec))
    if why:
        raise UsageError(why, hint=START_ANEW)


def end_lines(path: Path) -> None:
    """A shell killed mid-line left its last line unterminated: the resumed one starts on a line of its own."""
    with path.open("rb+") as handle:
        if handle.seek(0, 2) and (handle.seek(-1, 2), handle.read(1))[1] != b"\n":
            handle.write(b"\n")


@click.command()
@run_options()
@click.argument(
    "conversation", metavar="[TRANSCRIPT]", required=False, type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
@click.pass_context
def resume(ctx: click.Context, conversation: Path | None, **params: Any) -> None:
    """Continue the last shell conversation, or the one TRANSCRIPT holds, in the same sandbox."""
    from oc_repl.cli.cmd_shell import run_shell
    from oc_repl.cli.exits import report_error

    given = {**(ctx.obj or {}), **{k: v for k, v in params.items() if v is not None}}
    try:
        path = conversation or latest_transcript()
        saved, started = last_conversation(path)
        check_sandbox(saved.sandbox)
        end_lines(path)
    except OcReplError as exc:
        sys.exit(report_error(exc))
    # the conversation's server, model and turn cap, under what this command line gives (over config and environment)
    found, lost = conversation_settings(started)
    verifier_given = {"verify", "verify_file"} & set(given)  # either one replaces the conversation's verifier
    restored = {k: v for k, v in found.items() if k not in given and not (k.startswith("verify") and verifier_given)}
    settings = _settings_or_exit({**restored, **given})
    if restored:
        said = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in restored.items())
        click.echo(f"oc-repl: the conversation's {said}", err=True)
    for why in lost:
        click.echo(f"oc-repl: not restored: {why}", err=True)
    where = {"sandbox": saved.sandbox} if saved.sandbox else {}
    settings = settings.replace(protocol=saved.protocol, transcript=settings.transcript or path, **where)
    sys.exit(run_shell(settings, resumed=saved))
