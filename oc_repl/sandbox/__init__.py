"""Sandboxes: where model-chosen commands run. `open_sandbox("local:<dir>")` picks a driver from the spec."""

from __future__ import annotations

from importlib import import_module
from typing import Any

from oc_repl.errors import UsageError
from oc_repl.types import Sandbox

# scheme -> "module:class"; a driver is imported only when chosen, so its dependencies load only then.
# Each driver class offers `options_from(settings)` and `from_spec(rest, **opts)`, `rest` being what follows the
# scheme.
DRIVERS: dict[str, str] = {
    "local": "oc_repl.sandbox.local:LocalSandbox",
    "docker": "oc_repl.sandbox.docker:DockerSandbox",
    "docker-image": "oc_repl.sandbox.docker:DockerImageSandbox",
}

_FORMS = "local:<dir>, docker:<container> or docker-image:<image>"


def driver(spec: str) -> Any:
    """The driver class a spec names (imported now); it reads its own options from a run's settings
    (`options_from(settings)`) and opens a sandbox from the rest of the spec (`from_spec(rest, **options)`)."""
    scheme, sep, rest = spec.partition(":")
    if not sep or not rest:
        raise UsageError(f"sandbox {spec!r} is not of the form scheme:target", hint=f"use {_FORMS}")
    target = DRIVERS.get(scheme)
    if target is None:
        raise UsageError(f"unknown sandbox scheme {scheme!r} in {spec!r}", hint=f"use {_FORMS}")
    module, _, name = target.partition(":")
    return getattr(import_module(module), name)


def open_sandbox(spec: str, **opts: Any) -> Sandbox:
    return driver(spec).from_spec(spec.partition(":")[2], **opts)
