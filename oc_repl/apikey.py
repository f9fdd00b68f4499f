"""The API key, which never needs the command line: $OPENAI_API_KEY, a key file (`--api-key-file PATH`, config key
`api_key_file`) or the config file's `api_key`. `--api-key` still works, with a warning: every user of the machine
can read a process's command line.

The key and the key file are one setting under the usual precedence (oc_repl/sources.py): the first level that names
either decides, and naming both at one level is a usage error. A child run gets the key by its environment, never in
its settings data or its command line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from oc_repl.errors import UsageError

KEY_ENV = "OPENAI_API_KEY"
FLAG_WARNING = (
    "oc-repl: warning: --api-key puts the key on the command line, where every user of this machine can read it "
    f"(ps, /proc); set ${KEY_ENV} or use --api-key-file PATH (config key api_key_file) instead"
)


def warn_on_flag(ctx: Any, param: Any, value: str | None) -> str | None:
    """click's callback for a secret's flag: the value is taken, and the person told what it costs."""
    if value is not None:
        import click

        click.echo(FLAG_WARNING, err=True)
    return value


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
