"""Sandboxes: where model-chosen commands run. `open_sandbox("local:<dir>")` picks a driver from the spec's kind
(kinds.py)."""

from __future__ import annotations

from typing import Any

from oc_repl.lazy import load
from oc_repl.sandbox.kinds import kind_of, target_of
from oc_repl.types import Sandbox


def driver(spec: str) -> Any:
    """The driver class a spec names (imported now): it opens a sandbox from the spec's target with its kind's
    settings and the core's sandbox facts its kind takes (`from_spec(target, **options)`: plan.sandbox_options)."""
    return load(kind_of(spec).driver)


def open_sandbox(spec: str, **opts: Any) -> Sandbox:
    return driver(spec).from_spec(target_of(spec), **opts)
