"""Model text, read the way servers read it: a leading think block, `<tool_call>` blocks and their JSON arguments.

Both sides need it: the client, which builds a reply from whatever the server returned, and the protocols, which
salvage calls a server left in the text. JSON the model wrote is read as `json.loads` reads it (its numbers and
constants included: what the training harness did), only with a bound on nesting.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from oc_repl.types import ToolCall

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
_CALL_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)


# Far below the interpreter's recursion limit (1000), so whatever was read can be written out again from anywhere in
# the program (transcript, events); far above any real reply (tool arguments nest two or three levels).
MAX_DEPTH = 100


class TooDeep(ValueError):
    """JSON nested deeper than MAX_DEPTH: what a model stuck repeating `[` writes."""


def bounded_json(text: str) -> Any:
    """json.loads for untrusted text: deep nesting is a ValueError (TooDeep), never a RecursionError."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise TooDeep(f"JSON nested deeper than {MAX_DEPTH} levels") from None
    if isinstance(value, (dict, list)) and text.count("[") + text.count("{") > MAX_DEPTH:
        _check_depth(value)  # only a text with that many brackets can nest that deep
    return value


def _check_depth(value: Any) -> None:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise TooDeep(f"JSON nested deeper than {MAX_DEPTH} levels")
        for child in item.values() if isinstance(item, dict) else item:
            if isinstance(child, (dict, list)):
                stack.append((child, depth + 1))


def new_call_id() -> str:
    return "call_" + os.urandom(12).hex()  # what secrets.token_hex does, without importing hmac and random


def split_think(text: str) -> tuple[str | None, str]:
    """(inner text of a leading think block or None, the rest with its leading whitespace removed).

    An unterminated leading block is all reasoning: the model was cut while thinking.
    """
    s = text.lstrip()
    if s.startswith(THINK_OPEN):
        end = s.find(THINK_CLOSE)
        if end < 0:
            return s[len(THINK_OPEN) :], ""
        return s[len(THINK_OPEN) : end], s[end + len(THINK_CLOSE) :].lstrip()
    if s.startswith(THINK_CLOSE):  # the template prefilled the opening tag
        return "", s[len(THINK_CLOSE) :].lstrip()
    return None, s


def is_json_object(text: str) -> bool:
    try:
        return isinstance(bounded_json(text), dict)
    except ValueError:
        return False


def parse_arguments(value: Any) -> dict[str, Any] | None:
    """A JSON object from a dict or a (possibly double-encoded) JSON string; None if it is not one."""
    for _ in range(3):
        if isinstance(value, dict):
            return value
        if not isinstance(value, str):
            return None
        try:
            value = bounded_json(value)
        except ValueError:
            return None
    return value if isinstance(value, dict) else None


def _call_from_json(text: str) -> ToolCall | None:
    try:
        obj = bounded_json(text)
    except ValueError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return None
    raw_args = obj["arguments"] if "arguments" in obj else obj.get("parameters", {})
    args = {} if raw_args is None else parse_arguments(raw_args)
    if args is None:
        return None
    return ToolCall(id=new_call_id(), name=obj["name"], arguments=args, source="salvaged")


def salvage_calls(text: str) -> tuple[list[ToolCall], list[str], str]:
    """Calls written as <tool_call> markup: (calls, malformed block texts, text with the markup removed).

    Malformed blocks leave the text too: they are reported separately, and showing them as prose
    would only repeat them.
    """
    if CALL_OPEN not in text:
        return [], [], text
    calls: list[ToolCall] = []
    bad: list[str] = []
    kept: list[str] = []
    pos = 0
    for m in _CALL_BLOCK.finditer(text):
        kept.append(text[pos : m.start()])
        pos = m.end()
        call = _call_from_json(m.group(1).strip())
        if call is None:
            bad.append(m.group(0))
        else:
            calls.append(call)
    rest = text[pos:]
    cut = rest.find(CALL_OPEN)
    if cut >= 0:  # an unterminated trailing block: the model was cut or lost its way
        bad.append(rest[cut:])
        rest = rest[:cut]
    kept.append(rest)
    return calls, bad, "".join(kept).strip()


def render_call(name: str, arguments: Any) -> str:
    """A call that cannot run, written back as markup so it can be shown and quoted. Arguments sent as text go in as
    they came: empty ones leave the block unreadable, as they were."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return f'{CALL_OPEN}\n{{"name": {json.dumps(name)}, "arguments": {args}}}\n{CALL_CLOSE}'
