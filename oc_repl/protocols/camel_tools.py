"""The four camel terminal tools over any Sandbox, with the semantics of camel's docker backend as trained.

Every text the tools answer with is a template (toolkit.toml, `TOOLKIT_SPEC`): the built-in wording is the project's
own around the markers the reference quotes, and `oc-repl protocols sync` derives camel-ai 0.2.90's exact texts.
What a tool call raises (`ToolCallError`) is what upstream's bound method would raise; the protocol words it as the
training harness did.
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
from oc_repl.protocols.templates import Templates
from oc_repl.sandbox.text import terminal_text
from oc_repl.types import Approve, Process, Sandbox, allow_all

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
    "view.failed": ("error",),
    "view.terminated": ("output",),
    "view.terminated_empty": (),
    "write.unknown": ("id",),
    "write.no_output": ("id",),
    "write.error": ("id", "error"),
    "collect.terminated": ("output",),
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
}

# Collecting the answer to an input: done after IDLE_S without new output, or after at most MAX_S.
IDLE_S, MAX_S = 0.5, 5.0
# Before the input goes in, output still pending is collected the same way (shorter) and dropped, as upstream did.
DRAIN_IDLE_S, DRAIN_MAX_S = 0.3, 2.0
_POLL_S = 0.05
# Upstream returned whole outputs and let the prompt be cut later; one huge output would fill this model's 16k
# context on its own, so results keep their first and last halves of this many characters.
OBSERVATION_LIMIT = 16384


class ToolCallError(Exception):
    """What calling upstream's method would have raised (a TypeError for bad arguments): `type_name` and the message."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(message)
        self.type_name, self.message = type_name, message


class ToolInterrupted(KeyboardInterrupt):
    """A call stopped half-way (Ctrl-C, a signal, the agent's deadline: `reason`); `output` is what it printed until
    then, as the tool would show it."""

    def __init__(self, output: str, reason: KeyboardInterrupt) -> None:
        super().__init__(output)
        self.output, self.reason = output, reason


def cap_text(text: str, limit: int, notices: Templates) -> str:
    if limit <= 0 or len(text) <= limit:
        return text
    half = limit // 2
    marker = notices.render("observation_cut", kept=2 * half, omitted=len(text) - 2 * half)
    return f"{text[:half]}{marker}{text[-half:]}"


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
    command: str = ""  # the action as it ran, after the person watching edited it


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


def _names(keys: list[str]) -> str:
    """Parameter names listed the way Python's own TypeError lists them."""
    quoted = [f"'{key}'" for key in keys]
    if len(quoted) <= 2:
        return " and ".join(quoted)
    return ", ".join(quoted[:-1]) + ", and " + quoted[-1]


def check_arguments(name: str, arguments: Any, m: Templates, notices: Templates) -> None:
    """Raise ToolCallError for missing, unexpected or mistyped arguments, as calling the method would."""
    tool = m.render("qualname", tool=name)
    if not isinstance(arguments, dict):
        raise ToolCallError("TypeError", notices.render("arguments_not_object", tool=tool, got=_json_type(arguments)))
    params = SIGNATURES[name]
    for key in arguments:
        if key not in params:
            raise ToolCallError("TypeError", m.render("typeerror.unexpected", tool=tool, name=key))
    missing = [key for key, (_, optional) in params.items() if not optional and key not in arguments]
    if len(missing) == 1:
        raise ToolCallError("TypeError", m.render("typeerror.missing_one", tool=tool, names=_names(missing)))
    if missing:
        text = m.render("typeerror.missing_many", tool=tool, count=len(missing), names=_names(missing))
        raise ToolCallError("TypeError", text)
    for key, value in arguments.items():
        accepted = params[key][0].split("|")
        if _json_type(value) not in accepted:
            text = notices.render(
                "wrong_type", tool=tool, name=key, expected=" or ".join(accepted), got=_json_type(value)
            )
            raise ToolCallError("TypeError", text)


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
        relative_paths: Literal["workdir", "root"] = "workdir",
        observation_limit: int = OBSERVATION_LIMIT,
        exact: bool = False,
    ) -> None:
        self.sandbox = sandbox
        self.m, self.notices = m, notices
        self.observation_limit = observation_limit
        self.workdir = workdir or sandbox.workdir
        self.default_timeout = default_timeout
        self.relative_paths = relative_paths
        self.exact = exact
        self._sessions: dict[str, _Session] = {}
        self._replaced: list[Process] = []  # sessions whose id was reused: out of reach, still ours to stop
        self._workdir_ready = False
        self._approve: Approve = allow_all

    def call(self, name: str, arguments: Any, approve: Approve = allow_all) -> ToolResult:
        """Run one known tool; bad arguments raise ToolCallError, everything else comes back as text."""
        check_arguments(name, arguments, self.m, self.notices)
        self._approve = approve
        try:
            result = getattr(self, name)(**arguments)
        except SandboxLost:
            raise  # not the model's doing: the run ends with a sandbox error
        finally:
            self._approve = allow_all
        result.text = cap_text(result.text, self.observation_limit, self.notices)
        return result

    def _allowed(self, name: str, action: str) -> str | None:
        return self._approve(action)

    # --- the tools ----------------------------------------------------------------------------------------------

    def shell_exec(self, id: str, command: str, block: bool | None = True, timeout: float | None = None) -> ToolResult:
        approved = self._allowed("shell_exec", command)
        if approved is None:
            return ToolResult(self.notices.render("declined", name="shell_exec"), "declined", command=command)
        command = approved
        self._ensure_workdir()
        if not block:
            return self._start_session(id, command)
        # Upstream waited forever on an explicit null timeout; a client must not hang, so null means the default.
        limit = self.default_timeout if timeout is None else float(timeout)
        proc = self.sandbox.spawn(command, tty=False, cwd=self.workdir)
        try:
            finished = proc.wait(limit)
        except KeyboardInterrupt as stop:  # the turn stops: the command goes with it, its output is kept
            proc.kill()
            raise ToolInterrupted(self._blocking_text(proc.read_available()), stop) from None
        if not finished:
            if proc.alive():
                self._register(id, _Session(proc, overran=True))
                text = self.m.render("exec.timeout", id=id, timeout=f"{limit:g}")
                return ToolResult(text, "timed_out", command=command)
            proc.wait(1.0)  # it ended right at the deadline: let its output drain
        return ToolResult(self._blocking_text(proc.read_available()), exit_code=proc.exit_code, command=command)

    def _blocking_text(self, data: bytes) -> str:
        # upstream judged emptiness on the decoded text, before any conversion
        if data.decode("utf-8", errors="ignore").strip():
            return terminal_text(data)
        return self.m.render("exec.no_output")

    def shell_view(self, id: str) -> ToolResult:
        session = self._sessions.get(id)
        if session is None:
            return ToolResult(self.m.render("view.unknown", id=id), "failed")
        return ToolResult(self._view(session))

    def shell_write_to_process(self, id: str, command: str) -> ToolResult:
        session = self._sessions.get(id)
        if session is None or session.ended or not session.proc.alive():
            return ToolResult(self.m.render("write.unknown", id=id), "failed")
        if session.overran:
            return ToolResult(self.notices.render("blocking_session_input", id=id), "failed")
        approved = self._allowed("shell_write_to_process", f"[input to session {id}] {command}")
        if approved is None:
            text = self.notices.render("declined", name="shell_write_to_process")
            return ToolResult(text, "declined", command=command)
        command = approved.removeprefix(f"[input to session {id}] ")
        self._collect(session, DRAIN_IDLE_S, DRAIN_MAX_S)
        try:
            session.proc.write((command + "\n").encode("utf-8", "surrogateescape"))
        except SandboxError as exc:
            return ToolResult(self.m.render("write.error", id=id, error=exc), "failed", command=command)
        output = self._collect(session, IDLE_S, MAX_S)
        if not output.strip():
            return ToolResult(self.m.render("write.no_output", id=id), command=command)
        return ToolResult(output, command=command)

    def shell_write_content_to_file(self, content: str, file_path: str) -> ToolResult:
        if self._allowed("shell_write_content_to_file", f"write {len(content)} characters to {file_path}") is None:
            text = self.notices.render("declined", name="shell_write_content_to_file")
            return ToolResult(text, "declined", path=file_path)
        self._ensure_workdir()
        if posixpath.isabs(file_path):
            target = file_path
        elif self.relative_paths == "root":
            target = posixpath.join("/", file_path)
            failure = self._prepare_like_upstream(file_path, target)
            if failure:
                return ToolResult(
                    self.m.render("file.error", file_path=file_path, error=failure), "failed", path=target
                )
        else:
            target = posixpath.join(self.workdir, file_path)
        created = not self._test("-e", target)
        try:
            self.sandbox.write_file(target, content.encode("utf-8", "surrogateescape"))
        except SandboxError as exc:
            return ToolResult(self.m.render("file.error", file_path=file_path, error=exc), "failed", path=target)
        return ToolResult(self.m.render("file.ok", file_path=file_path), path=target, created=created)

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
            return ToolResult(self.m.render("exec.already_running", id=id), "failed", command=command)
        self._register(id, _Session(self.sandbox.spawn(command, tty=True, cwd=self.workdir), overran=False))
        return ToolResult(self.m.render("exec.session_started", id=id), command=command)

    def _view(self, session: _Session) -> str:
        kind, output = self._look(session)
        return output if kind == "output" else self._view_text(kind, output)

    def _look(self, session: _Session) -> tuple[str, str]:
        """What a look at a session finds: (the view template's name, or "output" for plain new output; the output)."""
        if session.ended:
            return "terminated_empty", ""
        proc = session.proc
        if session.overran:
            if not proc.wait(0):
                return "still_running", ""
            session.ended = True
            return "completed", terminal_text(proc.read_available())
        ended = proc.wait(0)  # asked before reading, so an ended session's output is all in this read
        text = session.decoder.decode(proc.read_available(), final=ended)
        if not ended:
            return ("output", text) if text else ("idle", "")
        session.ended = True
        return ("terminated", text) if text else ("terminated_empty", "")

    def _collect(self, session: _Session, idle: float, max_wait: float) -> str:
        """Output of a session until it has been quiet for `idle` seconds, or `max_wait` has passed."""
        clock = session.proc.wait  # doubles as the pause between looks: it returns early when the process ends
        parts: list[str] = []
        start = last = time.monotonic()
        while (now := time.monotonic()) - start < max_wait:
            kind, output = self._look(session)
            if session.ended:
                # Measured upstream: the last output was read first and the end noticed a moment later; from then on
                # each look returned the no-new-output marker, taken for fresh output, so the marker piled up once
                # per idle period until the deadline, once more at the end, then the warning. Nothing else can
                # arrive, so the same text is given at once instead of after the wait.
                parts.append(output)
                repeats = math.ceil((max_wait - (now - start)) / idle) + 1
                body = "".join(parts) + self.m.render("view.terminated_empty") * repeats
                return self.m.render("collect.still_outputting", output=body)
            if kind == "idle":
                if now - last >= idle:
                    return "".join(parts)
            else:
                parts.append(output if kind == "output" else self._view_text(kind, output))
                last = now
            clock(max(0.0, min(_POLL_S, idle - (time.monotonic() - last), max_wait - (time.monotonic() - start))))
        kind, output = self._look(session)
        if kind != "idle":
            parts.append(output if kind == "output" else self._view_text(kind, output))
        return self.m.render("collect.still_outputting", output="".join(parts))

    def _view_text(self, kind: str, output: str) -> str:
        return self.m.render(f"view.{kind}", **({"output": output} if kind in ("completed", "terminated") else {}))
