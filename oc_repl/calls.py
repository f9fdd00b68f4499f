"""Model text, read the way servers read it: a leading think block, `<tool_call>` blocks and their JSON arguments.

Both sides need it: the client, which builds a reply from whatever the server returned, and the protocols, which
salvage calls a server left in the text. JSON the model wrote is read as `json.loads` reads it (its numbers and
constants included: what the training harness did), only with a bound on nesting.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from oc_repl.types import ToolCall

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
_CALL_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)
# sglang's qwen25 framing: a block only counts with the newlines inside its tags.
QWEN25_OPEN, QWEN25_CLOSE = CALL_OPEN + "\n", "\n" + CALL_CLOSE
_QWEN25_BLOCK = re.compile(re.escape(QWEN25_OPEN) + "(.*?)" + re.escape(QWEN25_CLOSE), re.S)


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


def holds_no_object(value: Any) -> bool:
    """A call's arguments as a parser hands them (OpenAI's shape: the JSON text of an object) are JSON, but of no
    object: a JSON string (of one, even), null, a list, a number. Text that is no JSON at all is a parse error."""
    if not isinstance(value, str):
        return False
    try:
        return not isinstance(bounded_json(value), dict)
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


@dataclass
class Qwen25Calls:
    """What sglang's qwen25 parser (0.5) makes of a whole reply, as the training harness used it.

    - `found`: the text holds `<tool_call>\\n`; then `content` is the text before the first one, stripped, and
      whatever follows the blocks is dropped; otherwise `content` is the text as it is and there are no calls;
    - `calls`: (name, arguments as sglang re-serialises them: `json.dumps(parameters or arguments or {})`), one per
      object of each `<tool_call>\\n...\\n</tool_call>` block (a block may hold a list of them), in order;
    - `blocks`: the text inside every such block, in order; `bad_json`: those whose JSON did not parse (sglang skips
      them and reads the others);
    - `unknown`: names of calls dropped because no tool has them (sglang's default);
    - `failed`: the parser raised (a block's JSON is not an object or a list of objects, a name is a list or an
      object; here also JSON nested deeper than MAX_DEPTH): the harness then kept the text whole and ran no call.
    """

    content: str
    found: bool = False
    calls: list[tuple[str, str]] = field(default_factory=list)
    blocks: list[str] = field(default_factory=list)
    bad_json: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    failed: bool = False


def qwen25_calls(text: str, tools: Collection[str], keep_unknown: bool = False) -> Qwen25Calls:
    """The calls of `text` by sglang's qwen25 rules, for the tools named `tools` (none: no parsing at all)."""
    start = text.find(QWEN25_OPEN)
    if start < 0 or not tools:
        return Qwen25Calls(content=text)
    blocks = _QWEN25_BLOCK.findall(text)
    parsed = Qwen25Calls(content=text[:start].strip(), found=True, blocks=blocks)
    given_up = Qwen25Calls(content=text, found=True, blocks=blocks, failed=True)
    for body in blocks:
        try:
            value = bounded_json(body.strip())
        except TooDeep:
            return given_up
        except ValueError:
            parsed.bad_json.append(body)
            continue
        for item in value if isinstance(value, list) else [value]:
            if not isinstance(item, dict):
                return given_up
            name = item.get("name")
            if name and isinstance(name, (list, dict)):  # sglang's `name in tools` raises on it
                return given_up
            if not (name and name in tools) and not keep_unknown:
                parsed.unknown.append(str(name))
                continue
            arguments = item.get("parameters") or item.get("arguments", {})
            parsed.calls.append((str(name), json.dumps(arguments, ensure_ascii=False)))
    return parsed
