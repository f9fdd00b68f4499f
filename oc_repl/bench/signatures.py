"""What a trial did, read off its transcript once when it ends: the actions of each turn, and the signatures of the
ways a model fails that a table of outcomes hides (a turn cap spent repeating one command, parse errors, an
overflowing context, empty replies, tampering, and those its protocol's kind declares: terminus replies that only
wait).

Both go into the trial's record, so the per-task analysis needs no transcript: it compares the actions of a task's
trials turn by turn to find where a solved one and a failed one part.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from oc_repl.errors import UsageError
from oc_repl.events import TERMINAL_TOOL
from oc_repl.lazy import load
from oc_repl.outcome import Status

ACTION_CHARS = 300  # of one turn's actions, kept in the record
REPEATED = 3  # the same command this many times in a run that hit its turn cap: it was stuck on it


def turn_actions(events: Iterable[dict[str, Any]]) -> list[str]:
    """One line per model turn: its commands (as typed or run) and the files it wrote, in order; "" for a turn that
    did nothing, "(parse error)" for one that could not be read."""
    turns: list[list[str]] = []
    for event in events:
        kind = event.get("type")
        if kind == "turn.started":
            turns.append([])
        elif kind == "item.completed" and turns:
            turns[-1].extend(_action(event.get("item") or {}))
    return [_clip(" ; ".join(actions)) for actions in turns]


def _action(item: dict[str, Any]) -> list[str]:
    kind = item.get("type")
    if _acts(item):
        command = str(item.get("command") or "").strip()
        return [command] if command else []
    if kind == "file_change":
        return [f"write {c.get('path', '')}" for c in item.get("changes") or [] if isinstance(c, dict)]
    if kind == "parse_error":
        return ["(parse error)"]
    return []


def _clip(text: str) -> str:
    return text if len(text) <= ACTION_CHARS else text[: ACTION_CHARS - 1] + "…"


def signatures(events: list[dict[str, Any]], status: Status) -> list[str]:
    """The failure signatures of one trial, each a short line beginning with its name."""
    found: list[str] = []
    per_turn = _turn_items(events)
    commands = Counter(
        str(item.get("command")).strip()
        for items in per_turn
        for item in items
        if _acts(item) and str(item.get("command")).strip()
    )
    if status is Status.TURN_CAP and commands:
        command, times = commands.most_common(1)[0]
        if times >= REPEATED:
            found.append(f"turn_cap_repeating: {_clip(command)!r} {times} times")
    found += _kinds_own(events, per_turn)
    parse_errors = sum(item.get("type") == "parse_error" for items in per_turn for item in items)
    if parse_errors:
        found.append(f"parse_errors: {parse_errors}")
    if status is Status.CONTEXT_LENGTH:
        found.append("context_overflow: the conversation outgrew the model's context")
    empty = sum(1 for items in per_turn if not any(_said_or_did(item) for item in items))
    if empty:
        found.append(f"empty_replies: {empty} of {len(per_turn)}")
    verify = next((e for e in reversed(events) if e.get("type") == "verify.completed"), {})
    for finding in verify.get("findings") or []:
        if isinstance(finding, dict) and finding.get("affects_tests"):
            found.append(f"tamper: {finding.get('kind', '')} {_clip(str(finding.get('path', '')))}".rstrip())
    return found


def _turn_items(events: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The completed items of each turn that got a reply (a turn that failed at the server said nothing)."""
    turns: list[list[dict[str, Any]]] = []
    current: list[dict[str, Any]] | None = None
    for event in events:
        kind = event.get("type")
        if kind == "turn.started":
            current = []
        elif kind == "item.completed" and current is not None:
            current.append(event.get("item") or {})
        elif kind == "turn.completed" and current is not None:
            turns.append(current)
            current = None
        elif kind == "turn.failed":
            current = None
    return turns


def _kinds_own(events: list[dict[str, Any]], per_turn: list[list[dict[str, Any]]]) -> list[str]:
    """The signatures the trial's protocol kind declares (none for a protocol no longer known here)."""
    from oc_repl.protocols import kind_of

    started = next((e for e in events if e.get("type") == "thread.started"), {})
    try:
        kind = kind_of(str(started.get("protocol") or ""))
    except UsageError:
        return []
    return [line for ref in kind.signatures for line in load(ref)(per_turn)]


def _said_or_did(item: dict[str, Any]) -> bool:
    if item.get("type") == "agent_message":
        return bool(str(item.get("text") or "").strip())
    return item.get("type") in ("command_execution", "file_change", "parse_error")


def _acts(item: dict[str, Any]) -> bool:
    """A command or keystrokes of the model's (not the screen it was shown after them)."""
    return item.get("type") == "command_execution" and item.get("tool") != TERMINAL_TOOL
