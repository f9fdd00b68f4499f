"""One task model for both task-directory formats: terminal-bench 1.x (`task.yaml`) and Harbor (`task.toml`).

`load_task(dir)` reads either into a `TaskDir` (what the task brings: its instruction, image, limits and the verifier
that judges it after the agent); `find_tasks(paths)` expands folders of task dirs. A task describes; the run's plan
(oc_repl/plan.py) opens its container.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from oc_repl import plugins
from oc_repl.errors import UsageError
from oc_repl.lazy import load
from oc_repl.rows import Option

if TYPE_CHECKING:
    from oc_repl.tasks.verify import Verifier

Network = Literal["none", "public"]  # no network at all, or the daemon's bridge where it has one


@dataclass(frozen=True)
class TaskFormat:
    """A task-directory format: the file that marks a directory of it, and its loader and verifier ("module:name",
    imported when a task of it is read or judged)."""

    name: str
    spec_file: str
    loader: str  # (path) -> TaskDir
    verifier: str  # (TaskDir) -> Verifier
    options: tuple[Option, ...] = ()  # its settings
    doctor: str = ""  # "module:name" of its check of this machine, for `doctor`: () -> (name, status, finding, fix)

    def part(self, which: str) -> Any:
        return load(getattr(self, which))


HARBOR = TaskFormat(
    "harbor", "task.toml", "oc_repl.tasks.harbor_format:load_harbor_dir", "oc_repl.tasks.harbor_format:HarborVerifier"
)
TERMINAL_BENCH = TaskFormat(
    "terminal-bench", "task.yaml", "oc_repl.tasks.terminal_bench:load_task_dir",
    "oc_repl.tasks.terminal_bench:TaskVerifier",
)  # fmt: skip
FORMATS = {f.name: f for f in (HARBOR, TERMINAL_BENCH)}  # in the order a directory marked as both is read
Format = str  # a name in FORMATS
SOLUTIONS = ("solution.sh", "solution", "solution.yaml")  # the reference solutions: no trial sees them


@dataclass
class TaskDir:
    path: Path
    name: str
    instruction: str
    format: Format
    agent_timeout_sec: float  # the agent phase is stopped then (outcome agent_timeout)
    test_timeout_sec: float  # the tests are killed then (failure mode test_timeout)
    context: Path  # the docker build context
    dockerfile: Path | None  # None: the task names a ready image instead
    image: str | None = None  # a ready image (Harbor's [environment] docker_image)
    build_timeout_sec: float | None = None
    cpus: float | None = None
    memory_mb: int | None = None
    verifier_user: str = "root"
    network: Network = "none"  # what the format declares for the agent's container (see `task_network`)

    def content_hash(self) -> str:
        """sha256 over what a trial of this task meets: every file of its directory (the instruction, the tests, the
        environment) by its relative path, links by their target; the solutions aside, which no trial sees."""
        digest = hashlib.sha256()
        for path in sorted(self.path.rglob("*")):
            relative = path.relative_to(self.path)
            if relative.parts[0] in SOLUTIONS or not (path.is_symlink() or path.is_file()):
                continue
            data = os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
            digest.update(f"{relative.as_posix()}\0{'link' if path.is_symlink() else 'file'}\0{len(data)}\0".encode())
            digest.update(data)
        return digest.hexdigest()

    def verifier(self) -> Verifier:
        """What judges a run of this task once the agent is done (in the image's WORKDIR)."""
        return (FORMATS.get(self.format) or known_formats()[self.format]).part("verifier")(self)


def known_formats() -> dict[str, TaskFormat]:
    """The built-in formats, and those installed packages register (oc_repl/plugins.py)."""
    return {**FORMATS, **{f.name: f for f in plugins.registered(plugins.TASK_FORMATS, TaskFormat).values()}}


def format_of(path: Path) -> TaskFormat | None:
    """The format of a task directory, by the file that marks it (the first format's, when it has two); the formats
    installed packages register are looked at only for a directory no built-in one marks."""
    for formats in (FORMATS, known_formats()):
        if found := next((f for f in formats.values() if (path / f.spec_file).is_file()), None):
            return found
    return None


def is_task_dir(path: Path) -> bool:
    return format_of(path) is not None


def load_task(path: Path | str) -> TaskDir:
    """A task directory of a known format; UsageError naming what is wrong when it is none or malformed."""
    path = Path(path)
    found = format_of(path)
    if found is not None:
        return found.part("loader")(path)
    marks = " nor ".join(f"{f.spec_file} ({f.name})" for f in known_formats().values())
    raise UsageError(
        f"{path} is not a task directory: it has neither {marks}",
        hint="give a task directory, or a folder whose subfolders are task directories",
    )


def find_tasks(paths: Iterable[Path | str]) -> list[TaskDir]:
    """Each path is a task directory or a folder of them (its subfolders that are task dirs, by name)."""
    found: list[TaskDir] = []
    for raw in paths:
        path = Path(raw)
        if not path.is_dir():
            raise UsageError(f"{path} is not a directory")
        if is_task_dir(path):
            found.append(load_task(path))
            continue
        subdirs = sorted(p for p in path.iterdir() if p.is_dir() and is_task_dir(p))
        if not subdirs:
            raise UsageError(f"{path} is neither a task directory nor a folder of task directories")
        found.extend(load_task(p) for p in subdirs)
    names = [t.name for t in found]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UsageError(f"two tasks share a name: {', '.join(twice)}", hint="task names are their folders' names")
    return found


def seconds(value: Any, where: str, key: str, default: float | None) -> float | None:
    """A positive, finite number of seconds, or `default` when absent."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < float("inf"):
        raise UsageError(f"{where}: {key} must be a positive number of seconds, not {value!r}")
    return float(value)
