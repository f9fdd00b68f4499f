"""Kinds that other installed packages register, by entry points: a protocol (`oc_repl.protocols`), a sandbox kind
(`oc_repl.sandboxes`), a wire (`oc_repl.wires`) and a task format (`oc_repl.task_formats`). Each entry point names its
kind's descriptor ("module:NAME": a ProtocolKind, SandboxKind, Wire or TaskFormat; a protocol's may name its class),
and the registries add them to the built-in kinds, with their settings rows and doctor checks.

Reading the entry points costs some 60 ms (importlib.metadata), a fifth of a run's start, so it happens only when
something asks for what the built-in kinds do not have: a name no built-in kind has (a protocol, a sandbox scheme, a
wire, a task directory of no built-in format, a setting or config key), `--help`, `doctor`, Harbor's options."""

from __future__ import annotations

import functools
from typing import Any

from oc_repl.errors import UsageError
from oc_repl.lazy import load

PROTOCOLS = "oc_repl.protocols"
SANDBOXES = "oc_repl.sandboxes"
WIRES = "oc_repl.wires"
TASK_FORMATS = "oc_repl.task_formats"


@functools.cache
def refs(group: str) -> dict[str, str]:
    """name -> "module:NAME", for each entry point of `group` an installed package declares."""
    from importlib.metadata import entry_points

    return {ep.name: ep.value for ep in entry_points(group=group)}


@functools.cache
def registered(group: str, kind: type) -> dict[str, Any]:
    """name -> the `kind` each entry point of `group` names, imported now; one that cannot be imported, or is not a
    `kind`, is a usage error naming it."""
    found = {}
    for name, ref in refs(group).items():
        try:
            value = load(ref)
        except Exception as exc:  # a plugin's own import error, whatever it is
            raise UsageError(f"the {group} entry point {name} = {ref} cannot be loaded: {exc}") from exc
        if not isinstance(value, kind):
            raise UsageError(f"the {group} entry point {name} = {ref} is not a {kind.__name__}")
        found[name] = value
    return found
