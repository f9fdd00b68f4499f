"""The API key, which never needs the command line: $OPENAI_API_KEY, a key file (`--api-key-file PATH`, config key
`api_key_file`) or the config file's `api_key`. `--api-key` still works, with a warning: every user of the machine
can read a process's command line.

The key and the key file are one setting under the usual precedence (flags > environment > config file): the first
level that names either decides, and naming both at one level is a usage error.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from oc_repl.errors import UsageError

ENV = "OPENAI_API_KEY"
PAIR = ("api_key", "api_key_file")
FLAG_WARNING = (
    "oc-repl: warning: --api-key puts the key on the command line, where every user of this machine can read it "
    f"(ps, /proc); set ${ENV} or use --api-key-file PATH (config key api_key_file) instead"
)


def warn_on_flag(ctx: Any, param: Any, value: str | None) -> str | None:
    """click's callback for --api-key: the key is taken, and the person told what it costs."""
    if value is not None:
        import click

        click.echo(FLAG_WARNING, err=True)
    return value


def key_options() -> list[Any]:
    """`--api-key` and `--api-key-file`, as every command that talks to the server takes them."""
    import click

    key_help = f"API key (default ${ENV}, else EMPTY); never written to records; visible to other users (a warning)."
    file_help = "File holding the API key on one line (config key api_key_file)."
    return [
        click.option("--api-key", callback=warn_on_flag, help=key_help),
        click.option("--api-key-file", type=click.Path(dir_okay=False, path_type=Path), help=file_help),
    ]


def with_key_options(fn: Any) -> Any:
    """A command decorated with `key_options()`."""
    for option in reversed(key_options()):
        fn = option(fn)
    return fn


def layered(file_values: dict[str, Any], flags: dict[str, Any]) -> dict[str, Any]:
    """The config file's values, the environment's key, then the flags, each over the one before."""
    key = os.environ.get(ENV)
    merged: dict[str, Any] = {}
    for level in (file_values, {"api_key": key} if key else {}, flags):
        named = [name for name in PAIR if name in level]
        if len(named) == len(PAIR):
            raise UsageError("the API key is given twice, as a key and as a key file", hint="give one of them")
        if named:
            for name in PAIR:
                merged.pop(name, None)
        merged.update(level)
    return merged


def read_key_file(path: Path) -> str:
    """The key a key file holds: its one line, surrounding white space left out."""
    try:
        key = path.expanduser().read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise UsageError(f"cannot read the API key file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise UsageError(f"the API key file {path} is not UTF-8 text") from None
    if not key or "\n" in key:
        raise UsageError(f"the API key file {path} must hold the key alone, on one line")
    return key


def configured_key() -> str:
    """The key a run would use from the environment and the default config file ("" when there is none, or it cannot
    be read): what the commands that only write records (export) redact, besides the environment's secrets."""
    from oc_repl.config import load_file

    try:
        values = layered(load_file(None, None), {})
        if values.get("api_key_file"):
            return read_key_file(Path(values["api_key_file"]))
        return str(values.get("api_key") or "")
    except UsageError:
        return ""
