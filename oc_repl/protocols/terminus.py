"""terminus-json / terminus-xml: terminal-bench's Terminus-2 agent, driving a persistent terminal by keystrokes.

No system message and no tools: the first user message is the filled template, each later one the observation
(or feedback), and the whole history is kept. Completion needs two `task_complete` replies in a row; commands in
a reply are run before its completion claim is considered, as upstream does.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from typing import Literal

from oc_repl import events as ev
from oc_repl.errors import UsageError
from oc_repl.protocols import load_asset
from oc_repl.protocols.terminus_parse import (
    Format,
    Parsed,
    feedback_confirm,
    feedback_length_overflow,
    feedback_observation,
    feedback_parse_error,
    feedback_warnings,
    limit_output,
    parse_json,
    parse_xml,
    salvage_xml,
    strip_think,
)
from oc_repl.sandbox.terminal import MAX_WAIT, Terminal, TmuxTerminal, private_socket
from oc_repl.types import Asset, Emit, Message, Reply, Request, Sandbox, Step, Task, approve

Wait = Literal["detect", "exact"]


class TerminusProtocol:
    fmt: Format = "json"
    name = "terminus-json"

    def __init__(self, wait: Wait = "detect", name: str | None = None) -> None:
        self.name = name or type(self).name
        self.wait = wait
        template, self._asset = load_asset(self.name, "prompt.txt")
        self._template = template.decode("utf-8")
        self._parse = parse_json if self.fmt == "json" else parse_xml
        self._messages: list[Message] = []
        self._pending_completion = False
        self._terminal: Terminal | None = None

    # --- conversation -------------------------------------------------------------------------------------------

    def _terminal_for(self, sandbox: Sandbox | None) -> Terminal:
        if self._terminal is None or self._terminal.sandbox is not sandbox:
            if sandbox is None:
                raise ValueError("a terminus protocol needs the sandbox when it starts")
            self.close()
            # As upstream: the shell starts in the image's WORKDIR; locally, on a tmux server of our own.
            cwd = getattr(sandbox, "image_workdir", None) or sandbox.workdir
            # tmux where the sandbox has it, as upstream runs; else a pty with the screen kept here.
            # OC_REPL_TERMINAL=tmux|pty forces one.
            choice = os.environ.get("OC_REPL_TERMINAL") or "auto"
            if choice not in ("auto", "tmux", "pty"):
                raise UsageError(f"OC_REPL_TERMINAL={choice}: expected auto, tmux or pty")
            if choice == "auto":
                choice = "tmux" if sandbox.exec("command -v tmux", timeout=30).exit_code == 0 else "pty"
            if choice == "pty":
                from oc_repl.sandbox.pty_terminal import PtyTerminal  # pyte is needed only here

                self._terminal = PtyTerminal(sandbox, cwd=cwd)
            else:
                socket = private_socket() if sandbox.spec.startswith("local:") else None
                self._terminal = TmuxTerminal(sandbox, cwd=cwd, socket=socket)
        return self._terminal

    def first_message(self, task: Task, terminal_state: str) -> Message:
        """The filled template for a task, given the terminal as the model is first shown it."""
        content = self._template.format(instruction=task.instruction, terminal_state=terminal_state)
        return {"role": "user", "content": content}

    def _first_message(self, task: Task, sandbox: Sandbox | None) -> Message:
        return self.first_message(task, limit_output(self._terminal_for(sandbox).incremental_output()))

    def start(self, task: Task, sandbox: Sandbox | None = None) -> None:
        self.close()
        self._messages = [self._first_message(task, sandbox)]
        self._pending_completion = False

    def continue_with(self, task: Task, sandbox: Sandbox | None = None) -> None:
        """A follow-up task: the template again, with the new instruction and the terminal as it is now."""
        self._messages.append(self._first_message(task, sandbox))
        self._pending_completion = False

    def request(self) -> Request:
        return Request(messages=list(self._messages), options={})

    def assets(self) -> list[Asset]:
        return [self._asset]

    def close(self) -> None:
        if self._terminal is not None:
            terminal, self._terminal = self._terminal, None
            terminal.close()

    # --- one turn -----------------------------------------------------------------------------------------------

    def step(self, reply: Reply, sandbox: Sandbox, emit: Emit) -> Step:
        terminal = self._terminal_for(sandbox)
        text = reply.content
        if reply.cut_off:
            salvaged = salvage_xml(reply.raw_content or text) if self.fmt == "xml" else None
            if salvaged is None:
                return self._length_overflow(text, emit)
            # Upstream runs the rescued reply, and neither it nor the prompt before it reach the history.
            self._messages.pop()
            parsed = self._parse(salvaged)
        else:
            self._messages.append({"role": "assistant", "content": text})
            parsed = self._parse(strip_think(text))
        if parsed.error:
            self._feedback(feedback_parse_error(parsed.error, parsed.warning, self.fmt), parsed.error, emit)
            return Step(parse_error=True)
        observation = limit_output(self._execute(parsed, terminal, sandbox, emit))
        if parsed.task_complete:
            if self._pending_completion:
                return Step(done=True, final_answer=parsed.analysis or "Task marked complete.")
            self._pending_completion = True
            self._messages.append({"role": "user", "content": feedback_confirm(observation, self.fmt)})
        else:
            self._pending_completion = False
            message = feedback_warnings(parsed.warning, observation) if parsed.warning else None
            self._messages.append({"role": "user", "content": message or feedback_observation(observation)})
        if not terminal.alive():  # upstream ends the episode once its terminal is gone
            return Step(done=True, final_answer="The terminal session ended.")
        keys = [c.keystrokes for c in parsed.commands]
        fingerprint = hashlib.sha256(json.dumps([keys, observation]).encode()).hexdigest()
        return Step(fingerprint=fingerprint)

    def _execute(self, parsed: Parsed, terminal: Terminal, sandbox: Sandbox, emit: Emit) -> str:
        for command in parsed.commands:
            item = ev.CommandExecution(id=ev.new_id(), tool="keystrokes", command=command.keystrokes)
            emit(ev.ItemStarted(item=item))
            keys = approve(sandbox, command.keystrokes)
            if keys is None:  # refused: nothing is typed, and the next screen shows the model as much
                item.status = "declined"
                emit(ev.ItemCompleted(item=item))
                continue
            started = time.monotonic()
            terminal.send_keys(keys)
            try:
                terminal.wait(min(command.duration, MAX_WAIT), started, exact=self.wait == "exact")
            except KeyboardInterrupt:  # the user stopped the turn: stop what the keys started, too
                terminal.send_keys("C-c")
                raise
            item.status = "completed"
            item.aggregated_output = f"(waited {time.monotonic() - started:.2f}s of {command.duration:g}s)"
            emit(ev.ItemCompleted(item=item))
        observation = terminal.incremental_output()
        emit(
            ev.ItemCompleted(
                item=ev.CommandExecution(
                    id=ev.new_id(),
                    tool="terminal",
                    command="(observation)",
                    aggregated_output=observation,
                    status="completed",
                )
            )
        )
        return observation

    def _feedback(self, message: str, problem: str, emit: Emit) -> None:
        emit(ev.ItemCompleted(item=ev.ParseError(id=ev.new_id(), message=problem, feedback=message)))
        self._messages.append({"role": "user", "content": message})

    def _length_overflow(self, text: str, emit: Emit) -> Step:
        """None of the reply runs; upstream then asks again with the same error message, so it appears twice."""
        warning = self._parse(strip_think(text)).warning
        message = feedback_length_overflow(warning)
        self._messages.append({"role": "assistant", "content": text})
        self._feedback(message, "the reply hit the output token limit; nothing ran", emit)
        self._messages.append({"role": "user", "content": message})
        return Step(parse_error=True)


class TerminusJson(TerminusProtocol):
    fmt: Format = "json"
    name = "terminus-json"


class TerminusXml(TerminusProtocol):
    fmt: Format = "xml"
    name = "terminus-xml"
