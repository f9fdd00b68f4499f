"""Where settings come from, and the one order they are layered in: flags given on the command line > environment >
config file (its profile over its top level) > defaults. Every caller resolves through `resolve`: `oc-repl run` and
the shell, `bench` (for each protocol), `doctor`, the Harbor agent, and a child run, whose parent hands it its
settings as data (`to_data`, `from_data`) with the API key in its environment.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from oc_repl import paths, tomlfile
from oc_repl.apikey import KEY_ENV, read_key_file
from oc_repl.config import FILE, OPTIONS, RunSettings, options_on, validate, with_plugins
from oc_repl.errors import UsageError

KEY = ("api_key", "api_key_file")  # one setting: the first level naming either decides


def file_keys() -> frozenset[str]:
    """The keys the config file takes: the table's rows on its surface."""
    return frozenset(option.name for option in options_on(FILE))


def load_file(path: Path | None, profile: str | None) -> dict[str, Any]:
    """Top-level keys of the file, overlaid by `[profiles.NAME]` when a profile is chosen."""
    if path is not None and not path.is_file():
        raise UsageError(f"no config file at {path}")
    path = path or paths.config_file()
    if not path.exists():
        if profile:
            raise UsageError(f"profile {profile!r} asked for, but there is no config file at {path}")
        return {}
    data = tomlfile.read(path, "config file ")
    profiles = data.pop("profiles", {})
    values = {k.replace("-", "_"): v for k, v in data.items()}
    if profile:
        if profile not in profiles:
            raise UsageError(f"no profile {profile!r} in {path}; profiles there: {', '.join(profiles) or 'none'}")
        values.update({k.replace("-", "_"): v for k, v in profiles[profile].items()})
    if set(values) - file_keys():
        with_plugins()  # an installed package's kind may own the others
    unknown = set(values) - file_keys()
    if unknown:
        raise UsageError(f"unknown keys in {path}: {', '.join(sorted(unknown))}")
    return values


def resolve(
    flags: Mapping[str, Any], file_values: Mapping[str, Any], environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The values named by the config file, the environment (each setting's variable, when set and not empty) and
    the flags given on the command line (None: not given), each level over the one below; defaults are left to
    `RunSettings`. Naming the key and the key file at one level is a usage error."""
    environ = os.environ if environ is None else environ
    from_env = {
        option.name: environ[option.env] for option in OPTIONS.values() if option.env and environ.get(option.env)
    }
    merged: dict[str, Any] = {}
    for level in (file_values, from_env, {name: value for name, value in flags.items() if value is not None}):
        named = [name for name in KEY if name in level]
        if len(named) == len(KEY):
            raise UsageError("the API key is given twice, as a key and as a key file", hint="give one of them")
        if named:
            for name in KEY:
                merged.pop(name, None)
        merged.update(level)
    return merged


def explicit(settings: RunSettings) -> dict[str, Any]:
    """The values of `settings` that were given (by a flag, the environment, a file) or differ from the defaults:
    a `Settings(...)` built in Python names what it sets only by its values."""
    return {
        name: getattr(settings, name)
        for name, option in OPTIONS.items()
        if name in settings.given or getattr(settings, name) != option.default
    }


def to_data(settings: RunSettings) -> dict[str, Any]:
    """The settings as a child run is given them (and as bench.json records them): every explicit value but the key,
    as JSON values. The key goes by the child's environment."""
    return {
        name: str(value) if isinstance(value, Path) else value
        for name, value in explicit(settings).items()
        if name not in KEY and value is not None
    }


def from_data(
    data: Any, flags: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None
) -> RunSettings:
    """A child run's settings: its parent's data, the key from the environment (nothing else of it: the parent
    resolved its own environment already), flags given on the command line over both."""
    if not isinstance(data, dict):
        raise UsageError("the settings data is not a JSON object")
    environ = os.environ if environ is None else environ
    key = {KEY_ENV: environ[KEY_ENV]} if environ.get(KEY_ENV) else {}
    return validate(resolve(flags or {}, data, key))


def configured_key() -> str:
    """The key a run would use from the environment and the default config file ("" when there is none, or it cannot
    be read): what the commands that only write records (export) redact, besides the environment's secrets."""
    try:
        values = resolve({}, load_file(None, None))
        if values.get("api_key_file"):
            return read_key_file(Path(values["api_key_file"]))
        return str(values.get("api_key") or "")
    except UsageError:
        return ""
