"""A camel tool call: its result, and what calling upstream's bound method with its arguments would raise.

Python itself checks a call's keywords (missing and unexpected ones); the texts are templates of toolkit.toml, so a
sync makes them Python's own wording for the toolkit's methods. Upstream checks no types: the project does, in its
own words (notices.toml), while the deviation argument_types_checked is on. Inside a method upstream's code met a
value of another type with Python operations of its own; `python_error` performs the same operation here so the
message is Python's, not ours.
"""

from __future__ import annotations

import os
import shlex
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from oc_repl.protocols.templates import Templates


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


@dataclass
class ToolResult:
    text: str  # what the model reads
    status: Literal["completed", "failed", "timed_out", "declined"] = "completed"
    exit_code: int | None = None  # known for finished blocking commands; never shown to the model
    path: str = ""  # the file written, for file changes
    created: bool = False
    command: str = ""  # the action as it ran, after the person watching edited it


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


def json_type(value: Any) -> str:
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


def check_arguments(name: str, arguments: Any, m: Templates, notices: Templates, *, types: bool = True) -> None:
    """Raise ToolCallError for missing or unexpected arguments, as calling the method would, and (when `types`) for
    arguments of a JSON type the tool's schema does not allow."""
    tool = m.render("qualname", tool=name)
    if not isinstance(arguments, dict):
        raise ToolCallError("TypeError", notices.render("arguments_not_object", tool=tool, got=json_type(arguments)))
    params = SIGNATURES[name]
    for key in arguments:  # Python reports an unexpected keyword before missing ones
        if key not in params:
            raise ToolCallError("TypeError", m.render("typeerror.unexpected", tool=tool, name=key))
    missing = [key for key, (_, optional) in params.items() if not optional and key not in arguments]
    if len(missing) == 1:
        raise ToolCallError("TypeError", m.render("typeerror.missing_one", tool=tool, names=_names(missing)))
    if missing:
        text = m.render("typeerror.missing_many", tool=tool, count=len(missing), names=_names(missing))
        raise ToolCallError("TypeError", text)
    if not types:
        return
    for key, value in arguments.items():
        accepted = params[key][0].split("|")
        if json_type(value) not in accepted:
            text = notices.render(
                "wrong_type", tool=tool, name=key, expected=" or ".join(accepted), got=json_type(value)
            )
            raise ToolCallError("TypeError", text)


def python_error(operation: Callable[[], object]) -> str:
    """The message of the exception an operation raises, "" when it raises none."""
    try:
        operation()
    except (TypeError, ValueError, OverflowError, AttributeError) as exc:  # UnicodeError is a ValueError
        return str(exc)
    return ""


def unusable_path(path: str) -> str:
    """Why no system call can take `path`, as Python says it ("" when one can): a NUL byte, or a lone surrogate."""
    if "\0" in path:
        return "embedded null byte"  # Python's ValueError for a path or an argument holding one
    return python_error(lambda: os.fsencode(path))


def join_error(timeout: Any) -> str:
    """Why upstream's `thread.join(timeout)` would raise for this value ("" if it would wait): join takes
    `max(timeout, 0)` and hands it to a lock, which checks it before waiting; a fresh lock is taken at once."""
    return python_error(lambda: threading.Lock().acquire(True, max(timeout, 0)))


def missing_attribute(obj: object, name: str) -> str:
    """Python's text for reading an attribute an object lacks."""
    return python_error(lambda: getattr(obj, name))


def upstream_command(command: Any) -> str:
    """The command upstream ran for a value of any type: it quoted it for `bash -c` first (Python's TypeError for a
    value that is not text) and `shlex.quote` turns every false value into the empty command."""
    problem = python_error(lambda: shlex.quote(command))
    if problem:
        raise ToolCallError("TypeError", problem)
    return command if command else ""
