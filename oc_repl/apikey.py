"""The API key, which never needs the command line: $OPENAI_API_KEY, a key file (`--api-key-file PATH`, config key
`api_key_file`) or the config file's `api_key`. `--api-key` still works, with a warning: every user of the machine
can read a process's command line. Once the options are parsed the key is overwritten there (as database clients do
with a password), which leaves it readable only for the moment before.

The key and the key file are one setting under the usual precedence (oc_repl/sources.py): the first level that names
either decides, and naming both at one level is a usage error. A child run gets the key by its environment, never in
its settings data or its command line.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from oc_repl.errors import UsageError

KEY_ENV = "OPENAI_API_KEY"
FLAG_WARNING = (
    "oc-repl: warning: --api-key puts the key on the command line, where every user of this machine can read it "
    f"(ps, /proc); set ${KEY_ENV} or use --api-key-file PATH (config key api_key_file) instead"
)


def warn_on_flag(ctx: Any, param: Any, value: str | None) -> str | None:
    """click's callback for a secret's flag: the value is taken, wiped from the command line others can read, and
    the person told what it cost. It runs as the options are parsed, before any request or sandbox."""
    if value is not None:
        import click

        scrub_command_line(value, param.opts)
        click.echo(FLAG_WARNING, err=True)
    return value


def _argument_spans(area: bytes, value: bytes, flags: Sequence[bytes]) -> list[tuple[int, int]]:
    """Where in the NUL-separated arguments `area` the value of one of `flags` stands (`--flag VALUE`, `--flag=VALUE`),
    as (offset, length): that value only, so a short key never wipes a word of the instruction that happens to match."""
    spans, offset, previous = [], 0, b""
    for arg in area.split(b"\0"):
        if arg == value and previous in flags:
            spans.append((offset, len(arg)))
        for flag in flags:
            if arg == flag + b"=" + value:
                spans.append((offset + len(flag) + 1, len(value)))
        offset, previous = offset + len(arg) + 1, arg
    return spans


def scrub_command_line(value: str, flags: Sequence[str]) -> None:
    """Overwrite `value` with x's where this process's command line gives it to one of `flags`, in the memory that
    /proc/PID/cmdline (and so ps) reads: the stack area the kernel's arg_start and arg_end bound (fields 48 and 49 of
    /proc/self/stat), written through /proc/self/mem. sys.argv is Python's own copy, untouched. Where that cannot be
    done (not Linux, or /proc/self/mem refused), the command line stays as it was: the warning says so anyway."""
    try:
        fields = Path("/proc/self/stat").read_bytes().rsplit(b")", 1)[1].split()
        start, end = int(fields[45]), int(fields[46])  # after the command's name, field N is at N - 3
        with open("/proc/self/mem", "r+b", buffering=0) as mem:
            mem.seek(start)
            area = mem.read(end - start)
            needle = os.fsencode(value)
            for at, length in _argument_spans(area, needle, [os.fsencode(flag) for flag in flags]):
                mem.seek(start + at)
                mem.write(b"x" * length)
    except (OSError, ValueError, IndexError):
        return


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
