"""Reading JSON that anyone may have written: transcripts, bench results and plans come back from disk, and a file
can be crafted. What is read is plain JSON within limits (nesting, numbers), valid UTF-8, or a `BadInput` that names
the file and line; never a traceback from deep inside a reader."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MAX_DEPTH = 200  # far beyond any record oc-repl writes, far below what recursion in the readers would stand
MAX_INT = 2**63  # what every other JSON tool reads exactly, too


class BadInput(ValueError):
    """A file, or one line of it, that is not what it should be; `cut` when it is an unterminated last line (what a
    crash mid-write leaves)."""

    def __init__(self, path: Path, why: str, line: int | None = None, cut: bool = False) -> None:
        self.path, self.why, self.line, self.cut = path, why, line, cut
        super().__init__(f"{path}{f':{line}' if line is not None else ''}: {why}")


def _integer(text: str) -> int:
    value = int(text) if len(text) <= 20 else MAX_INT
    if not -MAX_INT <= value < MAX_INT:
        raise ValueError(f"a number out of range ({len(text)} digits)")
    return value


def _real(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"a number out of range ({text[:20]})")
    return value


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _too_deep(value: Any) -> bool:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        if depth > MAX_DEPTH:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


class _Syntax(ValueError):
    def __init__(self, exc: json.JSONDecodeError) -> None:
        super().__init__(f"not JSON ({exc.msg} at column {exc.colno})")
        self.line = exc.lineno


def loads(text: str | bytes) -> Any:
    """JSON within limits; ValueError (with a short reason) for anything else."""
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        value = json.loads(text, parse_int=_integer, parse_float=_real, parse_constant=_constant)
    except RecursionError:
        raise ValueError(f"nested more than {MAX_DEPTH} deep") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 (byte 0x{exc.object[exc.start]:02x} at column {exc.start + 1})") from None
    except json.JSONDecodeError as exc:
        raise _Syntax(exc) from None
    if isinstance(value, dict | list) and _too_deep(value):
        raise ValueError(f"nested more than {MAX_DEPTH} deep")
    return value


def load_file(path: Path) -> Any:
    """A whole JSON file; BadInput names it (and the line of a syntax error)."""
    try:
        return loads(path.read_bytes())
    except OSError as exc:
        raise BadInput(path, f"cannot be read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise BadInput(path, str(exc), getattr(exc, "line", None)) from None


def lines(path: Path, start: int = 0) -> Iterator[tuple[int, Any]]:
    """(line number, value) for every non-blank line of a JSON-lines file from line `start` on, read a line at a
    time; the value of a bad line a BadInput (marked `cut` when it is the last and has no newline): a reader decides
    whether it goes on. A file that cannot be read raises BadInput."""
    try:
        with path.open("rb") as file:
            for number, chunk in enumerate(file, 1):
                if number < start or not chunk.strip():
                    continue
                try:
                    yield number, loads(chunk)
                except ValueError as exc:
                    yield number, BadInput(path, str(exc), number, cut=not chunk.endswith(b"\n"))
    except OSError as exc:
        raise BadInput(path, f"cannot be read: {exc.strerror or exc}") from None
