"""Typed events: the one contract between the core and every renderer, the transcript and the REPL.

Names follow `codex exec --json` (`thread.started`, `item.completed`, ...) so existing readers work;
`request.sent` / `response.received` carry the exact wire traffic for the transcript.
"""

from __future__ import annotations

import itertools
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, TypeAdapter

_ids = itertools.count(1)


def new_id() -> str:
    """Item ids are unique within the process: the loop and every protocol draw from the same counter."""
    return f"item_{next(_ids)}"


class _Model(BaseModel):
    model_config = {"extra": "forbid"}


class AgentMessage(_Model):
    id: str
    type: Literal["agent_message"] = "agent_message"
    text: str = ""


class Reasoning(_Model):
    id: str
    type: Literal["reasoning"] = "reasoning"
    text: str = ""


class CommandExecution(_Model):
    id: str
    type: Literal["command_execution"] = "command_execution"
    tool: str = ""  # the protocol-level action, e.g. shell_exec or keystrokes
    command: str = ""
    aggregated_output: str = ""
    exit_code: int | None = None
    status: Literal["in_progress", "completed", "failed", "timed_out", "declined"] = "in_progress"


class FileUpdate(_Model):
    path: str
    kind: Literal["add", "delete", "update"] = "update"


class FileChange(_Model):
    id: str
    type: Literal["file_change"] = "file_change"
    changes: list[FileUpdate]
    status: Literal["in_progress", "completed", "failed", "declined"] = "completed"


class ParseError(_Model):
    id: str
    type: Literal["parse_error"] = "parse_error"
    message: str
    feedback: str = ""  # what the model is told


Item = Annotated[AgentMessage | Reasoning | CommandExecution | FileChange | ParseError, Field(discriminator="type")]


class AssetInfo(_Model):
    name: str
    sha256: str
    source: str
    path: str = ""


class UsageInfo(_Model):
    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0


class ThreadStarted(_Model):
    type: Literal["thread.started"] = "thread.started"
    thread_id: str
    model: str
    protocol: str
    sandbox: str
    api_base: str
    task_name: str = ""
    exact: bool = False
    assets: list[AssetInfo] = []
    options: dict[str, Any] = {}


class TurnStarted(_Model):
    type: Literal["turn.started"] = "turn.started"
    turn: int
    max_turns: int


class RequestSent(_Model):
    type: Literal["request.sent"] = "request.sent"
    turn: int
    attempt: int = 1
    request: dict[str, Any]


class ResponseReceived(_Model):
    type: Literal["response.received"] = "response.received"
    turn: int
    raw: dict[str, Any]


class ItemStarted(_Model):
    type: Literal["item.started"] = "item.started"
    item: Item


class ItemRef(_Model):
    id: str
    type: str


class ItemUpdated(_Model):
    """A streamed fragment of an item's text, as it arrives (`item` names the item; `delta` is the new text).
    Kept out of transcripts, which hold every raw reply whole."""

    type: Literal["item.updated"] = "item.updated"
    item: ItemRef
    delta: str


class ItemCompleted(_Model):
    type: Literal["item.completed"] = "item.completed"
    item: Item


class TurnCompleted(_Model):
    type: Literal["turn.completed"] = "turn.completed"
    turn: int
    usage: UsageInfo = UsageInfo()
    finish_reason: str = ""
    truncated: bool = False
    ttft_s: float | None = None
    tokens_per_s: float | None = None
    duration_s: float = 0.0


class VerifyCompleted(_Model):
    type: Literal["verify.completed"] = "verify.completed"
    command: str
    passed: bool
    exit_code: int | None
    tests_passed: int | None = None
    tests_total: int | None = None
    failed_tests: list[str] = []
    output_tail: str = ""
    timed_out: bool = False


class ThreadCompleted(_Model):
    type: Literal["thread.completed"] = "thread.completed"
    status: str  # verified | done | verify_failed | turn_cap | loop | parse_errors | server_error | sandbox_error | ...
    exit_code: int
    final_answer: str = ""
    turns: int = 0
    tool_calls_native: int = 0
    tool_calls_salvaged: int = 0
    kept_container: str = ""  # a container left running on purpose (--keep)


class Error(_Model):
    type: Literal["error"] = "error"
    kind: str
    message: str
    hint: str = ""
    retrying: bool = False


Event = Annotated[
    ThreadStarted
    | TurnStarted
    | RequestSent
    | ResponseReceived
    | ItemStarted
    | ItemUpdated
    | ItemCompleted
    | TurnCompleted
    | VerifyCompleted
    | ThreadCompleted
    | Error,
    Field(discriminator="type"),
]

EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)


def parse_event(line: str | bytes) -> Event:
    return EVENT_ADAPTER.validate_json(line)
