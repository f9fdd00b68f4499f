"""TOML files (config, protocol manifests, task.toml): the standard library's reader from 3.11, tomli before."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from oc_repl.errors import UsageError


def loads(text: str) -> dict[str, Any]:
    """ValueError (tomllib's TOMLDecodeError is one) when `text` is not TOML."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    return tomllib.loads(text)


def read(path: Path, what: str = "") -> dict[str, Any]:
    """The file as a table; a UsageError naming it (as `what`, e.g. "config file ") when it cannot be read."""
    try:
        return loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read {what}{path}: {exc}") from exc
