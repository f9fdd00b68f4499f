"""The terminus JSON reply parser, behaving exactly like terminal-bench 0.2.18's (the model reads its messages).

A reply is `{"analysis": str, "plan": str, "commands": [{"keystrokes": str, "duration": number}],
"task_complete": bool}`. Parsing is lenient where the upstream parser is lenient (extra text, missing durations)
and its quirks are kept on purpose: the brace scan treats a backslash as an escape even outside strings, the
field order is checked on the raw object text, and unknown command fields are listed in set order.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from oc_repl.protocols.terminus_parse import (
    Command,
    Findings,
    Parsed,
    autocorrected,
    concatenation_warning,
    order_warning,
)

REQUIRED = ("analysis", "plan", "commands")
COMMAND_FIELDS = frozenset(("keystrokes", "duration"))


def parse(response: str) -> Parsed:
    first = _parse_once(response)
    if not first.error:
        return first
    # A repair counts only if the repaired reply parses without error; the first such repair wins.
    for name, repair in _REPAIRS:
        repaired = repair(response, first.error)
        if repaired is not None:
            second = _parse_once(repaired)
            if not second.error:
                return autocorrected(second, name)
    return first


def _parse_once(response: str) -> Parsed:
    found = Findings()
    body = _first_object(response, found)
    if not body:
        return found.failure("No valid JSON found in response")
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:  # upstream catches only JSONDecodeError and would crash here
        return found.failure(_invalid_json(exc, body))
    error = _check_structure(data, body, found)
    if error:
        return found.failure(error)
    complete = _is_complete(data.get("task_complete", False))
    commands, error = _commands(data["commands"], found)
    notes = {"analysis": _text(data["analysis"]), "plan": _text(data["plan"])}
    if error and complete:
        # Once the model says it is done, a broken command only earns a warning: nothing runs, the claim stands.
        found.add(error)
        return found.result([], True, **notes)
    if error:
        return found.failure(error)
    return found.result(commands, complete, **notes)


def _first_object(response: str, found: Findings) -> str:
    """The first balanced `{…}`, skipping braces inside strings; notes any text around it."""
    depth, start, in_string, escaped = 0, -1, False, False
    for i, char in enumerate(response):
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == '"':
            in_string = not in_string
        elif in_string:
            continue
        elif char == "{":
            if depth == 0:
                start = i
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0 and start != -1:
                if response[:start].strip():
                    found.add("Extra text detected before JSON object")
                if response[i + 1 :].strip():
                    found.add("Extra text detected after JSON object")
                return response[start : i + 1]
    found.add("No valid JSON object found")
    return ""


def _invalid_json(exc: Exception, body: str) -> str:
    if len(body) < 200:
        return f"Invalid JSON: {exc} | Content: {body!r}"
    return f"Invalid JSON: {exc} | Content preview: {body[:100]!r}..."


def _check_structure(data: Any, body: str, found: Findings) -> str:
    if not isinstance(data, dict):
        return "Response must be a JSON object"
    missing = [name for name in REQUIRED if name not in data]
    if missing:
        return f"Missing required fields: {', '.join(missing)}"
    for name in ("analysis", "plan"):
        if not isinstance(data[name], str):
            found.add(f"Field '{name}' should be a string")
    if not isinstance(data["commands"], list):
        return "Field 'commands' must be an array"
    _check_order(body, found)
    flag = data.get("task_complete")
    if flag is not None and not isinstance(flag, (bool, str)):
        found.add("Field 'task_complete' should be a boolean or string")
    return ""


def _check_order(body: str, found: Findings) -> None:
    """Warn when the keys are not written analysis, plan, commands; the first `"key":` anywhere counts."""
    if warning := order_warning(body, REQUIRED, '"{name}"\\s*:', "Fields"):
        found.add(warning)


def _is_complete(flag: Any) -> bool:
    if isinstance(flag, str):
        return flag.lower() in ("true", "1", "yes")
    return bool(flag)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _commands(items: list[Any], found: Findings) -> tuple[list[Command], str]:
    commands = []
    for number, item in enumerate(items, 1):
        if not isinstance(item, dict):
            return [], f"Command {number} must be an object"
        if "keystrokes" not in item:
            return [], f"Command {number} missing required 'keystrokes' field"
        keystrokes = item["keystrokes"]
        if not isinstance(keystrokes, str):
            return [], f"Command {number} 'keystrokes' must be a string"
        duration = _duration(item, number, found)
        # Set order, as upstream: with two or more unknown fields the listing order follows string hashing.
        unknown = set(item) - COMMAND_FIELDS
        if unknown:
            found.add(f"Command {number}: Unknown fields: {', '.join(unknown)}")
        if number < len(items) and not keystrokes.endswith("\n"):
            found.add(concatenation_warning(number))
        commands.append(Command(keystrokes, duration))
    return commands, ""


def _duration(item: dict[str, Any], number: int, found: Findings) -> float:
    if "duration" not in item:
        found.add(f"Command {number}: Missing duration field, using default 1.0")
        return 1.0
    value = item["duration"]
    if not isinstance(value, (int, float)):  # true/false pass as numbers, as upstream
        found.add(f"Command {number}: Invalid duration value, using default 1.0")
        return 1.0
    try:
        return float(value)
    except OverflowError:  # an integer too large for a float: upstream would crash; it is simply a long wait
        return float("inf")


def _close_braces(response: str, error: str) -> str | None:
    """Append as many `}` as the reply lacks, counting every brace, even those inside strings."""
    if not any(hint in error for hint in ("Invalid JSON", "Expecting", "Unterminated", "No valid JSON found")):
        return None
    missing = response.count("{") - response.count("}")
    return response + "}" * missing if missing > 0 else None


# An object with at most one level of nested objects and no braces elsewhere.
_FLAT_OBJECT = re.compile(r"\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\}", re.DOTALL)


def _extract_object(response: str, error: str) -> str | None:
    """The first shallow object in the reply that is valid JSON on its own."""
    for candidate in _FLAT_OBJECT.findall(response):
        try:
            json.loads(candidate)
        except ValueError:
            continue
        return candidate
    return None


_REPAIRS: list[tuple[str, Callable[[str, str], str | None]]] = [
    ("Fixed incomplete JSON by adding missing closing brace", _close_braces),
    ("Extracted JSON from mixed content", _extract_object),
]
