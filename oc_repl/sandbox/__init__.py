"""Sandboxes: where model-chosen commands run. `open_sandbox("local:<dir>")` picks a driver from the spec's kind
(kinds.py)."""

from __future__ import annotations

from typing import Any

from oc_repl.lazy import load
from oc_repl.sandbox.kinds import kind_of, target_of
from oc_repl.types import Sandbox


def driver(spec: str) -> Any:
    """The driver class a spec names (imported now); it reads its own options from a run's settings
    (`options_from(settings)`) and opens a sandbox from the spec's target (`from_spec(target, **options)`)."""
    return load(kind_of(spec).driver)


def open_sandbox(spec: str, **opts: Any) -> Sandbox:
    return driver(spec).from_spec(target_of(spec), **opts)
