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

from oc_repl import events as ev
from oc_repl.errors import UsageError
from oc_repl.protocols import load_asset
from oc_repl.protocols.templates import Templates, format_problem
from oc_repl.protocols.terminus.kind import TERMINUS_JSON, TERMINUS_XML
from oc_repl.protocols.terminus.parse import (
    SPECS,
    Format,
    Parsed,
    feedback,
    limit_output,
    parse_json,
    parse_xml,
    prompt_confirm,
    prompt_length_overflow,
    prompt_observation,
    prompt_parse_error,
    prompt_warnings,
    salvage_xml,
    strip_think,
)
from oc_repl.protocols.terminus.tmux import MAX_WAIT, NoTmux, Terminal, TmuxTerminal, private_socket
from oc_repl.rows import Deviations
from oc_repl.types import AgentProtocol, Approve, Asset, Emit, Message, Reply, Request, Sandbox, Step, Task, allow_all

PROMPT_FIELDS = ("instruction", "terminal_state")
# A sandbox whose trivial call takes this long or longer gets a terminal that waits inside it, one call a command
# (tmux_inside.py); below, looking from outside (a call per look) returns sooner.
COSTLY_CALL = 0.02
NOTICES_SPEC = {"interrupted": ("observation",), "declined": ("keystrokes",)}


class TerminusProtocol(AgentProtocol):
    fmt: Format = "json"
    name = "terminus-json"
    kind = TERMINUS_JSON

    def __init__(self, name: str | None = None, deviations: Deviations | None = None) -> None:
        self.name = name or type(self).name
        self.deviations = deviations or Deviations(self.kind.deviations)  # its own defaults, without a run
        template, self._asset = load_asset(self.name, "prompt.txt")
        self._template = template.decode("utf-8")
        if why := format_problem(self._template, PROMPT_FIELDS):
            raise UsageError(f"{self._asset.path}: {why}", hint="fix the file, or remove it to use the default")
        self.m = Templates.load(self.name, "messages.toml", SPECS[self.fmt])
        self.notices = Templates.load(self.name, "notices.toml", NOTICES_SPEC)
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
            cwd = self.working_directory(sandbox)
            # tmux where the sandbox has it, as upstream runs; else a pty with the screen kept here.
            # OC_REPL_TERMINAL=tmux|pty forces one.
            choice = os.environ.get("OC_REPL_TERMINAL") or "auto"
            if choice not in ("auto", "tmux", "pty"):
                raise UsageError(f"OC_REPL_TERMINAL={choice}: expected auto, tmux or pty")
            self._terminal = self._open_terminal(sandbox, cwd, choice)
        return self._terminal

    def _open_terminal(self, sandbox: Sandbox, cwd: str, choice: str) -> Terminal:
        upstream_keys = not self.deviations.all_keys_typed
        socket = private_socket() if sandbox.on_host else None
        if choice != "pty" and sandbox.call_latency() >= COSTLY_CALL:
            from oc_repl.protocols.terminus.tmux_inside import HelperRefused, InsideTmuxTerminal

            try:  # its first call finds out whether there is tmux
                return InsideTmuxTerminal(sandbox, cwd=cwd, socket=socket, upstream_keys=upstream_keys)
            except NoTmux:
                if choice == "tmux":
                    raise
                choice = "pty"
            except HelperRefused:
                choice = "tmux"
        if choice == "auto":
            choice = "tmux" if sandbox.exec("command -v tmux", timeout=30).exit_code == 0 else "pty"
        if choice == "pty":
            from oc_repl.protocols.terminus.pty_terminal import PtyTerminal  # pyte is needed only here

            return PtyTerminal(sandbox, cwd=cwd, upstream_keys=upstream_keys)
        return TmuxTerminal(sandbox, cwd=cwd, socket=socket, upstream_keys=upstream_keys)

    def _observe(self, terminal: Terminal) -> str:
        kind, text = terminal.observe()
        return self.m.render(f"observation.{kind}", **{"content" if kind == "new" else "screen": text})

    def _limit(self, text: str) -> str:
        return limit_output(text, self.m)

    def first_message(self, task: Task, terminal_state: str) -> Message:
        """The filled template for a task, given the terminal as the model is first shown it."""
        content = self._template.format(instruction=task.instruction, terminal_state=terminal_state)
        return {"role": "user", "content": content}

    def _first_message(self, task: Task, sandbox: Sandbox | None) -> Message:
        return self.first_message(task, self._limit(self._observe(self._terminal_for(sandbox))))

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

    def resume(self, messages: list[Message]) -> None:
        """The terminal is opened anew by the next task, which shows the model its screen as it is then."""
        self.close()
        self._messages, self._pending_completion = list(messages), False

    def assets(self) -> list[Asset]:
        # The notices are the words of deviations (a person stepping in): with none in force (--exact) none is sent.
        found = [self._asset, self.m.asset] + ([self.notices.asset] if self.deviations.names() else [])
        return [asset for asset in found if asset is not None]

    def working_directory(self, sandbox: Sandbox) -> str:
        """As terminal-bench: the image's WORKDIR in a container; the sandbox directory on local:."""
        return sandbox.image_workdir or sandbox.workdir

    def own_processes(self) -> frozenset[int]:
        """The terminal's shell (the tmux server, or the pty's, runs it): not the model's commands, its children."""
        pid = getattr(self._terminal, "pid", None)
        return frozenset({pid}) if isinstance(pid, int) else frozenset()

    def close(self) -> None:
        if self._terminal is not None:
            terminal, self._terminal = self._terminal, None
            terminal.close()

    # --- one turn -----------------------------------------------------------------------------------------------

    def step(self, reply: Reply, sandbox: Sandbox, emit: Emit, approve: Approve = allow_all) -> Step:
        terminal = self._terminal_for(sandbox)
        # Without think_block_stripped the model's text is parsed as it came, as upstream does (see strip_think).
        text = reply.content if self.deviations.think_block_stripped else reply.raw_content
        if reply.cut_off:
            by_text = not self.deviations.salvage_by_warning_name
            salvaged = salvage_xml(reply.raw_content or text, self.m, by_text) if self.fmt == "xml" else None
            if salvaged is None:
                return self._length_overflow(text, emit)
            # Upstream runs the rescued reply, and neither it nor the prompt before it reach the history.
            self._messages.pop()
            parsed = self._parse(salvaged, self.m)
        else:
            self._messages.append({"role": "assistant", "content": text})
            parsed = self._parse_reply(text)
        if self._is_parse_error(parsed):
            self._feedback(prompt_parse_error(parsed, self.m), parsed.error or parsed.warning, emit)
            return Step()
        final = parsed.task_complete and self._pending_completion
        if final and not parsed.commands:  # the confirmation: no screen of it would reach the model, none is taken
            return Step(done=True, final_answer=parsed.analysis or "Task marked complete.")
        observation = self._limit(self._execute(parsed, terminal, emit, approve))
        if parsed.task_complete:
            if final:
                return Step(done=True, final_answer=parsed.analysis or "Task marked complete.")
            self._pending_completion = True
            self._messages.append({"role": "user", "content": prompt_confirm(observation, self.m)})
        else:
            self._pending_completion = False
            message = prompt_warnings(parsed, observation, self.m) if parsed.warning else None
            self._messages.append({"role": "user", "content": message or prompt_observation(observation, self.m)})
        if not terminal.alive():  # upstream ends the episode once its terminal is gone
            return Step(done=True, final_answer="The terminal session ended.")
        keys = [c.keystrokes for c in parsed.commands]
        if not any(keys) and not terminal.probe().idle:
            return Step()  # an empty wait while a command still runs is waiting, not looping: no fingerprint
        fingerprint = hashlib.sha256(json.dumps([keys, observation]).encode()).hexdigest()
        return Step(fingerprint=fingerprint)

    def _execute(self, parsed: Parsed, terminal: Terminal, emit: Emit, approve: Approve) -> str:
        told: list[str] = []  # what a person's refusals tell the model, ahead of the screen
        for number, command in enumerate(parsed.commands, 1):
            item = ev.CommandExecution(id=ev.new_id(), tool="keystrokes", command=command.keystrokes)
            emit(ev.ItemStarted(item=item))
            keys = approve(command.keystrokes)
            if keys is None:  # refused: nothing is typed
                item.status = "declined"
                emit(ev.ItemCompleted(item=item))
                told.append(self.notices.render("declined", keystrokes=repr(command.keystrokes)))
                continue
            item.command = keys  # as typed, after the person watching edited it
            started = time.monotonic()
            duration, idle = min(command.duration, MAX_WAIT), self.deviations.returns_when_idle
            try:
                terminal.run(keys, duration, started, until_idle=idle, observe=number == len(parsed.commands))
            except KeyboardInterrupt:  # the user stopped the turn: stop what the keys started, and say so
                self._interrupted(terminal, item, emit)
                raise
            item.status = "completed"
            item.aggregated_output = f"(waited {time.monotonic() - started:.2f}s of {command.duration:g}s)"
            emit(ev.ItemCompleted(item=item))
        observation = self._observe(terminal)
        if told and self.deviations.declined_keys_told:
            observation = "\n".join([*told, observation])
        emit(
            ev.ItemCompleted(
                item=ev.CommandExecution(
                    id=ev.new_id(),
                    tool=ev.TERMINAL_TOOL,
                    command="(observation)",
                    aggregated_output=observation,
                    status="completed",
                    screen=terminal.screen,
                )
            )
        )
        return observation

    def _interrupted(self, terminal: Terminal, item: ev.CommandExecution, emit: Emit) -> None:
        """Ctrl-C to the terminal, then the screen it leaves goes to the model (with a word on what happened, while
        interruption_told is on), so the conversation can go on from there."""
        terminal.run("C-c", 1.0, time.monotonic(), observe=True)
        observation = self._limit(self._observe(terminal))
        item.status, item.aggregated_output, item.screen = "failed", observation, terminal.screen
        emit(ev.ItemCompleted(item=item))
        shown = prompt_observation(observation, self.m)
        if self.deviations.interruption_told:
            shown = self.notices.render("interrupted", observation=shown)
        self._messages.append({"role": "user", "content": shown})
        self._pending_completion = False

    def _is_parse_error(self, parsed: Parsed) -> bool:
        """Nothing runs when the reply could not be parsed. Upstream decides that by looking for its `ERROR:` marker
        anywhere in the feedback, so a warning quoting the marker (an unknown field named `ERROR:`) also stops the
        reply; without only_parse_errors_stop that holds, otherwise only a real parse error does."""
        upstream_test = not self.deviations.only_parse_errors_stop
        return bool(parsed.error) or (upstream_test and "ERROR:" in feedback(parsed, self.m))

    def _parse_reply(self, text: str) -> Parsed:
        return self._parse(strip_think(text) if self.deviations.think_block_stripped else text, self.m)

    def _feedback(self, message: str, problem: str, emit: Emit) -> None:
        emit(ev.ItemCompleted(item=ev.ParseError(id=ev.new_id(), message=problem, feedback=message)))
        self._messages.append({"role": "user", "content": message})

    def _length_overflow(self, text: str, emit: Emit) -> Step:
        """None of the reply runs; upstream then asks again with the same error message, so it appears twice."""
        warning = self._parse_reply(text).warning
        message = prompt_length_overflow(warning, self.m)
        self._messages.append({"role": "assistant", "content": text})
        self._feedback(message, "the reply hit the output token limit; nothing ran", emit)
        self._messages.append({"role": "user", "content": message})
        return Step()


class TerminusJson(TerminusProtocol):
    fmt: Format = "json"
    name = "terminus-json"


class TerminusXml(TerminusProtocol):
    kind = TERMINUS_XML
    fmt: Format = "xml"
    name = "terminus-xml"
