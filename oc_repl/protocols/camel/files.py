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
    else:
        refusal = _copy_refusal(tools, file_path, target)
        if refusal:
            return _file_error(tools, file_path, refusal, target)
    return _put(tools, content, file_path, target)


# What `docker cp` printed on its stderr (a line of its own) when it could not put a file where upstream's write
# asked: the docker client's own error for a path that names a directory not there (pkg/archive's ErrDirNotExists),
# and the daemon's (after the client's "Error response from daemon: ") for an extraction point that is a file
# (ErrExtractPointNotDirectory) or missing (containerFileNotFound, naming the path and the container as the client
# gave them): as docker 28.2's client and 20.10's daemon print them, words docker has kept for years.
NO_SUCH_DIRECTORY = "no such directory\n"
NOT_A_DIRECTORY = "Error response from daemon: extraction point is not a directory\n"
NOT_FOUND = "Error response from daemon: Could not find the file {path} in container {container}\n"
# camel named the container it was given; a sandbox that is no container has no name to give
NO_CONTAINER = "container"


def _copy_refusal(tools: Tools, file_path: str, target: str) -> str | None:
    """Why the copy to `target` (no directory there) fails, worded by oc-repl or, without the deviation
    copy_errors_worded, as docker's client and daemon answered upstream; None when it succeeds. The client puts the
    file into the path's parent, taken as given (cleaned, not made absolute: the daemon reads it against /), unless
    the path ends as a directory's does."""
    own = tools.deviations.copy_errors_worded
    if file_path.endswith("/") or posixpath.basename(file_path) == ".":
        return tools.notices.render("no_directory", path=target) if own else NO_SUCH_DIRECTORY
    state = _parent_state(tools, posixpath.dirname(target))
    if state == "directory":
        return None
    if own or state == "under a file":  # the daemon's answer there names a path in its own storage
        return tools.notices.render("no_directory", path=posixpath.dirname(target))
    if state == "file":
        return NOT_A_DIRECTORY
    return NOT_FOUND.format(path=_cleaned_parent(file_path), container=_container_name(tools))


def _cleaned_parent(path: str) -> str:
    """The parent as docker's client names it: Go's filepath.Dir of filepath.Clean (which, unlike posixpath, makes a
    leading // one /)."""
    parent = posixpath.dirname(posixpath.normpath(path)) or "."
    return "/" + parent.lstrip("/") if parent.startswith("//") else parent


def _container_name(tools: Tools) -> str:
    """The container the sandbox is, by the spec it is taken up again with (a container kind's target)."""
    from oc_repl.errors import UsageError
    from oc_repl.sandbox.kinds import kind_of, target_of

    spec = tools.sandbox.reattach()
    try:
        return NO_CONTAINER if kind_of(spec).on_host else target_of(spec)
    except UsageError:  # a sandbox no kind names (a harness's environment)
        return NO_CONTAINER


def _parent_state(tools: Tools, path: str) -> str:
    """What is at the absolute, normalised `path`, in one command: "directory", "file" (anything else), "missing"
    (its nearest existing ancestor a directory) or "under a file" (that ancestor not a directory)."""
    q = shlex.quote(path)
    script = (
        f'p={q}; if [ -d "$p" ]; then echo directory; elif [ -e "$p" ] || [ -L "$p" ]; then echo file; else '
        'while [ ! -e "$p" ] && [ ! -L "$p" ]; do p="${p%/*}"; p="${p:-/}"; done; '
        'if [ -d "$p" ]; then echo missing; else echo under a file; fi; fi'
    )
    return tools.sandbox.exec(script, timeout=30).output.decode("utf-8", "replace").strip()


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
