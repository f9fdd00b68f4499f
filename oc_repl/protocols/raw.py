"""raw: the bare model. One reply per task, shown as it came; tool-call markup is displayed and never run."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from oc_repl import events as ev
from oc_repl.calls import split_think
from oc_repl.errors import UsageError
from oc_repl.types import AgentProtocol, Approve, Asset, Emit, Message, Reply, Request, Sandbox, Step, Task, allow_all


def _unchanged(reply: Reply) -> str:
    """The reply as the model wrote it, minus a leading think block (that is shown as reasoning instead)."""
    text = split_think(reply.raw_content)[1] if reply.raw_content else reply.content
    for call in reply.tool_calls:
        if call.source == "native":  # the server parsed it out of the text; put it back as the model wrote it
            body = json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False)
            text += f"\n<tool_call>\n{body}\n</tool_call>"
    return text


class RawProtocol(AgentProtocol):
    name = "raw"
    needs_sandbox = False

    def __init__(self, system: str | None = None, name: str = "raw") -> None:
        self.name = name
        if system and system.startswith("@"):
            try:
                system = Path(system[1:]).expanduser().read_text(encoding="utf-8")
            except OSError as exc:
                raise UsageError(f"cannot read the system message from {system[1:]}: {exc.strerror}") from exc
        self.system = system or ""
        self._messages: list[Message] = []

    def start(self, task: Task, sandbox: Sandbox | None = None) -> None:
        self._messages = [{"role": "system", "content": self.system}] if self.system else []
        self._messages.append({"role": "user", "content": task.instruction})

    def continue_with(self, task: Task, sandbox: Sandbox | None = None) -> None:
        self._messages.append({"role": "user", "content": task.instruction})

    def request(self) -> Request:
        return Request(messages=list(self._messages), options={})

    def resume(self, messages: list[Message]) -> None:
        self._messages = list(messages)

    def step(self, reply: Reply, sandbox: Sandbox, emit: Emit, approve: Approve = allow_all) -> Step:
        text = _unchanged(reply)
        for call in reply.tool_calls:
            shown = json.dumps(call.arguments, ensure_ascii=False)
            emit(
                ev.ItemCompleted(
                    item=ev.CommandExecution(
                        id=ev.new_id(),
                        tool=f"{call.name} (not executed)",
                        command=shown,
                        aggregated_output="raw protocol: tool calls are shown, never run",
                        status="declined",
                    )
                )
            )
        self._messages.append({"role": "assistant", "content": reply.content})
        return Step(done=True, final_answer=text)

    def assets(self) -> list[Asset]:
        if not self.system:
            return []
        return [Asset("system", hashlib.sha256(self.system.encode()).hexdigest(), "user")]

    def working_directory(self, sandbox: Sandbox) -> str:
        return ""  # nothing runs

    def close(self) -> None:
        pass
