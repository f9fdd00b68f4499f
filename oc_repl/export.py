"""Transcripts as training data: each episode (one thread, `thread.started` to `thread.completed`) as one JSON object
holding exactly what the model saw and what it answered, taken from `request.sent` / `response.received`.

Format `openai-chat` (one JSON line per episode):
    {"format": "oc-repl/openai-chat/1",
     "messages": [...the last request's messages..., the model's last reply],   # the usual SFT shape
     "tools": [...the tools of the last request...],                            # absent when there were none
     "turns": [{"messages": [...], "tools": [...], "options": {sampling, tool_choice, ...},
                "reply": {assistant message as received}, "finish_reason": "stop"}, ...],
     "metadata": {"task_name", "task", "protocol", "model", "thread_id", "attempt", "status", "verified",
                  "reward", "tests_passed", "tests_total", "transcript", and for a bench trial "bench": {...}}}
`turns` is the exact record of every request; in camel's `training` history, which drops the model's earlier replies
from later requests, only `turns` holds them all.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

FORMAT = "oc-repl/openai-chat/1"


def _reply_message(raw: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The assistant message as the server sent it (streamed replies: as accumulated), and its finish reason."""
    if "message" in raw:
        return dict(raw.get("message") or {}), str(raw.get("finish_reason") or "")
    choice = (raw.get("choices") or [{}])[0] or {}
    return dict(choice.get("message") or {}), str(choice.get("finish_reason") or "")


def _episode(started: dict[str, Any], turns: list[dict[str, Any]], end: dict[str, Any], verify: Any) -> dict:
    last = turns[-1] if turns else {"messages": [], "tools": None, "reply": None}
    episode: dict[str, Any] = {
        "format": FORMAT,
        "messages": [*last["messages"], *([last["reply"]] * bool(last["reply"]))],
    }
    if last.get("tools"):
        episode["tools"] = last["tools"]
    episode["turns"] = turns
    episode["metadata"] = {
        "task_name": started.get("task_name", ""),
        "task": started.get("task", ""),
        "protocol": started.get("protocol", ""),
        "model": started.get("model", ""),
        "thread_id": started.get("thread_id", ""),
        "attempt": started.get("attempt", 1),
        "status": end.get("status", ""),
        "verified": end.get("status") == "verified",
        "reward": (verify or {}).get("reward"),
        "tests_passed": (verify or {}).get("tests_passed"),
        "tests_total": (verify or {}).get("tests_total"),
    }
    return episode


def episodes(transcript: Path) -> Iterator[dict[str, Any]]:
    """The episodes of one transcript; one cut short by a crash ends where the transcript does."""
    started: dict[str, Any] | None = None
    turns: list[dict[str, Any]] = []
    pending: dict[str, Any] | None = None
    verify: dict[str, Any] | None = None
    for line in transcript.read_text(encoding="utf-8", errors="replace").split("\n"):
        try:
            event = json.loads(line)
        except ValueError:
            continue  # a line cut by a crash
        kind = event.get("type")
        if kind == "thread.started":
            if started is not None and turns:
                yield _episode(started, turns, {}, verify)
            started, turns, pending, verify = event, [], None, None
        elif kind == "request.sent":
            pending = dict(event.get("request") or {})  # a retry replaces the request it repeats
        elif kind == "response.received" and pending is not None:
            reply, finish = _reply_message(event.get("raw") or {})
            messages, tools = pending.pop("messages", []), pending.pop("tools", None)
            turns.append(
                {"messages": messages, "tools": tools, "options": pending, "reply": reply, "finish_reason": finish}
            )
            pending = None
        elif kind == "verify.completed":
            verify = event
        elif kind == "thread.completed" and started is not None:
            if turns:
                yield _episode(started, turns, event, verify)
            started, turns = None, []
    if started is not None and turns:
        yield _episode(started, turns, {}, verify)


def export(path: Path) -> Iterator[dict[str, Any]]:
    """Episodes of a transcript, or of every trial of a bench directory (with the trial's record)."""
    if path.is_file():
        for episode in episodes(path):
            episode["metadata"]["transcript"] = str(path)
            yield episode
        return
    from oc_repl.bench.results import TRANSCRIPT, load_results, trial_dir

    for result in load_results(path):
        transcript = trial_dir(path, result.task, result.protocol, result.attempt) / TRANSCRIPT
        if not result.transcript or not transcript.is_file():
            continue
        for episode in episodes(transcript):
            episode["metadata"]["transcript"] = str(transcript)
            episode["metadata"]["bench"] = {
                "task": result.task,
                "protocol": result.protocol,
                "trial": result.attempt,
                "failure_mode": result.failure_mode,
                "resolved": result.resolved,
            }
            yield episode
