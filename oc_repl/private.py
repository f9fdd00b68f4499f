"""Records are private: transcripts, the shell's history, bench directories and exports hold the model's commands,
their output and the task, so every file oc-repl creates for them is 0600 and every directory 0700, the directories
it creates on the way included. What exists already keeps its mode."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

FILE_MODE, DIR_MODE = 0o600, 0o700


def make_dirs(path: Path) -> Path:
    """`path` and every missing parent, each created 0700 (mkdir -p with a private mode)."""
    missing = []
    for directory in (path, *path.parents):
        if directory.is_dir():
            break
        missing.append(directory)
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made meanwhile by another process: it is what it is
            directory.mkdir(mode=DIR_MODE)
    return path


def open_private(path: Path, mode: str = "w", encoding: str | None = "utf-8") -> IO[Any]:
    """`open(path, mode)` for "w", "a", "wb" or "ab", the file created 0600 when it does not exist."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if mode.startswith("a") else os.O_TRUNC)
    fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0), FILE_MODE)
    return os.fdopen(fd, mode, encoding=None if "b" in mode else encoding)


def touch_private(path: Path) -> Path:
    """`path` exists (created 0600 and empty if it did not), in private directories."""
    make_dirs(path.parent)
    open_private(path, "ab").close()
    return path


def write_atomic(path: Path, text: str) -> None:
    """`path` holds `text`, written whole or not at all (readers see the old file or the new one, never a part), as
    a new 0600 file: a symlink at `path` is replaced, never followed."""
    with atomic_writer(path) as f:
        f.write(text)


@contextlib.contextmanager
def atomic_writer(path: Path) -> Iterator[IO[str]]:
    """A file to write `path` through: it replaces `path` when the block ends without an exception (as
    write_atomic, streamed), and is gone otherwise."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")  # mkstemp: 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
