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
from dataclasses import replace
from typing import Any, Literal

from oc_repl.errors import ParseErrorLimit, UsageError
from oc_repl.events import CommandExecution, FileChange, FileUpdate, ItemCompleted, ItemStarted, ParseError, new_id
from oc_repl.protocols import load_asset
from oc_repl.protocols.camel_tools import OBSERVATION_LIMIT, CamelTerminalTools
from oc_repl.types import Asset, Emit, Message, Reply, Request, Sandbox, Step, Task, ToolCall

NAME = "camel-terminal-toolkit"
HISTORY_MODES = ("training", "camel-0.2.85", "full")

TRUNCATED = (
    "[TOOL_ERROR] reply cut off: the reply reached the token limit before it ended, so none of its tool calls "
    "ran. Keep the reasoning short, and write long content to files in smaller pieces."
)


def task_message(task: Task) -> Message:
    return {"role": "user", "content": f"Task name:{task.name}\nTask instruction: {task.instruction}"}


def tool_responses(results: list[str]) -> str:
    """Tool results the way the Qwen3 template renders a run of tool messages inside one user turn."""
    return "\n".join(f"<tool_response>\n{result}\n</tool_response>" for result in results)


def parse_error_text(block: str) -> str:
    """What the model is told about a <tool_call> block whose JSON does not parse."""
    body = block.strip().removeprefix("<tool_call>").removesuffix("</tool_call>").strip()
    try:
        parsed = json.loads(body)
        reason = "the block is not a tool call"
        if isinstance(parsed, dict) and "name" not in parsed:
            reason = 'the JSON object has no "name"'
        elif isinstance(parsed, dict):  # a readable call held back because a sibling in the same reply was not
            return (
                f"[TOOL_ERROR] {parsed['name']}: not run, because another tool call in the same reply could not be "
                "read and none of the reply's calls ran. Send the calls again, each with valid JSON arguments."
            )
    except json.JSONDecodeError as exc:
        reason = f"invalid JSON: {exc}"
    return (
        f"[TOOL_ERROR] tool call not understood ({reason}).\n"
        'A tool call must be one JSON object: {"name": "<tool name>", "arguments": {...}}, with every quote, '
        "backslash and newline inside its strings escaped.\n"
        f"Start of the block (200 characters at most): {block[:200]}"
    )


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


class CamelProtocol:
    name = NAME

    def __init__(
        self,
        history: Literal["training", "camel-0.2.85", "full"] = "training",
        parse_error_limit: int = 3,
        relative_paths: Literal["workdir", "root"] = "workdir",
        default_timeout: float = 20.0,
        workdir: str | None = None,
        observation_limit: int = OBSERVATION_LIMIT,
        name: str = NAME,
    ) -> None:
        self.name = name
        if history not in HISTORY_MODES:
            raise UsageError(f"unknown history mode {history!r}; known: {', '.join(HISTORY_MODES)}")
        if relative_paths not in ("workdir", "root"):
            raise UsageError(f"relative_paths must be 'workdir' or 'root', not {relative_paths!r}")
        if parse_error_limit < 1 or default_timeout <= 0:
            raise UsageError("parse_error_limit must be at least 1 and default_timeout positive")
        self.history = history
        self.parse_error_limit = parse_error_limit
        self.relative_paths = relative_paths
        self.default_timeout = default_timeout
        self.workdir = workdir
        self.observation_limit = observation_limit
        system, self._system_asset = load_asset(name, "system.txt")
        self._system = system.decode("utf-8")
        tools, self._tools_asset = load_asset(name, "tools.json")
        self._tools = load_tools(tools)
        self._messages: list[Message] = []
        self._results: list[str] = []  # training mode: the results since the last user message
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
        messages = list(self._messages)
        if self._results:
            messages.append({"role": "user", "content": tool_responses(self._results)})
        return Request(messages=messages, options={"tools": self._tools, "tool_choice": "auto"})

    def assets(self) -> list[Asset]:
        return [copy.copy(self._system_asset), copy.copy(self._tools_asset)]

    def close(self) -> None:
        """Kill the sessions the model started (the loop's caller does this when the conversation ends)."""
        if self._toolbox is not None:
            self._toolbox.close_sessions()

    # --- one turn -----------------------------------------------------------------------------------------------

    def step(self, reply: Reply, sandbox: Sandbox, emit: Emit) -> Step:
        if reply.cut_off:
            calls: list[ToolCall] = []
            feedback = [TRUNCATED]
        else:
            calls = list(reply.tool_calls)
            feedback = [parse_error_text(block) for block in reply.malformed_calls]
        for text in feedback:
            self._report_parse_error(text, emit)
        if feedback:  # the limit counts replies, as training did: one unreadable reply is one strike
            self._count_parse_error()
        if not calls and not feedback:
            self._flush_results()
            self._messages.append({"role": "assistant", "content": reply.content})
            return Step(done=True, final_answer=reply.content)
        tools = self._tools_for(sandbox)
        calls = [call if call.id else replace(call, id=f"call_{next(self._ids)}") for call in calls]
        results = [self._run(call, tools, emit) for call in calls]
        self._record(reply, calls, results, feedback)
        payload = [[call.name, call.arguments, result] for call, result in zip(calls, results, strict=True)] + feedback
        fingerprint = hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()
        return Step(parse_error=bool(feedback), fingerprint=fingerprint)

    def _tools_for(self, sandbox: Sandbox) -> CamelTerminalTools:
        if self._toolbox is None or self._toolbox.sandbox is not sandbox:
            self.close()
            self._toolbox = CamelTerminalTools(
                sandbox,
                workdir=self.workdir,
                default_timeout=self.default_timeout,
                relative_paths=self.relative_paths,
                observation_limit=self.observation_limit,
            )
        return self._toolbox

    def _report_parse_error(self, feedback: str, emit: Emit) -> None:
        message = "reply cut off at the token limit" if feedback is TRUNCATED else feedback.split("\n", 1)[0]
        emit(ItemCompleted(item=ParseError(id=self._item_id(), message=message, feedback=feedback)))

    def _count_parse_error(self) -> None:
        self._parse_errors += 1
        if self._parse_errors >= self.parse_error_limit:
            raise ParseErrorLimit(f"{self._parse_errors} replies could not be parsed in this task")

    def _run(self, call: ToolCall, tools: CamelTerminalTools, emit: Emit) -> str:
        item_id = self._item_id()
        path = call.arguments.get("file_path") if isinstance(call.arguments, dict) else None
        if call.name == "shell_write_content_to_file" and isinstance(path, str):
            emit(ItemStarted(item=FileChange(id=item_id, changes=[FileUpdate(path=path)], status="in_progress")))
            result = tools.call(call.name, call.arguments)
            kind = "add" if result.created else "update"
            status = result.status if result.status in ("failed", "declined") else "completed"
            change = FileUpdate(path=result.path or path, kind=kind)
            emit(ItemCompleted(item=FileChange(id=item_id, changes=[change], status=status)))
            return result.text
        command = _describe(call)
        emit(ItemStarted(item=CommandExecution(id=item_id, tool=call.name, command=command)))
        result = tools.call(call.name, call.arguments)
        item = CommandExecution(
            id=item_id,
            tool=call.name,
            command=command,
            aggregated_output=result.text,
            exit_code=result.exit_code,
            status=result.status,
        )
        emit(ItemCompleted(item=item))
        return result.text

    def _record(self, reply: Reply, calls: list[ToolCall], results: list[str], feedback: list[str]) -> None:
        if self.history == "training":
            self._results.extend(results + feedback)
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

    def _flush_results(self) -> None:
        if self._results:
            self._messages.append({"role": "user", "content": tool_responses(self._results)})
            self._results = []

    def _item_id(self) -> str:
        return new_id()
