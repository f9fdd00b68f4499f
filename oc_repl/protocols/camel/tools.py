"""The four camel terminal tools over any Sandbox, with the semantics of camel's docker backend as trained.

Every text the tools answer with is a template (toolkit.toml, `TOOLKIT_SPEC`): the built-in wording is the project's
own around the markers the reference quotes, and `oc-repl protocols sync` derives camel-ai 0.2.90's exact texts.
What a tool call raises (`ToolCallError`) is what upstream's bound method would raise; the protocol words it as the
training harness did.

Each way the tools depart from upstream's is a deviation (a row of camel's kind, protocols/camel/kind.py) that turns off
on its own; with them all off (`--exact`) the tools behave as upstream's did in training, down to its quirks: no type
checks (a value of another type meets the Python operation upstream's code applied to it), an explicit null timeout
waits without limit, input to a timed-out blocking command fails the way upstream's did after its drain, ending sessions
pile up the no-new-output marker for the whole wait, and the calls other than shell_exec end after a 20 s wall limit.
"""

from __future__ import annotations

import codecs
import math
import shlex
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from oc_repl.errors import SandboxError, SandboxLost
from oc_repl.protocols.camel.args import (
    SIGNATURES,
    ToolCallError,
    ToolInterrupted,
    ToolResult,
    cap_text,
    check_arguments,
    join_error,
    missing_attribute,
    python_error,
    upstream_command,
)
from oc_repl.protocols.camel.files import write_content
from oc_repl.protocols.camel.kind import DEVIATIONS
from oc_repl.protocols.camel.text import terminal_text
from oc_repl.protocols.templates import Templates
from oc_repl.rows import Deviations
from oc_repl.types import Approve, Process, Sandbox, allow_all

__all__ = ["SIGNATURES", "CamelTerminalTools", "ToolCallError", "ToolInterrupted", "ToolResult", "cap_text"]

# The templates the tools answer with (toolkit.toml), and the fields each may use.
TOOLKIT_SPEC: dict[str, tuple[str, ...]] = {
    "qualname": ("tool",),
    "exec.no_output": (),
    "exec.timeout": ("id", "timeout"),
    "exec.session_started": ("id",),
    "exec.already_running": ("id",),
    "exec.error": ("error",),
    "exec.start_error": ("error",),
    "view.unknown": ("id",),
    "view.idle": (),
    "view.still_running": (),
    "view.completed": ("output",),
    "view.terminated": ("output",),
    "view.terminated_empty": (),
    "write.unknown": ("id",),
    "write.no_output": ("id",),
    "write.error": ("id", "error"),
    "collect.still_outputting": ("output",),
    "file.ok": ("file_path",),
    "file.error": ("file_path", "error"),
    "wrapper.timeout": ("function", "timeout"),
    "typeerror.missing_one": ("tool", "names"),
    "typeerror.missing_many": ("tool", "count", "names"),
    "typeerror.unexpected": ("tool", "name"),
}
# The tools' own notices for what upstream never says (notices.toml holds them beside the protocol's).
TOOLKIT_NOTICES: dict[str, tuple[str, ...]] = {
    "declined": ("name",),
    "observation_cut": ("kept", "omitted"),
    "arguments_not_object": ("tool", "got"),
    "wrong_type": ("tool", "name", "expected", "got"),
    "blocking_session_input": ("id",),
    "no_directory": ("path",),
}

# Collecting the answer to an input: done after IDLE_S without new output, or after at most MAX_S.
IDLE_S, MAX_S = 0.5, 5.0
# Before the input goes in, output still pending is collected the same way (shorter) and dropped, as upstream did.
DRAIN_IDLE_S, DRAIN_MAX_S = 0.3, 2.0
# Upstream's toolkit was built with timeout=20.0: the wall limit of every call but shell_exec (without no_wall_limit).
WALL_LIMIT = 20.0
_POLL_S = 0.05
WAIT_WITHOUT_LIMIT = 3600.0  # the first wait of a command with none of its own (see `_wait`)
# Upstream returned whole outputs and let the prompt be cut later; one huge output would fill this model's 16k
# context on its own, so results keep their first and last halves of this many characters.
OBSERVATION_LIMIT = 16384
_LEFT_OUT = object()  # an optional argument the call did not give


@dataclass
class _Session:
    proc: Process
    overran: bool  # a blocking command that outlived its timeout (no input, output converted at the end)
    ended: bool = False  # its end has been reported once
    decoder: Any = field(default_factory=lambda: codecs.getincrementaldecoder("utf-8")(errors="ignore"))


class CamelTerminalTools:
    """shell_exec, shell_view, shell_write_to_process and shell_write_content_to_file, plus the session registry."""

    def __init__(
        self,
        sandbox: Sandbox,
        m: Templates,
        notices: Templates,
        *,
        workdir: str | None = None,
        default_timeout: float = 20.0,
        observation_limit: int = OBSERVATION_LIMIT,
        deviations: Deviations | None = None,
        camel_rich: str = "14",
    ) -> None:
        """`camel_rich`: the release line of rich whose conversion blocking output goes through (text.py)."""
        self.sandbox = sandbox
        self.rich = camel_rich
        self.m, self.notices = m, notices
        self.observation_limit = observation_limit
        self.workdir = workdir or sandbox.workdir
        self.default_timeout = default_timeout
        self.deviations = deviations or Deviations(DEVIATIONS)
        self.wall_limit = WALL_LIMIT
        # Keyed by the id as given: unchecked, any hashable JSON value, compared as Python compares them.
        self._sessions: dict[Any, _Session] = {}
        self._replaced: list[Process] = []  # processes out of the model's reach, still ours to stop
        self._workdir_ready = False
        self._approve: Approve = allow_all

    def call(self, name: str, arguments: Any, approve: Approve = allow_all) -> ToolResult:
        """Run one known tool; bad arguments raise ToolCallError, everything else comes back as text."""
        check_arguments(name, arguments, self.m, self.notices, types=self.deviations.argument_types_checked)
        self._approve = approve
        try:
            result = getattr(self, name)(**arguments)
        except SandboxLost:
            raise  # not the model's doing: the run ends with a sandbox error
        finally:
            self._approve = allow_all
        if self.deviations.results_cut:
            result.text = cap_text(result.text, self.observation_limit, self.notices)
        return result

    # --- the tools ----------------------------------------------------------------------------------------------

    def shell_exec(self, id: Any, command: Any, block: Any = True, timeout: Any = _LEFT_OUT) -> ToolResult:
        if not self.deviations.argument_types_checked:
            command = upstream_command(command)
        approved = self._approve(command)
        if approved is None:
            return ToolResult(self.notices.render("declined", name="shell_exec"), "declined", command=command)
        command = approved
        self.ensure_workdir()
        if not block:  # upstream's `if block:`: null starts a session too
            return self._start_session(id, command)
        if timeout is _LEFT_OUT or (timeout is None and self.deviations.null_timeout_bounded):
            # Upstream waited forever on an explicit null; a client should not hang on it.
            timeout = self.default_timeout
        # upstream started the command, then waited with thread.join(timeout): a value join refuses is reported, and
        # the command goes on untracked
        problem = "" if timeout is None else join_error(timeout)
        limit = None if timeout is None or problem else float(max(timeout, 0))
        started = time.monotonic()
        # where calls are costly, the start waits for the end in the same call (a command that ends in time: one)
        wait = 0.0 if problem else WAIT_WITHOUT_LIMIT if limit is None else limit
        proc = self._spawn(command, tty=False, wait=wait)
        if isinstance(proc, ToolResult):
            return proc
        if problem:
            self._replaced.append(proc)
            return ToolResult(self.m.render("exec.error", error=problem), "failed", command=command)
        try:
            finished = self._wait(proc, None if limit is None else limit - (time.monotonic() - started))
        except KeyboardInterrupt as stop:  # the turn stops: the command goes with it, its output is kept
            proc.kill()
            raise ToolInterrupted(self._blocking_text(proc.read_available()), stop) from None
        if not finished:
            if proc.alive():
                try:
                    self._register(id, _Session(proc, overran=True))
                except TypeError as exc:  # an id that cannot be a key: upstream failed storing the session
                    self._replaced.append(proc)
                    return ToolResult(self.m.render("exec.error", error=exc), "failed", command=command)
                text = self.m.render("exec.timeout", id=id, timeout=timeout)
                return ToolResult(text, "timed_out", command=command)
            proc.wait(1.0)  # it ended right at the deadline: let its output drain
        return ToolResult(self._blocking_text(proc.read_available()), exit_code=proc.exit_code, command=command)

    def shell_view(self, id: Any) -> ToolResult:
        return self._walled("shell_view", lambda: self._view_call(id))

    def shell_write_to_process(self, id: Any, command: Any) -> ToolResult:
        session = self._find(id)
        if session is None or not self._running(session):
            return ToolResult(self.m.render("write.unknown", id=id), "failed")
        if session.overran and self.deviations.timed_out_input_refused:
            return ToolResult(self.notices.render("blocking_session_input", id=id), "failed")
        # Unchecked, the input meets upstream's `(command + "\n").encode()`: Python's error for a value that is not
        # text, or for a lone surrogate (checked, that is sent as the byte it stands for).
        checked = self.deviations.argument_types_checked
        problem = "" if checked else python_error(lambda: (command + "\n").encode("utf-8"))
        if not problem:  # nothing is sent otherwise: nothing to approve
            approved = self._approve(f"[input to session {id}] {command}")
            if approved is None:
                text = self.notices.render("declined", name="shell_write_to_process")
                return ToolResult(text, "declined", command=command)
            command = approved.removeprefix(f"[input to session {id}] ")
        return self._walled("shell_write_to_process", lambda: self._write_input(session, id, command, problem))

    def shell_write_content_to_file(self, content: Any, file_path: Any) -> ToolResult:
        size = len(content) if isinstance(content, str) else 0
        asked = f"write {size} characters to {file_path}"
        if self._approve(asked) != asked:  # refused, or edited: a write cannot be edited into another one
            text = self.notices.render("declined", name="shell_write_content_to_file")
            return ToolResult(text, "declined", path=str(file_path))
        return self._walled("shell_write_content_to_file", lambda: write_content(self, content, file_path))

    def running(self, id: Any) -> bool:
        """A session of this id is still running (its end not yet reported)."""
        session = self._sessions.get(id) if isinstance(id, str) else None
        return session is not None and not session.ended and session.proc.alive()

    def close_sessions(self) -> None:
        """Kill every session still running (the loop calls this when the episode ends)."""
        procs = [s.proc for s in self._sessions.values()] + self._replaced
        self._sessions.clear()
        self._replaced.clear()
        for proc in procs:
            proc.kill()

    # --- what the tools do ----------------------------------------------------------------------------------------

    def _walled(self, name: str, work: Callable[[], ToolResult]) -> ToolResult:
        """Upstream ran every method without a timeout of its own in a thread it waited for at most 20 s; past that
        the call answered so, and the work went on unobserved."""
        if self.deviations.no_wall_limit:
            return work()
        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                outcome["result"] = work()
            except BaseException as exc:  # handed to the caller, as upstream's wrapper re-raised it
                outcome["error"] = exc

        worker = threading.Thread(target=run, name=f"oc-repl-{name}", daemon=True)
        worker.start()
        worker.join(self.wall_limit)
        if worker.is_alive():
            return ToolResult(self.m.render("wrapper.timeout", function=name, timeout=self.wall_limit), "timed_out")
        if "error" in outcome:
            raise outcome["error"]
        return outcome["result"]

    def _view_call(self, id: Any) -> ToolResult:
        session = self._find(id)
        if session is None:
            return ToolResult(self.m.render("view.unknown", id=id), "failed")
        kind, output = self._look(session)
        return ToolResult(output if kind == "output" else self._view_text(kind, output))

    def _write_input(self, session: _Session, id: Any, command: Any, problem: str) -> ToolResult:
        self._collect(session, DRAIN_IDLE_S, DRAIN_MAX_S)
        if session.overran:  # not refused at once (timed_out_input_refused off): upstream's had no socket for it
            problem = missing_attribute(None, "_sock")
        if problem:
            return ToolResult(self.m.render("write.error", id=id, error=problem), "failed", command=str(command))
        try:
            errors = "surrogateescape" if self.deviations.argument_types_checked else "strict"
            session.proc.write((command + "\n").encode("utf-8", errors))
        except SandboxError as exc:
            return ToolResult(self.m.render("write.error", id=id, error=exc), "failed", command=command)
        output = self._collect(session, IDLE_S, MAX_S)
        if not output.strip():
            return ToolResult(self.m.render("write.no_output", id=id), command=command)
        return ToolResult(output, command=command)

    # --- helpers ------------------------------------------------------------------------------------------------

    def _wait(self, proc: Process, limit: float | None) -> bool:
        if limit is not None:
            return proc.wait(limit)
        while not proc.wait(WAIT_WITHOUT_LIMIT):  # no limit of its own: the run's limits (or Ctrl-C) end it
            pass
        return True

    def ensure_workdir(self) -> None:
        if not self._workdir_ready:
            self.sandbox.exec(f"mkdir -p -- {shlex.quote(self.workdir)}", timeout=30)
            self._workdir_ready = True

    def test(self, flag: str, path: str) -> bool:
        return self.sandbox.exec(f"test {flag} {shlex.quote(path)}", timeout=30).exit_code == 0

    def _find(self, id: Any) -> _Session | None:
        try:
            return self._sessions.get(id)
        except TypeError as exc:  # an id that cannot be a key (a list, an object), as upstream's lookup failed
            raise ToolCallError("TypeError", str(exc)) from None

    def _running(self, session: _Session) -> bool:
        """Upstream's `running` flag: a timed-out blocking command counted as running until a view reported its end."""
        if session.ended:
            return False
        if session.overran and not self.deviations.timed_out_input_refused:
            return True
        return session.proc.alive()

    def _register(self, id: Any, session: _Session) -> None:
        old = self._sessions.get(id)
        if old is not None and old.proc.alive():
            self._replaced.append(old.proc)
        self._sessions[id] = session

    def _spawn(self, command: str, tty: bool, wait: float = 0.0) -> Process | ToolResult:
        """The command started, or upstream's answer when the sandbox refuses to start it (a lost sandbox still ends
        the run)."""
        try:
            return self.sandbox.spawn(command, tty=tty, cwd=self.workdir, wait=wait)
        except SandboxLost:
            raise
        except SandboxError as exc:  # the daemon refused the exec
            name = "exec.start_error" if tty else "exec.error"
            return ToolResult(self.m.render(name, error=exc), "failed", command=command)

    def _start_session(self, id: Any, command: str) -> ToolResult:
        old = self._find(id)
        if old is not None and self._running(old):
            return ToolResult(self.m.render("exec.already_running", id=id), "failed", command=command)
        proc = self._spawn(command, tty=True)
        if isinstance(proc, ToolResult):
            return proc
        self._register(id, _Session(proc, overran=False))
        return ToolResult(self.m.render("exec.session_started", id=id), command=command)

    def _blocking_text(self, data: bytes) -> str:
        # upstream judged emptiness on the decoded text, before any conversion: output of escapes alone gives ""
        if data.decode("utf-8", errors="ignore").strip():
            return terminal_text(data, self.rich)
        return self.m.render("exec.no_output")

    def _look(self, session: _Session) -> tuple[str, str]:
        """What a look at a session finds: (the view template's name, or "output" for plain new output; the output)."""
        if session.ended:
            return "terminated_empty", ""
        proc = session.proc
        if session.overran:
            if not proc.wait(0):
                return "still_running", ""
            session.ended = True
            return "completed", terminal_text(proc.read_available(), self.rich)
        ended = proc.wait(0)  # asked before reading, so an ended session's output is all in this read
        text = session.decoder.decode(proc.read_available(), final=ended)
        if not ended:
            return ("output", text) if text else ("idle", "")
        session.ended = True
        return ("terminated", text) if text else ("terminated_empty", "")

    def _collect(self, session: _Session, idle: float, max_wait: float) -> str:
        """Output of a session until it has been quiet for `idle` seconds, or `max_wait` has passed.

        Upstream looked again whenever output arrived and took every answer but the idle one for output. Its reader
        queued a session's last output before it noticed the end, so that output came as plain output, and each look
        after the end gave the no-new-output marker: the marker piled up once per idle period until the deadline,
        once more at the end, then the warning.
        """
        parts: list[str] = []
        start = last = time.monotonic()
        while (now := time.monotonic()) - start < max_wait:
            kind, output = self._look(session)
            if kind == "idle":
                if now - last >= idle:
                    return "".join(parts)
            else:
                parts.append(output if kind in ("output", "terminated") else self._view_text(kind, output))
                last = now
                if session.ended and self.deviations.ended_session_answered_at_once:  # the same text, not waited for
                    repeats = math.ceil((max_wait - (now - start)) / idle) + (kind == "terminated")
                    body = "".join(parts) + self.m.render("view.terminated_empty") * repeats
                    return self.m.render("collect.still_outputting", output=body)
            pause = max(0.0, min(idle - (time.monotonic() - last), max_wait - (time.monotonic() - start)))
            if session.ended:
                time.sleep(pause)  # upstream's collector slept until the next output, which never came
            else:
                session.proc.wait(min(_POLL_S, pause))  # returns early when the process ends
        kind, output = self._look(session)
        if kind != "idle":
            parts.append(output if kind in ("output", "terminated") else self._view_text(kind, output))
        return self.m.render("collect.still_outputting", output="".join(parts))

    def _view_text(self, kind: str, output: str) -> str:
        return self.m.render(f"view.{kind}", **({"output": output} if kind in ("completed", "terminated") else {}))
