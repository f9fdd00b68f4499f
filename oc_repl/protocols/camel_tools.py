"""The four camel terminal tools over any Sandbox, with the semantics of camel's docker backend as trained.

Markers quoted in the reference (`--- SESSION COMPLETED ---` and friends, the no-output line) are exact; the other
status lines are worded here.
"""

from __future__ import annotations

import codecs
import math
import posixpath
import shlex
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from oc_repl.errors import SandboxError, SandboxLost
from oc_repl.sandbox.text import terminal_text
from oc_repl.types import Process, Sandbox, approve

NO_OUTPUT = "Command executed successfully (no output)."
COMPLETED = "--- SESSION COMPLETED ---"
TERMINATED = "--- SESSION TERMINATED ---"
TERMINATED_EMPTY = "--- SESSION TERMINATED (no new output) ---"
IDLE = (
    "[No new output]\n"
    "The session is running but has printed nothing new. You could:\n"
    "  - interactive program: send it input with shell_write_to_process()\n"
    "  - long task: look again later (not too often)"
)
STILL_RUNNING = (
    "[Still running]\n"
    "The command has not finished yet; look again later for its output.\n"
    "shell_kill_process() stops it if needed."
)
STILL_PRINTING = (
    "\n--- WARNING: the process was still printing when the wait ended. Give it time before sending the next input. ---"
)

# Collecting the answer to an input: done after IDLE_S without new output, or after at most MAX_S.
IDLE_S, MAX_S = 0.5, 5.0
# Before the input goes in, output still pending is collected the same way (shorter) and dropped, as upstream did.
DRAIN_IDLE_S, DRAIN_MAX_S = 0.3, 2.0
_POLL_S = 0.05
# Upstream returned whole outputs and let the prompt be cut later; one huge output would fill this model's 16k
# context on its own, so results keep their first and last halves of this many characters.
OBSERVATION_LIMIT = 16384


def cap_text(text: str, limit: int) -> str:
    if limit <= 0 or len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters omitted ...]\n{text[-half:]}"


# tool -> parameter -> (JSON types accepted, may be left out). Leaving out an optional parameter means its default;
# an explicit null is a value of its own (for `block`, null starts a background session, as upstream's `if block:`).
SIGNATURES: dict[str, dict[str, tuple[str, bool]]] = {
    "shell_exec": {
        "id": ("string", False),
        "command": ("string", False),
        "block": ("boolean|null", True),
        "timeout": ("number|null", True),
    },
    "shell_view": {"id": ("string", False)},
    "shell_write_to_process": {"id": ("string", False), "command": ("string", False)},
    "shell_write_content_to_file": {"content": ("string", False), "file_path": ("string", False)},
}


@dataclass
class ToolResult:
    text: str  # what the model reads
    status: Literal["completed", "failed", "timed_out", "declined"] = "completed"
    exit_code: int | None = None  # known for finished blocking commands; never shown to the model
    path: str = ""  # the file written, for file changes
    created: bool = False


@dataclass
class _Session:
    proc: Process
    overran: bool  # a blocking command that outlived its timeout (no input, output converted at the end)
    ended: bool = False  # its end has been reported once
    decoder: Any = field(default_factory=lambda: codecs.getincrementaldecoder("utf-8")(errors="ignore"))


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return {str: "string", list: "array", dict: "object"}.get(type(value), type(value).__name__)


def check_arguments(name: str, arguments: Any) -> None:
    """Raise TypeError, worded like Python's own, for missing, unexpected or mistyped arguments."""
    if not isinstance(arguments, dict):
        raise TypeError(f"{name}() arguments must be a JSON object, not {_json_type(arguments)}")
    params = SIGNATURES[name]
    for key in arguments:
        if key not in params:
            raise TypeError(f"{name}() got an unexpected keyword argument '{key}'")
    missing = [key for key, (_, optional) in params.items() if not optional and key not in arguments]
    if missing:
        plural = "s" if len(missing) > 1 else ""
        names = " and ".join(f"'{key}'" for key in missing)
        raise TypeError(f"{name}() missing {len(missing)} required positional argument{plural}: {names}")
    for key, value in arguments.items():
        accepted = params[key][0].split("|")
        if _json_type(value) not in accepted:
            raise TypeError(f"{name}() argument '{key}' must be {' or '.join(accepted)}, not {_json_type(value)}")


class CamelTerminalTools:
    """shell_exec, shell_view, shell_write_to_process and shell_write_content_to_file, plus the session registry."""

    def __init__(
        self,
        sandbox: Sandbox,
        *,
        workdir: str | None = None,
        default_timeout: float = 20.0,
        relative_paths: Literal["workdir", "root"] = "workdir",
        observation_limit: int = OBSERVATION_LIMIT,
    ) -> None:
        self.sandbox = sandbox
        self.observation_limit = observation_limit
        self.workdir = workdir or sandbox.workdir
        self.default_timeout = default_timeout
        self.relative_paths = relative_paths
        self._sessions: dict[str, _Session] = {}
        self._replaced: list[Process] = []  # sessions whose id was reused: out of reach, still ours to stop
        self._workdir_ready = False

    def call(self, name: str, arguments: Any) -> ToolResult:
        """Run one tool call; every failure comes back as text for the model."""
        if name not in SIGNATURES:
            return ToolResult(f"[TOOL_ERROR] unknown tool: {name}", "failed")
        try:
            check_arguments(name, arguments)
            result = getattr(self, name)(**arguments)
        except SandboxLost:
            raise  # not the model's doing: the run ends with a sandbox error
        except Exception as exc:
            return ToolResult(f"[TOOL_ERROR] {name}: {type(exc).__name__}: {exc}", "failed")
        result.text = cap_text(result.text, self.observation_limit)
        return result

    # --- the tools ----------------------------------------------------------------------------------------------

    def shell_exec(self, id: str, command: str, block: bool | None = True, timeout: float | None = None) -> ToolResult:
        self._ensure_workdir()
        if not block:
            return self._start_session(id, command)
        # Upstream waited forever on an explicit null timeout; a client must not hang, so null means the default.
        limit = self.default_timeout if timeout is None else float(timeout)
        proc = self.sandbox.spawn(command, tty=False, cwd=self.workdir)
        try:
            finished = proc.wait(limit)
        except KeyboardInterrupt:  # the user stopped the turn: the command goes with it
            proc.kill()
            raise
        if not finished:
            if proc.alive():
                self._register(id, _Session(proc, overran=True))
                return ToolResult(
                    f"The command did not finish within {limit:g} seconds. It keeps running in the background as "
                    f"session '{id}'.\n\nYou can use:\n"
                    f"  - shell_view('{id}') - see its output\n"
                    f"  - shell_kill_process('{id}') - stop it",
                    "timed_out",
                )
            proc.wait(1.0)  # it ended right at the deadline: let its output drain
        data = proc.read_available()
        # upstream judged emptiness on the decoded text, before any conversion
        text = terminal_text(data) if data.decode("utf-8", errors="ignore").strip() else NO_OUTPUT
        return ToolResult(text, exit_code=proc.exit_code)

    def shell_view(self, id: str) -> ToolResult:
        session = self._sessions.get(id)
        if session is None:
            return ToolResult(f"Error: there is no session with id '{id}'.", "failed")
        return ToolResult(self._view(session))

    def shell_write_to_process(self, id: str, command: str) -> ToolResult:
        session = self._sessions.get(id)
        if session is None or session.ended or not session.proc.alive():
            return ToolResult(f"Error: there is no running non-blocking session with id '{id}'.", "failed")
        if session.overran:
            return ToolResult(
                f"Error: session '{id}' is a blocking command that outran its timeout; it takes no input.", "failed"
            )
        approved = approve(self.sandbox, f"[input to session {id}] {command}")
        if approved is None:
            return ToolResult(f"Error: the user declined to send this input to session '{id}'.", "declined")
        command = approved.removeprefix(f"[input to session {id}] ")
        self._collect(session, DRAIN_IDLE_S, DRAIN_MAX_S)
        try:
            session.proc.write((command + "\n").encode())
        except SandboxError as exc:
            return ToolResult(f"Error: could not write to session '{id}': {exc}", "failed")
        output = self._collect(session, IDLE_S, MAX_S)
        if not output.strip():
            return ToolResult(f"Input sent to session '{id}'; nothing was printed back.")
        return ToolResult(output)

    def shell_write_content_to_file(self, content: str, file_path: str) -> ToolResult:
        self._ensure_workdir()
        if posixpath.isabs(file_path):
            target = file_path
        elif self.relative_paths == "root":
            target = posixpath.join("/", file_path)
            failure = self._prepare_like_upstream(file_path, target)
            if failure:
                return ToolResult(f"Error writing to file '{file_path}': {failure}", "failed", path=target)
        else:
            target = posixpath.join(self.workdir, file_path)
        created = not self._test("-e", target)
        try:
            self.sandbox.write_file(target, content.encode("utf-8"))
        except SandboxError as exc:
            return ToolResult(f"Error writing to file '{file_path}': {exc}", "failed", path=target)
        return ToolResult(f"Content written to '{file_path}'.", path=target, created=created)

    def close_sessions(self) -> None:
        """Kill every session still running (the loop calls this when the episode ends)."""
        procs = [s.proc for s in self._sessions.values()] + self._replaced
        self._sessions.clear()
        self._replaced.clear()
        for proc in procs:
            proc.kill()

    # --- helpers ------------------------------------------------------------------------------------------------

    def _ensure_workdir(self) -> None:
        if not self._workdir_ready:
            self.sandbox.exec(f"mkdir -p -- {shlex.quote(self.workdir)}", timeout=30)
            self._workdir_ready = True

    def _test(self, flag: str, path: str) -> bool:
        return self.sandbox.exec(f"test {flag} {shlex.quote(path)}", timeout=30).exit_code == 0

    def _prepare_like_upstream(self, file_path: str, target: str) -> str:
        """Upstream made the parent directory relative to the container's own working directory, then copied the
        file to the path taken against /. Both agree only when that directory is /; otherwise the copy failed."""
        parent = posixpath.dirname(file_path)
        if not parent:
            return ""
        # the container's own working directory (its WORKDIR), not ours: that is where upstream's mkdir ran
        self.sandbox.exec(
            f"mkdir -p -- {shlex.quote(parent)}", timeout=30, cwd=getattr(self.sandbox, "image_workdir", None)
        )
        if not self._test("-d", posixpath.dirname(target)):
            return f"directory '{posixpath.dirname(target)}' does not exist"
        return ""

    def _register(self, id: str, session: _Session) -> None:
        old = self._sessions.get(id)
        if old is not None and old.proc.alive():
            self._replaced.append(old.proc)
        self._sessions[id] = session

    def _start_session(self, id: str, command: str) -> ToolResult:
        old = self._sessions.get(id)
        if old is not None and not old.ended and old.proc.alive():
            return ToolResult(
                f"Error: session '{id}' is still running. Choose another id, or stop that session first.", "failed"
            )
        self._register(id, _Session(self.sandbox.spawn(command, tty=True, cwd=self.workdir), overran=False))
        return ToolResult(
            f"Session '{id}' started.\n\nYou can use:\n"
            f"  - shell_view('{id}') - see its output\n"
            f"  - shell_write_to_process('{id}', '<input>') - send it input\n"
            f"  - shell_kill_process('{id}') - stop it"
        )

    def _view(self, session: _Session) -> str:
        if session.ended:
            return TERMINATED_EMPTY
        proc = session.proc
        if session.overran:
            if not proc.wait(0):
                return STILL_RUNNING
            session.ended = True
            return f"{terminal_text(proc.read_available())}\n\n{COMPLETED}"
        ended = proc.wait(0)  # asked before reading, so an ended session's output is all in this read
        text = session.decoder.decode(proc.read_available(), final=ended)
        if not ended:
            return text or IDLE
        session.ended = True
        return f"{text}\n\n{TERMINATED}" if text else TERMINATED_EMPTY

    def _collect(self, session: _Session, idle: float, max_wait: float) -> str:
        """Output of a session until it has been quiet for `idle` seconds, or `max_wait` has passed."""
        clock = session.proc.wait  # doubles as the pause between looks: it returns early when the process ends
        parts: list[str] = []
        start = last = time.monotonic()
        while (now := time.monotonic()) - start < max_wait:
            out = self._view(session)
            if session.ended:
                # Measured upstream: the last output was read first and the end noticed a moment later; from then
                # on each look returned the no-new-output marker, taken for fresh output, so the marker piled up
                # once per idle period until the deadline, once more at the end, then the warning. Nothing else
                # can arrive, so the same text is given at once instead of after the wait.
                if out != TERMINATED_EMPTY:
                    parts.append(out.removesuffix(f"\n\n{TERMINATED}"))
                repeats = math.ceil((max_wait - (now - start)) / idle) + 1
                return "".join(parts) + TERMINATED_EMPTY * repeats + STILL_PRINTING
            if out == IDLE:
                if now - last >= idle:
                    return "".join(parts)
            else:
                parts.append(out)
                last = now
            clock(max(0.0, min(_POLL_S, idle - (time.monotonic() - last), max_wait - (time.monotonic() - start))))
        final = self._view(session)
        if final != IDLE:
            parts.append(final)
        return "".join(parts) + STILL_PRINTING
