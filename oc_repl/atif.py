"""A run as an ATIF trajectory (Harbor's Agent Trajectory Interchange Format, the version Harbor 0.25 writes), built
from oc-repl's own events without Harbor: by the Harbor agent as a trial runs (Harbor's models then validate it) and
by `export --format atif` from any transcript.

The trajectory is a summary in Harbor's format (the exact requests and replies stay in the transcript): the first
request's system and user messages as steps, then one agent step per turn with its text, reasoning, the actions it ran
as tool calls (as oc-repl names them: camel's tools, or terminus keystrokes), their results as observations, and its
token counts, with the prompt and output token ids and the output logprobs where the wire had them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from oc_repl import events as ev
from oc_repl.turn_ids import token_ids

SCHEMA = "ATIF-v1.8"


@dataclass
class Turn:
    number: int
    ts: float
    message: str = ""
    reasoning: str = ""
    items: list[Any] = field(default_factory=list)  # completed commands, file changes and parse errors
    input_tokens: int = 0
    output_tokens: int = 0
    ids: dict[str, list[Any]] = field(default_factory=dict)  # prompt and output ids, output logprobs (text wires)


class RunRecord:
    """An event sink: keeps what the context and the trajectory need, never whole request histories."""

    def __init__(self, on_turn: Callable[[], None] | None = None) -> None:
        self.on_turn = on_turn
        self.started: ev.ThreadStarted | None = None
        self.opening: list[dict[str, Any]] = []  # the messages of the first request
        self.opened_at = 0.0
        self.turns: list[Turn] = []
        self.completed: ev.ThreadCompleted | None = None
        self.last_error: ev.Error | None = None
        self.input_tokens = 0
        self.output_tokens = 0
        self.findings: list[ev.Finding] = []  # the tamper probe's, once the run is over
        self._body: dict[str, Any] | None = None  # the last request's body as posted

    def __call__(self, event: Any) -> None:
        kind = event.type
        if kind == "thread.started":
            self.started = event
        elif kind == "turn.started":
            self.turns.append(Turn(event.turn, event.ts))
        elif kind == "request.sent":
            if not self.opening:
                self.opening = [dict(m) for m in event.request.get("messages", [])]
                self.opened_at = event.ts
            self._body = event.body  # a retry's replaces the request it repeats
        elif kind == "response.received" and self.turns:
            self.turns[-1].ids = token_ids(self._body or {}, event.raw)
        elif kind == "item.completed" and self.turns:
            self._item(self.turns[-1], event.item)
        elif kind == "turn.completed" and self.turns:
            turn = self.turns[-1]
            turn.input_tokens, turn.output_tokens = event.usage.input_tokens, event.usage.output_tokens
            self.input_tokens += turn.input_tokens
            self.output_tokens += turn.output_tokens
            if self.on_turn is not None:
                self.on_turn()
        elif kind == "thread.completed":
            self.completed = event
        elif kind == "error" and not event.retrying:
            self.last_error = event

    @staticmethod
    def _item(turn: Turn, item: Any) -> None:
        if item.type == "agent_message":
            turn.message = item.text
        elif item.type == "reasoning":
            turn.reasoning = item.text
        else:
            turn.items.append(item)

    def metadata(self) -> dict[str, Any]:
        """For Harbor's `context.metadata` (its results show it; it has no field for turns)."""
        found: dict[str, Any] = {"n_turns": len(self.turns)}
        if self.started is not None:
            found.update(
                protocol=self.started.protocol,
                exact=self.started.exact,
                model=self.started.model,
                sandbox=self.started.sandbox,
                assets=[{"name": a.name, "sha256": a.sha256, "source": a.source} for a in self.started.assets],
            )
        if self.completed is not None:
            found.update(
                status=self.completed.status,
                exit_code=self.completed.exit_code,
                n_turns=self.completed.turns,
                tool_calls_native=self.completed.tool_calls_native,
                tool_calls_salvaged=self.completed.tool_calls_salvaged,
                transcript=self.completed.transcript,
                environment_calls=self.completed.sandbox_calls,  # Harbor's environment: each exec and upload
                environment_seconds=self.completed.sandbox_seconds,
            )
        if self.last_error is not None:
            found["error"] = {"kind": self.last_error.kind, "message": self.last_error.message}
        if self.completed is not None:
            found.update(
                tampered=any(f.affects_tests for f in self.findings), findings=[ev.to_dict(f) for f in self.findings]
            )
        return found


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat()


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else []
    return "".join(part.get("text", "") for part in parts if isinstance(part, dict))


def trajectory(record: RunRecord, session_id: str, version: str) -> dict[str, Any] | None:
    """The run as an ATIF trajectory (a JSON object), or None when no request was sent."""
    if not record.opening:
        return None
    model = record.started.model if record.started else None
    steps: list[dict[str, Any]] = []
    for message in record.opening:
        source = "system" if message.get("role") == "system" else "user"
        steps.append({"step_id": len(steps) + 1, "timestamp": _when(record.opened_at), "source": source,
                      "message": _text(message.get("content"))})  # fmt: skip
    for turn in record.turns:
        calls, results = [], []
        for item in turn.items:
            if item.type == "parse_error":
                results.append({"content": item.feedback or item.message})
            elif item.type == "file_change":
                path = item.changes[0].path if item.changes else ""
                calls.append({"tool_call_id": item.id, "function_name": "file_change", "arguments": {"path": path}})
                results.append({"source_call_id": item.id, "content": item.status})
            elif item.tool == ev.TERMINAL_TOOL:  # the screen after a turn's keystrokes: no call of its own
                results.append({"content": item.aggregated_output})
            else:
                name, arguments = item.tool or "command", {"command": item.command}
                calls.append({"tool_call_id": item.id, "function_name": name, "arguments": arguments})
                results.append({"source_call_id": item.id, "content": item.aggregated_output})
        metrics: dict[str, Any] = {"prompt_tokens": turn.input_tokens, "completion_tokens": turn.output_tokens}
        for ours, theirs in (("prompt_ids", "prompt_token_ids"), ("output_ids", "completion_token_ids")):
            if ours in turn.ids:
                metrics[theirs] = turn.ids[ours]
        if "output_logprobs" in turn.ids:
            metrics["logprobs"] = turn.ids["output_logprobs"]
        step: dict[str, Any] = {"step_id": len(steps) + 1, "timestamp": _when(turn.ts), "source": "agent",
                                "model_name": model, "message": turn.message}  # fmt: skip
        if turn.reasoning:
            step["reasoning_content"] = turn.reasoning
        if calls:
            step["tool_calls"] = calls
        if results:
            step["observation"] = {"results": results}
        steps.append({**step, "metrics": metrics})
    agent: dict[str, Any] = {"name": "oc-repl", "version": version, "model_name": model}
    if record.started:
        agent["extra"] = record.metadata()
    return {
        "schema_version": SCHEMA,
        "session_id": session_id,
        "agent": agent,
        "steps": steps,
        "final_metrics": {
            "total_prompt_tokens": record.input_tokens,
            "total_completion_tokens": record.output_tokens,
            "total_steps": len(steps),
        },
    }
