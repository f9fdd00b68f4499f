"""camel-terminal-toolkit: shell_write_content_to_file's procedure, the project's and (without the deviation
relative_paths_in_workdir: `--exact`, or `--relative-paths root`) upstream's own."""

from __future__ import annotations

import errno
import io
import os
import posixpath
import shlex
import uuid
from typing import TYPE_CHECKING, Any, Protocol

from oc_repl.errors import SandboxError
from oc_repl.protocols.camel.args import ToolResult, python_error, unusable_path
from oc_repl.text import command_bytes

if TYPE_CHECKING:
    from oc_repl.protocols.templates import Templates
    from oc_repl.rows import Deviations
    from oc_repl.types import Sandbox


class Tools(Protocol):
    """What a file write needs of the tools that make it (tools.py: CamelTerminalTools)."""

    sandbox: Sandbox
    workdir: str
    deviations: Deviations
    m: Templates
    notices: Templates

    def ensure_workdir(self) -> None: ...

    def test(self, flag: str, path: str) -> bool: ...


def write_content(tools: Tools, content: Any, file_path: Any) -> ToolResult:
    # A path no system call can take is the model's mistake, answered as upstream's own call failed on it (its
    # `docker cp` in Python's subprocess, after a mkdir the daemon refused to start), never a sandbox failure.
    problem = unusable_path(file_path) if isinstance(file_path, str) else ""
    if problem:
        return _file_error(tools, file_path, problem)
    tools.ensure_workdir()
    if not tools.deviations.relative_paths_in_workdir:
        return _write_like_upstream(tools, content, file_path)
    target = file_path if posixpath.isabs(file_path) else posixpath.join(tools.workdir, file_path)
    return _put(tools, content, file_path, target)


def planned_kind(tools: Tools, file_path: str) -> str:
    """ "add" or "update": what a write to `file_path` would do, asked before it runs, so that the started item names
    the kind its completion will (a path no write can take is "update": it fails whatever it names)."""
    if unusable_path(file_path):
        return "update"
    if tools.deviations.relative_paths_in_workdir:
        target = file_path if posixpath.isabs(file_path) else posixpath.join(tools.workdir, file_path)
    else:
        target = posixpath.normpath(posixpath.join("/", file_path))
    return "add" if _kind(tools, target) in ("", "directory") else "update"


def _write_like_upstream(tools: Tools, content: Any, file_path: Any) -> ToolResult:
    """Upstream's steps: `mkdir -p` of the parent as given, in the container's own working directory (its
    WORKDIR), then `docker cp`, which takes the path against / and, when it names a directory, puts the file in
    it under the temporary file's name. Both agree only when the WORKDIR is /; otherwise a nested relative path
    fails."""
    try:
        parent = posixpath.dirname(file_path)
        # docker's client split the command string the way shlex does; a path that breaks it fails the call
        mkdir = shlex.split(f'sh -lc "mkdir -p {shlex.quote(parent)}"') if parent else []
    except (TypeError, ValueError) as exc:
        return _file_error(tools, file_path, exc)
    if mkdir:
        tools.sandbox.exec(shlex.join(mkdir), timeout=30, cwd=tools.sandbox.image_workdir or None)
    # the content went through a text file first
    problem = python_error(lambda: io.TextIOWrapper(io.BytesIO(), encoding="utf-8").write(content))
    if problem:
        return _file_error(tools, file_path, problem)
    target = posixpath.normpath(posixpath.join("/", file_path))
    if tools.test("-d", target):
        target = posixpath.join(target, f"temp_{uuid.uuid4().hex}.txt")
    elif not tools.test("-d", posixpath.dirname(target)):
        return _file_error(
            tools, file_path, tools.notices.render("no_directory", path=posixpath.dirname(target)), target
        )
    return _put(tools, content, file_path, target)


def _put(tools: Tools, content: str, file_path: Any, target: str) -> ToolResult:
    kind = _kind(tools, target)
    if kind == "directory":  # written as a file, it would replace the directory (the workdir itself for "" or ".")
        return _file_error(tools, file_path, IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), target), target)
    created = not kind
    try:
        tools.sandbox.write_file(target, command_bytes(content))
    except SandboxError as exc:
        return _file_error(tools, file_path, exc, target)
    return ToolResult(tools.m.render("file.ok", file_path=file_path), path=target, created=created)


def _kind(tools: Tools, path: str) -> str:
    """What is at `path` in the sandbox: "directory", "file" (anything else) or "" (nothing), in one command."""
    q = shlex.quote(path)
    script = f"if [ -d {q} ]; then echo directory; elif [ -e {q} ]; then echo file; fi"
    return tools.sandbox.exec(script, timeout=30).output.decode("utf-8", "replace").strip()


def _file_error(tools: Tools, file_path: Any, error: object, target: str = "") -> ToolResult:
    return ToolResult(tools.m.render("file.error", file_path=file_path, error=error), "failed", path=target)
