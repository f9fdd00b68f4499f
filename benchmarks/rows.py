"""The figures a benchmark hands the suite (`python -m benchmarks`): each next to its baseline from the same run.

A script builds `Row`s, prints them its own way, and with `--rows FILE` also writes them there as JSON; the suite
reads that file instead of parsing what the script printed. A script that finds a prerequisite missing at run time
calls `skip(reason)`: exit status SKIP, and the reason on stderr's last line.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NoReturn

SKIP = 77  # the exit status test harnesses read as "skipped"


@dataclass(frozen=True)
class Row:
    figure: str
    value: float
    unit: str  # "ms", "s", "MB", "x", "/min"
    baseline: str = ""  # what `value` is compared with, measured in the same run
    base_value: float | None = None
    goal: str = ""  # the goal set for this figure, in words
    met: bool | None = None

    @property
    def ratio(self) -> float | None:
        if self.base_value in (None, 0):
            return None
        return self.value / self.base_value


def add_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", type=Path, help="also write the figures as JSON rows to this file")


def write(rows: list[Row], path: Path | None) -> None:
    if path is not None:
        path.write_text(json.dumps([asdict(row) for row in rows], indent=1))


def read(path: Path) -> list[Row]:
    return [Row(**fields) for fields in json.loads(path.read_text())]


def skip(reason: str) -> NoReturn:
    print(f"skipped: {reason}", file=sys.stderr, flush=True)
    sys.exit(SKIP)


@contextmanager
def harbor_imports(module: str) -> Iterator[None]:
    """Imports that need Harbor: a script run outside Harbor's virtualenv (`module` is its `__name__`) is skipped."""
    try:
        yield
    except ImportError as exc:
        if module == "__main__":
            skip(f"Harbor does not load here ({exc}): run this in Harbor's virtualenv")
        raise
