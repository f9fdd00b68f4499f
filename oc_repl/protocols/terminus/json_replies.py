"""The terminus JSON reply parser, behaving exactly like terminal-bench 0.2.18's (the model reads its messages).

A reply is `{"analysis": str, "plan": str, "commands": [{"keystrokes": str, "duration": number}],
"task_complete": bool}`. Parsing is lenient where the upstream parser is lenient (extra text, missing durations)
and its quirks are kept on purpose: the brace scan treats a backslash as an escape even outside strings, the
field order is checked on the raw object text, and unknown command fields are listed in set order. Every sentence
comes from the protocol's templates (`terminus_parse.JSON_SPEC`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from oc_repl.protocols.templates import Templates
from oc_repl.protocols.terminus.reply import Command, Findings, Parsed, autocorrected, order_warning

REQUIRED = ("analysis", "plan", "commands")
COMMAND_FIELDS = frozenset(("keystrokes", "duration"))


def parse(response: str, m: Templates) -> Parsed:
    first = _parse_once(response, m)
    if not first.error:
        return first
    # A repair counts only if the repaired reply parses without error; the first such repair wins.
    for name, repair in _REPAIRS:
        repaired = repair(response, first)
        if repaired is not None:
            second = _parse_once(repaired, m)
            if not second.error:
                return autocorrected(second, name, m)
    return first


def _parse_once(response: str, m: Templates) -> Parsed:
    found = Findings(m)
    body = _first_object(response, found)
    if not body:
        return found.failure(found.error("json.error.no_json"))
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:  # upstream catches only JSONDecodeError and would crash here
        return found.failure(_invalid_json(exc, body, found))
    error = _check_structure(data, body, found)
    if error:
        return found.failure(error)
    complete = _is_complete(data.get("task_complete", False))
    commands, error = _commands(data["commands"], found)
    notes = {"analysis": _text(data["analysis"]), "plan": _text(data["plan"])}
    if error and complete:
        # Once the model says it is done, a broken command only earns a warning: nothing runs, the claim stands.
        found.demote(error)
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
                    found.warn("json.warn.extra_before")
                if response[i + 1 :].strip():
                    found.warn("json.warn.extra_after")
                return response[start : i + 1]
    found.warn("json.warn.no_json_object")
    return ""


def _invalid_json(exc: Exception, body: str, found: Findings) -> str:
    if len(body) < 200:
        return found.error("json.error.invalid_json", exc=exc, content=repr(body))
    return found.error("json.error.invalid_json_preview", exc=exc, preview=repr(body[:100]))


def _check_structure(data: Any, body: str, found: Findings) -> str:
    if not isinstance(data, dict):
        return found.error("json.error.not_object")
    missing = [name for name in REQUIRED if name not in data]
    if missing:
        return found.error("json.error.missing_fields", fields=", ".join(missing))
    for name in ("analysis", "plan"):
        if not isinstance(data[name], str):
            found.warn("json.warn.field_not_string", field=name)
    if not isinstance(data["commands"], list):
        return found.error("json.error.commands_not_array")
    _check_order(body, found)
    flag = data.get("task_complete")
    if flag is not None and not isinstance(flag, (bool, str)):
        found.warn("json.warn.task_complete_type")
    return ""


def _check_order(body: str, found: Findings) -> None:
    """Warn when the keys are not written analysis, plan, commands; the first `"key":` anywhere counts."""
    if order := order_warning(body, REQUIRED, '"{name}"\\s*:'):
        found.warn("json.warn.wrong_order", found=order[0], expected=order[1])


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
            return [], found.error("json.error.command_not_object", i=number)
        if "keystrokes" not in item:
            return [], found.error("json.error.command_missing_keystrokes", i=number)
        keystrokes = item["keystrokes"]
        if not isinstance(keystrokes, str):
            return [], found.error("json.error.command_keystrokes_not_string", i=number)
        duration = _duration(item, number, found)
        # Set order, as upstream: with two or more unknown fields the listing order follows string hashing.
        unknown = set(item) - COMMAND_FIELDS
        if unknown:
            found.warn("json.warn.command_unknown_fields", i=number, fields=", ".join(unknown))
        if number < len(items) and not keystrokes.endswith("\n"):
            found.warn("json.warn.command_concatenation", i=number)
        commands.append(Command(keystrokes, duration))
    return commands, ""


def _duration(item: dict[str, Any], number: int, found: Findings) -> float:
    if "duration" not in item:
        found.warn("json.warn.command_missing_duration", i=number)
        return 1.0
    value = item["duration"]
    if not isinstance(value, (int, float)):  # true/false pass as numbers, as upstream
        found.warn("json.warn.command_invalid_duration", i=number)
        return 1.0
    try:
        return float(value)
    except OverflowError:  # an integer too large for a float: upstream would crash; it is simply a long wait
        return float("inf")


def _close_braces(response: str, first: Parsed) -> str | None:
    """Append as many `}` as the reply lacks, counting every brace, even those inside strings."""
    if not _worth_closing(first):
        return None
    missing = response.count("{") - response.count("}")
    return response + "}" * missing if missing > 0 else None


# An object with at most one level of nested objects and no braces elsewhere.
_FLAT_OBJECT = re.compile(r"\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\}", re.DOTALL)


def _worth_closing(first: Parsed) -> bool:
    """Upstream tries the brace repair when its error text holds one of a few phrases: those of the invalid-JSON
    and no-JSON errors, or of a decoder message quoted in one. Told apart here by what happened, not by wording."""
    return first.error_name in ("json.error.no_json", "json.error.invalid_json", "json.error.invalid_json_preview")


def _extract_object(response: str, first: Parsed) -> str | None:
    """The first shallow object in the reply that is valid JSON on its own."""
    for candidate in _FLAT_OBJECT.findall(response):
        try:
            json.loads(candidate)
        except (ValueError, RecursionError):  # upstream would crash on a deep nest; it is simply no object here
            continue
        return candidate
    return None


_REPAIRS: list[tuple[str, Callable[[str, Parsed], str | None]]] = [
    ("json.autofix.close_braces", _close_braces),
    ("json.autofix.extract_object", _extract_object),
]
