"""Sandboxes: where model-chosen commands run. `open_sandbox("local:<dir>")` picks a driver from the spec."""

from __future__ import annotations

from importlib import import_module
from typing import Any

from oc_repl.errors import UsageError
from oc_repl.types import Sandbox

# scheme -> "module:class"; a driver is imported only when chosen, so its dependencies load only then.
# Each driver class offers `from_spec(rest, **opts)`, `rest` being what follows the scheme.
DRIVERS: dict[str, str] = {
    "local": "oc_repl.sandbox.local:LocalSandbox",
    "docker": "oc_repl.sandbox.docker:DockerSandbox",
    "docker-image": "oc_repl.sandbox.docker:DockerImageSandbox",
}

_FORMS = "local:<dir>, docker:<container> or docker-image:<image>"


def open_sandbox(spec: str, **opts: Any) -> Sandbox:
    scheme, sep, rest = spec.partition(":")
    if not sep or not rest:
        raise UsageError(f"sandbox {spec!r} is not of the form scheme:target", hint=f"use {_FORMS}")
    target = DRIVERS.get(scheme)
    if target is None:
        raise UsageError(f"unknown sandbox scheme {scheme!r} in {spec!r}", hint=f"use {_FORMS}")
    module, _, name = target.partition(":")
    return getattr(import_module(module), name).from_spec(rest, **opts)
