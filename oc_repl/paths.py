"""Where oc-repl keeps things on the user's machine (XDG base directories)."""

from __future__ import annotations

import os
from pathlib import Path


def _xdg(variable: str, fallback: str) -> Path:
    return Path(os.environ.get(variable) or Path.home() / fallback)


def config_dir() -> Path:
    return _xdg("XDG_CONFIG_HOME", ".config") / "oc-repl"


def config_file() -> Path:
    """The config file read when none is named (oc_repl/sources.py)."""
    return config_dir() / "config.toml"


def data_dir() -> Path:
    return _xdg("XDG_DATA_HOME", ".local/share") / "oc-repl"


def state_dir() -> Path:
    return _xdg("XDG_STATE_HOME", ".local/state") / "oc-repl"


def user_protocols_dir() -> Path:
    """User protocol folders: new protocols reusing a code kind, or overrides of a built-in one's assets."""
    return config_dir() / "protocols"


def upstream_dir() -> Path:
    """Exact upstream assets fetched by `oc-repl protocols sync`, one folder per protocol."""
    return data_dir() / "upstream"
