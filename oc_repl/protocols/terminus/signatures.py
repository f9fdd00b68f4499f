"""The ways a terminus trial fails that its outcome hides, read off its turns (bench/signatures.py asks the protocol's
kind): replies that only waited on the terminal they watch."""

from __future__ import annotations

import re
from typing import Any

from oc_repl.events import TERMINAL_TOOL

# a reply that marks the task complete (JSON or XML) is an answer, not a wait
_COMPLETES = re.compile(r"task_complete[\"'\s:>]*true", re.IGNORECASE)


def idle_turns(turns: list[list[dict[str, Any]]]) -> list[str]:
    """`turns`: the completed items of each turn that got a reply."""
    if not any(item.get("tool") == TERMINAL_TOOL for items in turns for item in items):
        return []  # no terminal was watched
    idle = sum(1 for items in turns if items and not any(_waits_not(item) for item in items))
    return [f"idle_turns: {idle} of {len(turns)} replies only waited"] if idle else []


def _waits_not(item: dict[str, Any]) -> bool:
    """An item of a turn that is more than waiting: keys typed, a reply that could not be read, or one that says the
    task is complete."""
    if item.get("type") == "parse_error":
        return True
    if item.get("type") == "agent_message":
        return bool(_COMPLETES.search(str(item.get("text") or "")))
    return item.get("type") == "command_execution" and item.get("tool") != TERMINAL_TOOL and bool(item.get("command"))
