"""Implementations named as "module:name" strings, so a registry of kinds stays cheap to import and each
implementation (and what it needs) loads only when chosen."""

from __future__ import annotations

from importlib import import_module
from typing import Any


def load(ref: str) -> Any:
    """The object `ref` ("module:name") names, its module imported now."""
    module, _, name = ref.partition(":")
    return getattr(import_module(module), name)
