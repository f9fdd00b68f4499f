"""camel-terminal-toolkit: the protocol Qwen3-8B-OpenClaw-RL-iter215 was trained with (camel TerminalToolkit).

One system prompt, one user message per task, four tools; tool results go back in one of three history shapes:
- `training` (default): the model's own turns are dropped; every tool result so far follows the task message, as
  one user message of `<tool_response>` blocks. Under the Qwen3 template that is byte-identical to a run of
  `role: tool` messages, and servers that refuse tool messages without a preceding call accept it.
- `camel-0.2.85`: each call is its own assistant message (empty content, one call), followed by its tool result.
- `full`: standard OpenAI history: the assistant message with its content and all its calls, then one tool
  message per call.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import secrets
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Literal

from oc_repl import training
from oc_repl.errors import BadArguments, ParseErrorLimit, UsageError
from oc_repl.events import CommandExecution, FileChange, FileUpdate, ItemCompleted, ItemStarted, ParseError, new_id
from oc_repl.protocols import load_asset
from oc_repl.protocols.camel.calls import calls_and_feedback, training_calls
from oc_repl.protocols.camel.files import planned_kind
from oc_repl.protocols.camel.kind import DEVIATIONS, WIRE_ROWS
from oc_repl.protocols.camel.tools import (
    OBSERVATION_LIMIT,
    SIGNATURES,
    TOOLKIT_NOTICES,
    TOOLKIT_SPEC,
    CamelTerminalTools,
    ToolCallError,
    ToolInterrupted,
)
from oc_repl.protocols.templates import Templates
from oc_repl.rows import Deviations
from oc_repl.types import (
    AgentProtocol,
    Approve,
    Asset,
    Emit,
    Message,
    Reply,
    Request,
    Sandbox,
    Step,
    Task,
    ToolCall,
    allow_all,
)

NAME = "camel-terminal-toolkit"
HISTORY_MODES = ("training", "camel-0.2.85", "full")
AGENT_SPEC = {
    "tool_error": ("name", "type", "message"),
    "unknown_tool": ("name",),
    "parse_error": ("error", "content"),
}
NOTICES_SPEC = {
    **TOOLKIT_NOTICES,
    "cut_off": (),
    "held_back": ("name",),
    "not_a_call": ("reason", "content"),
    "no_name": (),
    "not_object": (),
    "arguments_not_object": ("tool", "got"),
    "unterminated": (),
    "interrupted": ("name", "output"),
}
CHAT_AGENT_SPEC = {"tool_result_truncated": ("name", "tokens", "limit")}
PARSE_ERROR_TOOL = "json_parse_error"  # the call the training harness put in the history for a block it could not read


def task_message(task: Task) -> Message:
    return {"role": "user", "content": f"Task name:{task.name}\nTask instruction: {task.instruction}"}


def tool_responses(results: list[str]) -> str:
    """Tool results the way the Qwen3 template renders a run of tool messages inside one user turn."""
    return "\n".join(f"<tool_response>\n{result}\n</tool_response>" for result in results)


def serialise_tools(tools: list[dict[str, Any]]) -> bytes:
    """The tool list as its sha256 is taken: one schema per line, json.dumps default separators."""
    return "\n".join(json.dumps(tool) for tool in tools).encode("utf-8")


def load_tools(data: bytes) -> list[dict[str, Any]]:
    tools = [json.loads(line) for line in data.decode("utf-8").split("\n")]
    if serialise_tools(tools) != data:
        raise UsageError("tools.json must hold one schema per line exactly as json.dumps writes it, no final newline")
    return tools


def _call_message(calls: list[ToolCall], content: str) -> Message:
    return {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False)},
            }
            for call in calls
        ],
    }


def _describe(call: ToolCall) -> str:
    """The command shown for a call in events."""
    args = call.arguments if isinstance(call.arguments, dict) else {}
    if call.name in ("shell_exec", "shell_write_to_process") and isinstance(args.get("command"), str):
        return args["command"]
    if call.name == "shell_view" and isinstance(args.get("id"), str):
        return f"view session {args['id']}"
    return f"{call.name} {json.dumps(call.arguments, ensure_ascii=False)}"


class CamelProtocol(AgentProtocol):
    name = NAME

    def __init__(
        self,
        history: Literal["training", "camel-0.2.85", "full"] = "training",
        parse_error_limit: int = 3,
        default_timeout: float = 20.0,
        workdir: str | None = None,
        observation_limit: int = OBSERVATION_LIMIT,
        name: str = NAME,
        deviations: Deviations | None = None,
        count_tokens: Callable[[str], int] | None = None,
        camel_rich: str = "14",
    ) -> None:
        self.name, self.camel_rich = name, camel_rich
        if history not in HISTORY_MODES:
            raise UsageError(f"unknown history mode {history!r}; known: {', '.join(HISTORY_MODES)}")
        if parse_error_limit < 1 or default_timeout <= 0:
            raise UsageError("parse_error_limit must be at least 1 and default_timeout positive")
        self.history = history
        self.parse_error_limit = parse_error_limit
        self.default_timeout = default_timeout
        self.workdir = workdir
        self.observation_limit = observation_limit
        self.deviations = deviations or Deviations(DEVIATIONS)  # its own defaults, without a run
        system, self._system_asset = load_asset(name, "system.txt")
        self._system = system.decode("utf-8")
        tools, self._tools_asset = load_asset(name, "tools.json")
        self._tools = load_tools(tools)
        self.toolkit = Templates.load(name, "toolkit.toml", TOOLKIT_SPEC)
        self.agent = Templates.load(name, "agent.toml", AGENT_SPEC)
        self.notices = Templates.load(name, "notices.toml", NOTICES_SPEC)
        # camel's own cut of a long tool result, by the model's tokens: upstream's, where the project's cut is off
        self.count_tokens = count_tokens if not self.deviations.results_cut else None
        self.chat_agent = Templates.load(name, "chat_agent.toml", CHAT_AGENT_SPEC) if self.count_tokens else None
        self._messages: list[Message] = []
        self._results: list[tuple[str, str]] = []  # training mode: (call id, result) since the last message
        self._parse_errors = 0
        self._toolbox: CamelTerminalTools | None = None
        self._ids = itertools.count(1)

    # --- conversation -------------------------------------------------------------------------------------------

    def start(self, task: Task, sandbox: Sandbox | None = None) -> None:
        self._messages = [{"role": "system", "content": self._system}, task_message(task)]
        self._results = []
        self._parse_errors = 0

    def continue_with(self, task: Task, sandbox: Sandbox | None = None) -> None:
        if not self._messages:
            self.start(task)
            return
        self._flush_results()
        self._messages.append(task_message(task))
        self._parse_errors = 0

    def request(self) -> Request:
        return Request(messages=self._messages + self._pending(), options={"tools": self._tools, "tool_choice": "auto"})

    def resume(self, messages: list[Message]) -> None:
        self._messages, self._results, self._parse_errors = list(messages), [], 0

    def assets(self) -> list[Asset]:
        found = [self._system_asset, self._tools_asset, self.toolkit.asset, self.agent.asset]
        if self.chat_agent is not None:
            found.append(self.chat_agent.asset)
        # The notices are the words of the deviations; with none in force (--exact, whatever the wire leaves) what is
        # left of them (a person's refusal, a write under a path through a file, where the docker daemon's answer
        # names a path in its own storage) has no upstream copy to be checked against. The turn cap --exact accepts
        # is the run's budget, not a text the model reads.
        if set(self.deviations.names()) - {row.name for row in WIRE_ROWS} - {"own_turn_cap"}:
            found.append(self.notices.asset)
        return [copy.copy(asset) for asset in found if asset is not None]

    def working_directory(self, sandbox: Sandbox) -> str:
        """As trained: /workspace in a container (or --workdir), the sandbox directory on local:."""
        return self.workdir or sandbox.workdir

    def close(self) -> None:
        """Kill the sessions the model started (the loop's caller does this when the conversation ends)."""
        if self._toolbox is not None:
            self._toolbox.close_sessions()

    # --- one turn -----------------------------------------------------------------------------------------------

    def step(self, reply: Reply, sandbox: Sandbox, emit: Emit, approve: Approve = allow_all) -> Step:
        # A cut reply gets the project's notice and any other reply the project's naming of its unreadable blocks,
        # each while its deviation is on; otherwise the training harness's rules decide what runs.
        d = self.deviations
        if reply.non_object_calls and not d.arguments_read_as_objects:
            # camel's batch of calls refused them (pydantic wants an object) and training's generate() ended the
            # rollout: no call ran, no next request
            raise BadArguments(
                f"a call's arguments were no JSON object ({reply.non_object_calls[0][:200]}): training's harness "
                "ended the episode there"
            )
        if d.cut_reply_noticed if reply.cut_off else d.unreadable_calls_named:
            calls, feedback = calls_and_feedback(reply, self.agent, self.notices)
            for text in feedback:
                emit(ItemCompleted(item=ParseError(id=new_id(), message=text.split("\n", 1)[0], feedback=text)))
            if feedback:  # the limit counts replies, as training did: one unreadable reply is one strike
                self._count_parse_error()
        else:  # the training harness's rules
            calls, unreadable = training_calls(reply)
            if unreadable is not None:
                self._training_parse_error(*unreadable, emit)
                return Step()
            feedback = []
        if not calls and not feedback:
            self._flush_results()
            self._messages.append({"role": "assistant", "content": reply.content})
            return Step(done=True, final_answer=reply.content)
        tools = self._tools_for(sandbox)
        calls = [call if call.id else replace(call, id=f"call_{next(self._ids)}") for call in calls]
        results: list[str] = []
        try:
            for call in calls:
                results.append(self._as_recorded(call.name, self._run(call, tools, emit, approve)))
        except ToolInterrupted as exc:  # the user stopped a call: the model learns what it printed, then the turn ends
            name = calls[len(results)].name
            told = self.deviations.interruption_told
            results.append(self.notices.render("interrupted", name=name, output=exc.output) if told else exc.output)
            self._record(reply, calls[: len(results)], results, feedback)
            raise exc.reason from None
        self._record(reply, calls, results, feedback)
        if self._waiting(calls, tools):
            return Step()  # looking at a job that is still running is waiting, not looping: no fingerprint
        payload = [[call.name, call.arguments, result] for call, result in zip(calls, results, strict=True)] + feedback
        fingerprint = hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()
        return Step(fingerprint=fingerprint)

    def _as_recorded(self, name: str, result: str) -> str:
        """A tool result as camel's agent put it in its memory: cut past its token budget (training.py)."""
        if self.count_tokens is None or self.chat_agent is None:
            return result
        notice = self.chat_agent.render

        def told(tokens: int, limit: int) -> str:
            return notice("tool_result_truncated", name=name, tokens=tokens, limit=limit)

        return training.camel_result_cut(result, self.count_tokens, told)

    @staticmethod
    def _waiting(calls: list[ToolCall], tools: CamelTerminalTools) -> bool:
        """Every call only looked at a session, and one of them is still running."""
        views = [call.arguments.get("id") for call in calls if call.name == "shell_view"]
        return len(views) == len(calls) and any(tools.running(id) for id in views)

    def _training_parse_error(self, error: str, block: str, emit: Emit) -> None:
        """As the training harness answered an unreadable block: a call of its own naming the block, and its result."""
        text = self.agent.render("parse_error", error=error, content=block[:200])
        emit(ItemCompleted(item=ParseError(id=new_id(), message=error, feedback=text)))
        self._count_parse_error()
        call_id = f"error_{secrets.token_hex(4)}"
        arguments = json.dumps({"raw_content": block[:200], "error": error}, ensure_ascii=False)
        self._flush_results()
        self._messages.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"id": call_id, "type": "function", "function": {"name": PARSE_ERROR_TOOL, "arguments": arguments}}
                ],
            }
        )
        self._results.append((call_id, text))

    def _tools_for(self, sandbox: Sandbox) -> CamelTerminalTools:
        if self._toolbox is None or self._toolbox.sandbox is not sandbox:
            self.close()
            self._toolbox = CamelTerminalTools(
                sandbox,
                self.toolkit,
                self.notices,
                workdir=self.workdir,
                default_timeout=self.default_timeout,
                observation_limit=self.observation_limit,
                deviations=self.deviations,
                camel_rich=self.camel_rich,
            )
        return self._toolbox

    def _count_parse_error(self) -> None:
        self._parse_errors += 1
        if self._parse_errors >= self.parse_error_limit:
            raise ParseErrorLimit(f"{self._parse_errors} replies could not be parsed in this task")

    def _run(self, call: ToolCall, tools: CamelTerminalTools, emit: Emit, approve: Approve) -> str:
        item_id = new_id()
        args = call.arguments if isinstance(call.arguments, dict) else {}
        path = args.get("file_path")
        if call.name == "shell_write_content_to_file" and isinstance(path, str):
            planned = FileUpdate(path=path, kind=planned_kind(tools, path))
            emit(ItemStarted(item=FileChange(id=item_id, changes=[planned], status="in_progress")))
            result = self._call(call, tools, approve)
            if result is None or isinstance(result, str):
                text = result or ""
                emit(ItemCompleted(item=FileChange(id=item_id, changes=[planned], status="failed", reason=text)))
                return text
            if result.status in ("failed", "declined"):
                change = FileChange(id=item_id, changes=[planned], status=result.status, reason=result.text)
            else:
                done = FileUpdate(path=result.path or path, kind="add" if result.created else "update")
                change = FileChange(id=item_id, changes=[done], status="completed")
            emit(ItemCompleted(item=change))
            return result.text
        command = _describe(call)
        emit(ItemStarted(item=CommandExecution(id=item_id, tool=call.name, command=command)))
        try:
            result = self._call(call, tools, approve)
        except ToolInterrupted as exc:  # what it printed before it was stopped is shown, too
            stopped = CommandExecution(id=item_id, tool=call.name, command=command, aggregated_output=exc.output)
            stopped.status = "failed"
            emit(ItemCompleted(item=stopped))
            raise
        if isinstance(result, str):
            item = CommandExecution(id=item_id, tool=call.name, command=command, aggregated_output=result)
            item.status = "failed"
        else:
            ran = call.name in ("shell_exec", "shell_write_to_process")  # as it ran, after the person edited it
            shown = result.command if result.command and ran else command
            item = CommandExecution(
                id=item_id,
                tool=call.name,
                command=shown,
                aggregated_output=result.text,
                exit_code=result.exit_code,
                status=result.status,
            )
        emit(ItemCompleted(item=item))
        return item.aggregated_output

    def _call(self, call: ToolCall, tools: CamelTerminalTools, approve: Approve) -> Any:
        """The tool's result, or the harness's error text when the call itself cannot be made."""
        if call.name not in SIGNATURES:
            return self.agent.render("unknown_tool", name=call.name)
        try:
            return tools.call(call.name, call.arguments, approve)
        except ToolCallError as exc:
            return self.agent.render("tool_error", name=call.name, type=exc.type_name, message=exc.message)

    def _record(self, reply: Reply, calls: list[ToolCall], results: list[str], feedback: list[str]) -> None:
        if self.history == "training":
            self._results.extend([(call.id, result) for call, result in zip(calls, results, strict=True)])
            self._results.extend(("", text) for text in feedback)
            return
        if self.history == "camel-0.2.85":
            for call, result in zip(calls, results, strict=True):
                self._messages.append(_call_message([call], ""))
                self._messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        else:
            if calls:
                self._messages.append(_call_message(calls, reply.content))
            else:
                self._messages.append({"role": "assistant", "content": reply.content})
            for call, result in zip(calls, results, strict=True):
                self._messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        if feedback:
            self._messages.append({"role": "user", "content": tool_responses(feedback)})

    def _pending(self) -> list[Message]:
        """The results not yet followed by another message. After an assistant tool call they go as tool messages;
        otherwise as one user message of `<tool_response>` blocks, the same tokens under the Qwen3 template, which
        servers accept where a tool message with no call before it would be refused."""
        if not self._results:
            return []
        if self._messages and self._messages[-1].get("tool_calls"):
            return [{"role": "tool", "tool_call_id": call_id, "content": text} for call_id, text in self._results]
        return [{"role": "user", "content": tool_responses([text for _, text in self._results])}]

    def _flush_results(self) -> None:
        self._messages.extend(self._pending())
        self._results = []
