"""Typed events: the one contract between the core and every renderer, the transcript and the shell.

Schema `oc-repl/1` (named in `thread.started`; its JSON Schema is events.schema.json beside this file). Names follow
`codex exec --json` where the two share a meaning, so its readers work on the common part: `thread.started`,
`turn.started`, `turn.completed` (`usage`), `turn.failed` (`error.message`), `item.started|completed` with items
`agent_message`, `reasoning`, `command_execution` and `file_change`, and `error` (`message`). oc-repl adds fields
(`ts`, turn numbers, `kind`, ...), statuses (`timed_out`), an item type (`parse_error`), events of its own
(`request.sent`, `response.received`, `verify.completed`, `thread.completed`), and its `item.updated` carries a text
`delta` where Codex repeats the whole item. The README's "Transcripts" section states the mapping.

Events are plain dataclasses, cheap to build on the hot path; pydantic only reads them back (event_read.py).
"""

from __future__ import annotations

import itertools
import time
from dataclasses import field
from typing import Any, Literal, Union

from oc_repl.event_json import json_text, to_dict, to_json
from oc_repl.record import Record, record

__all__ = ["json_text", "to_dict", "to_json"]  # with the event types: how an event becomes a transcript line

SCHEMA = "oc-repl/1"
_ids = itertools.count(1)


def new_id() -> str:
    """Item ids are unique within the process: the loop and every protocol draw from the same counter."""
    return f"item_{next(_ids)}"


def _now() -> float:
    return round(time.time(), 3)


event = record(kw_only=True)


# --- items ---------------------------------------------------------------------------------------------------------


@event
class AgentMessage(Record):
    """What the model says in a turn, apart from its reasoning and its actions."""

    type: Literal["agent_message"] = "agent_message"
    id: str
    text: str = ""


@event
class Reasoning(Record):
    """The model's thinking (Qwen3's <think> block, or a server's reasoning_content)."""

    type: Literal["reasoning"] = "reasoning"
    id: str
    text: str = ""


CommandStatus = Literal["in_progress", "completed", "failed", "timed_out", "declined"]


# The tool name of a terminal observation: the screen shown to a model that watches a terminal (terminus), an item of
# its own after the turn's keystrokes, not an action of the model.
TERMINAL_TOOL = "terminal"


@event
class CommandExecution(Record):
    """One action of the model in the sandbox: a command, keystrokes or a file operation."""

    type: Literal["command_execution"] = "command_execution"
    id: str
    tool: str = ""  # the protocol-level action, e.g. shell_exec or keystrokes
    command: str = ""  # as it ran, after the person watching edited it
    aggregated_output: str = ""
    exit_code: int | None = None
    status: CommandStatus = "in_progress"
    screen: str | None = None  # a terminal's whole visible screen after it (terminus), for recordings


@event
class FileUpdate(Record):
    """One file a file_change touched."""

    path: str
    kind: Literal["add", "delete", "update"] = "update"


@event
class FileChange(Record):
    """Files the model wrote through a protocol's file tool."""

    type: Literal["file_change"] = "file_change"
    id: str
    changes: list[FileUpdate]
    status: Literal["in_progress", "completed", "failed", "declined"] = "completed"
    reason: str = ""  # why a write failed or was declined: what the model was told


@event
class ParseError(Record):
    """A reply the protocol could not read; `feedback` is what the model is told instead."""

    type: Literal["parse_error"] = "parse_error"
    id: str
    message: str
    feedback: str = ""  # what the model is told


Item = Union[AgentMessage, Reasoning, CommandExecution, FileChange, ParseError]  # noqa: UP007 (pydantic reads it)


@event
class AssetInfo(Record):
    """One model-facing text asset: its name, sha256 and where it came from (built-in, upstream or user)."""

    name: str
    sha256: str
    source: str
    path: str = ""


@event
class Isolation(Record):
    """What holds the model's commands in, as in force when the thread starts, whatever set it (a flag, the
    environment, the config file, a fallback). Empty fields: not known (a thread without a sandbox)."""

    confinement: str = ""  # bubblewrap | none (commands run as the user, on this host) | container | harbor
    network: str = ""  # none | host | bridge | a docker network's name | harbor's mode (public, allowlist)
    # oc-repl (set on what it created) | container (an attached one's own) | harbor | none; for local: what holds
    # them: cgroup v1 | cgroup v2 | rlimit | none
    limits: str = ""
    max_processes: int | None = None  # None: no such limit
    memory_mb: int | None = None  # memory, swap included
    cpus: float | None = None


@event
class UsageInfo(Record):
    """Token counts of one turn, as the server reported them."""

    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0


@event
class ItemRef(Record):
    """Names the item an item.updated delta belongs to."""

    id: str
    type: str


@event
class ErrorInfo(Record):
    """Why a turn failed."""

    message: str


# --- events --------------------------------------------------------------------------------------------------------


@event
class ThreadStarted(Record):
    """A conversation begins: the model, protocol, sandbox and assets it runs with."""

    type: Literal["thread.started"] = "thread.started"
    ts: float = field(default_factory=_now)
    schema: str = SCHEMA
    thread_id: str
    model: str
    protocol: str
    sandbox: str
    api_base: str
    task_name: str = ""
    task: str = ""  # the instruction given
    workdir: str = ""  # where the model's commands start
    exact: bool = False
    wire: str = "chat"  # chat | completions | generate
    prompt: str = ""  # what a text wire sends: "token ids", or "text" (no tokenizer); "" on the chat wire
    deviations: list[str] = field(default_factory=list)  # the names of those in force (oc_repl/deviations.py)
    assets: list[AssetInfo] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)
    attempt: int = 1  # with `run --attempts N`: which of the attempts this thread is
    isolation: Isolation = field(default_factory=Isolation)  # the sandbox's confinement, network and limits
    # seconds spent before the thread started, by what they went to: "sandbox" (opened), "baseline" (the verifier's
    # look before the agent), "server" (the model's name and what it serves, asked of the server)
    startup: dict[str, float] = field(default_factory=dict)
    # a transcript's format from here on (oc_repl/transcript_delta.py); none in format 1 and outside transcripts
    transcript: int | None = None


@event
class TurnStarted(Record):
    """A model turn begins."""

    type: Literal["turn.started"] = "turn.started"
    ts: float = field(default_factory=_now)
    turn: int
    max_turns: int


@event
class RequestSent(Record):
    """The request of a turn (the API key is never in it): the protocol's messages and options, and `body`, what
    went on the wire: `{"wire", "route", "json": the body posted, "prompt_tokens", "cut"}` (on the chat wire the
    body's messages are left out when they are the request's own). A transcript may write `request` and `body` as
    `{"$edit": [head, middle, tail]}`, an edit of the thread's previous request (oc_repl/transcript_delta.py); its
    readers give them whole."""

    type: Literal["request.sent"] = "request.sent"
    ts: float = field(default_factory=_now)
    turn: int
    attempt: int = 1
    request: dict[str, Any]
    body: dict[str, Any] = field(default_factory=dict)


@event
class ResponseReceived(Record):
    """The server's reply, whole, as received."""

    type: Literal["response.received"] = "response.received"
    ts: float = field(default_factory=_now)
    turn: int
    raw: dict[str, Any]


@event
class ItemStarted(Record):
    """An item (message, reasoning, command, ...) begins."""

    type: Literal["item.started"] = "item.started"
    ts: float = field(default_factory=_now)
    item: Item


@event
class ItemUpdated(Record):
    """A streamed fragment of an item's text (`delta`), as it arrives. Kept out of transcripts, which hold every raw
    reply whole."""

    type: Literal["item.updated"] = "item.updated"
    ts: float = field(default_factory=_now)
    item: ItemRef
    delta: str


@event
class ItemCompleted(Record):
    """An item ends, whole."""

    type: Literal["item.completed"] = "item.completed"
    ts: float = field(default_factory=_now)
    item: Item


@event
class TurnCompleted(Record):
    """A model turn ends, with its usage and speed."""

    type: Literal["turn.completed"] = "turn.completed"
    ts: float = field(default_factory=_now)
    turn: int
    usage: UsageInfo = field(default_factory=UsageInfo)
    finish_reason: str = ""
    truncated: bool = False
    ttft_s: float | None = None
    tokens_per_s: float | None = None
    duration_s: float = 0.0  # the request's attempt that answered
    request_s: float = 0.0  # the whole request: every attempt (a stalled or refused one too) and the waits between
    attempts_s: list[float] = field(default_factory=list)  # each attempt's seconds, in order


@event
class TurnFailed(Record):
    """A turn ends without a usable reply."""

    type: Literal["turn.failed"] = "turn.failed"
    ts: float = field(default_factory=_now)
    turn: int
    error: ErrorInfo


FindingKind = Literal[
    "verifier_file",  # /tests, /logs: the verifier's own places
    "import_hook",  # conftest.py, sitecustomize/usercustomize, *.pth
    "entry_point",  # a pytest11 entry point: a plugin pytest loads by itself
    "shadowed_module",  # a module found before the one the verifier means to import
    "python_path",  # anything else under a Python's sys.path: the standard library, pytest and what it imports
    "bytecode",  # compiled Python the import system would load instead of its source
    "pytest_config",
    "executable",  # on the verifier's PATH
    "loader",  # the dynamic loader's configuration and libraries
    "shell_startup",  # what a shell reads as it starts (/etc/profile, ~/.bashrc, $HOME/.local/bin/env, BASH_ENV)
    "process",  # left running
    "verdict",  # pytest's record disagrees with how its process ended
    "vcs",  # a version-control directory made in a local sandbox: its hooks run on the host
]


@event
class Finding(Record):
    """Something the agent created, changed or left running that can sway tests. `affects_tests` findings make the
    run `tampered`; the others (a package pip installed, a server left running) are informational."""

    kind: FindingKind
    path: str = ""  # the file, or a process's command line
    pid: int | None = None  # a process's, as the sandbox saw it
    detail: str = ""
    affects_tests: bool = False


@event
class VerifyCompleted(Record):
    """The verifier ran: its result is the outcome, whatever the model claimed."""

    type: Literal["verify.completed"] = "verify.completed"
    ts: float = field(default_factory=_now)
    command: str
    passed: bool
    exit_code: int | None
    tests_passed: int | None = None
    tests_total: int | None = None
    failed_tests: list[str] = field(default_factory=list)
    output_tail: str = ""
    timed_out: bool = False
    reward: float | None = None  # what a Harbor task's tests wrote to /logs/verifier (1 = resolved)
    findings: list[Finding] = field(default_factory=list)  # what the agent tried (see oc_repl/tasks/evidence.py)
    sealed: bool = False  # the verifier's files and processes were out of reach of what the agent left running
    evidence: str = ""  # what the change set was taken with; "unavailable: why" when it could not be


@event
class ThreadCompleted(Record):
    """The run ends: the outcome, its exit code and where the transcript is."""

    type: Literal["thread.completed"] = "thread.completed"
    ts: float = field(default_factory=_now)
    status: str  # an oc_repl.outcome.Status value
    exit_code: int
    final_answer: str = ""
    turns: int = 0
    tool_calls_native: int = 0  # in this task
    tool_calls_salvaged: int = 0
    kept_container: str = ""  # a container left running on purpose (--keep)
    transcript: str = ""  # where this run's transcript is
    attempt: int = 1  # with `run --attempts N`: the attempt this outcome belongs to
    attempts: int = 1  # how many attempts were allowed
    sandbox_calls: int = 0  # calls made into the sandbox during the thread (oc_repl/sandbox/meter.py)
    sandbox_seconds: float = 0.0  # the time spent in them


@event
class ConversationSaved(Record):
    """Where a shell conversation stands after a task, so that `oc-repl resume` can take it up: the messages the
    protocol would send next (before a new task), and how to reach the same sandbox again."""

    type: Literal["conversation.saved"] = "conversation.saved"
    ts: float = field(default_factory=_now)
    thread_id: str
    protocol: str
    sandbox: str  # local:<absolute directory> or docker:<container>; "" for a conversation that needs none
    messages: list[dict[str, Any]]
    tasks: int = 0  # tasks run in this conversation


@event
class Error(Record):
    """A fault outside the model's control (server, sandbox, settings), possibly retried."""

    type: Literal["error"] = "error"
    ts: float = field(default_factory=_now)
    kind: str
    message: str
    hint: str = ""
    retrying: bool = False


Event = Union[  # noqa: UP007 (pydantic reads it)
    ThreadStarted,
    TurnStarted,
    RequestSent,
    ResponseReceived,
    ItemStarted,
    ItemUpdated,
    ItemCompleted,
    TurnCompleted,
    TurnFailed,
    VerifyCompleted,
    ThreadCompleted,
    ConversationSaved,
    Error,
]
