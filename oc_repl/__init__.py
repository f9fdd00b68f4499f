"""oc-repl: drive small RL-trained terminal agents behind an OpenAI-compatible API.

The Python API (`oc_repl.api`) is exported here lazily, so `oc-repl --version` imports nothing heavy:
`from oc_repl import run_task, iter_events, load_task, Settings, TaskResult, Status, events`.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "run_task": "oc_repl.api",
    "iter_events": "oc_repl.api",
    "RunProcess": "oc_repl.api",
    "Settings": "oc_repl.api",
    "TaskResult": "oc_repl.api",
    "load_task": "oc_repl.tasks.model",
    "find_tasks": "oc_repl.tasks.model",
    "TaskDir": "oc_repl.tasks.model",
    "Status": "oc_repl.outcome",
    "read_events": "oc_repl.transcript",
}
__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'oc_repl' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
