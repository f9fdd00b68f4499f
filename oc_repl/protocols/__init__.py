"""Protocol registry: built-in kinds plus any registered under the `oc_repl.protocols` entry point group."""

from __future__ import annotations

import hashlib
from importlib import import_module
from pathlib import Path
from typing import Any

from oc_repl.errors import UsageError
from oc_repl.types import AgentProtocol, Asset

BUILTIN: dict[str, str] = {
    "camel-terminal-toolkit": "oc_repl.protocols.camel:CamelProtocol",
    "terminus-json": "oc_repl.protocols.terminus:TerminusJson",
    "terminus-xml": "oc_repl.protocols.terminus:TerminusXml",
}

_PACKAGE_ROOT = Path(__file__).resolve().parent.parent


def data_dir(name: str) -> Path:
    """The data folder of a protocol: inside the wheel, or at the top of a source checkout."""
    for root in (_PACKAGE_ROOT / "_protocols", _PACKAGE_ROOT.parent / "protocols"):
        if (root / name).is_dir():
            return root / name
    raise UsageError(f"no data folder for protocol {name!r}")


def load_asset(protocol: str, filename: str) -> tuple[bytes, Asset]:
    path = data_dir(protocol) / filename
    data = path.read_bytes()
    return data, Asset(name=filename, sha256=hashlib.sha256(data).hexdigest(), source="built-in", path=str(path))


def _entry_points() -> dict[str, str]:
    from importlib.metadata import entry_points

    return {ep.name: ep.value for ep in entry_points(group="oc_repl.protocols")}


def names() -> list[str]:
    return sorted(set(BUILTIN) | set(_entry_points()))


def create(name: str, **options: Any) -> AgentProtocol:
    """Build a protocol; options its kind does not take (say, --history for a keystroke protocol) are left out."""
    import inspect

    target = BUILTIN.get(name) or _entry_points().get(name)
    if target is None:
        raise UsageError(f"unknown protocol {name!r}; known: {', '.join(names())}")
    module, _, attr = target.partition(":")
    cls = getattr(import_module(module), attr)
    accepted = inspect.signature(cls).parameters
    return cls(**{k: v for k, v in options.items() if k in accepted and v is not None})
