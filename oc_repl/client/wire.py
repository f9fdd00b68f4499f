"""Pure functions over chat wire data: history clean-up, stream accumulation, salvage, the normalised reply.

Nothing here touches the network or imports the SDK, so every rule about server shapes
(reference/wire-formats.md) can be exercised directly and cheaply.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

from oc_repl.calls import (
    QWEN25_CLOSE,
    QWEN25_OPEN,
    holds_no_object,
    is_json_object,
    new_call_id,
    parse_arguments,
    qwen25_calls,
    render_call,
    salvage_calls,
    split_think,
)
from oc_repl.types import Reply, ToolCall, Usage

# --- history ---------------------------------------------------------------------------------------


def _history_arguments(arguments: Any, memo: dict[str, str] | None) -> Any:
    """Arguments as a JSON object string; anything that is not one becomes "{}".

    Servers parse history arguments before templating (sglang answers 500 on invalid JSON) and the
    Qwen3 template renders an object, so a cut or garbled string cannot go back verbatim. A string
    that already holds an object is kept byte for byte (the very object, so callers can tell by identity).
    `memo` remembers the answer per string, so a long conversation is not parsed again every turn.
    """
    if not isinstance(arguments, str):
        return _reencoded(arguments)
    known = memo.get(arguments) if memo is not None else None
    if known is None:
        known = arguments if is_json_object(arguments) else _reencoded(arguments)
        if memo is not None:
            memo[arguments] = known
    return known


def _reencoded(arguments: Any) -> str:
    parsed = parse_arguments(arguments)
    return json.dumps(parsed if parsed is not None else {}, ensure_ascii=False)


def normalise_history(messages: list[dict[str, Any]], memo: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Copies only the assistant messages that need fixing; the caller's list is never mutated."""
    out = messages
    for i, msg in enumerate(messages):
        if msg.get("role") != "assistant":
            continue
        fixed = msg
        if msg.get("content") is None:  # llama-cpp-python rejects null content next to tool calls
            fixed = {**msg, "content": ""}
        calls = msg.get("tool_calls")
        if calls:
            new_calls = []
            for call in calls:
                fn = call.get("function") or {}
                args = fn.get("arguments")
                text = _history_arguments(args, memo)
                new_calls.append(call if text is args else {**call, "function": {**fn, "arguments": text}})
            if any(a is not b for a, b in zip(new_calls, calls, strict=True)):
                fixed = {**fixed, "tool_calls": new_calls}
        if fixed is not msg:
            if out is messages:
                out = list(messages)
            out[i] = fixed
    return out


# --- stream accumulation -------------------------------------------------------------------------------


class StreamAccumulator:
    """Builds one assistant message from chunk dicts, whatever each server repeats or omits."""

    def __init__(self) -> None:
        self.content: list[str] = []
        self.saw_content = False
        self.reasoning: list[str] = []
        self.reasoning_key = ""
        self.calls: list[dict[str, Any]] = []
        self._by_index: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None

    def add(self, chunk: dict[str, Any]) -> tuple[str, str, bool]:
        """Folds one chunk in; returns (content delta, reasoning delta, whether a call moved)."""
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        choices = chunk.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices else None
        if not isinstance(choice, dict):  # no choices (the usage chunk), or a malformed one: nothing to fold
            return "", "", False
        self.finish_reason = read_finish_reason(choice.get("finish_reason")) or self.finish_reason
        delta = _dict(choice.get("delta"))
        text = delta.get("content")
        self.saw_content = self.saw_content or isinstance(text, str)
        text = text if isinstance(text, str) else ""
        self.content.append(text)
        thought = ""
        for key in ("reasoning_content", "reasoning"):
            if isinstance(value := delta.get(key), str) and value:
                self.reasoning_key = self.reasoning_key or key
                self.reasoning.append(value)
                thought = value
                break
        parts = [p for p in delta.get("tool_calls") or [] if isinstance(p, dict)]  # servers have sent `[null]`
        for part in parts:
            self._add_call(part)
        return text, thought, bool(parts)

    def _add_call(self, part: dict[str, Any]) -> None:
        index = part.get("index")
        call_id = part.get("id") if isinstance(part.get("id"), str) else ""
        fn = _dict(part.get("function"))
        name = fn.get("name") if isinstance(fn.get("name"), str) else ""
        slot = None
        if isinstance(index, int):
            slot = self._by_index.get(index)
            if slot is not None and call_id and slot["id"] and call_id != slot["id"]:
                slot = None  # a new call reusing the index (some servers number every call 0)
        elif call_id:
            slot = next((c for c in self.calls if c["id"] == call_id), None)
        elif self.calls and not (name and self.calls[-1]["function"]["name"]):
            slot = self.calls[-1]  # no index, no id: a fragment of the call in progress
        if slot is None:
            slot = {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
            self.calls.append(slot)
            if isinstance(index, int):
                self._by_index[index] = slot
        if call_id and not slot["id"]:
            slot["id"] = call_id
        if name and not slot["function"]["name"]:
            slot["function"]["name"] = name
        args = fn.get("arguments")
        if isinstance(args, dict):
            args = json.dumps(args, ensure_ascii=False)
        if isinstance(args, str):
            slot["function"]["arguments"] += args

    def message(self) -> dict[str, Any]:
        msg: dict[str, Any] = {"role": "assistant", "content": "".join(self.content) if self.saw_content else None}
        if self.reasoning:
            msg[self.reasoning_key] = "".join(self.reasoning)
        if self.calls:
            msg["tool_calls"] = self.calls
        return msg


# --- the reply ---------------------------------------------------------------------------------------


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _count(value: Any) -> int:
    try:
        return max(0, int(value or 0))
    except (TypeError, ValueError, OverflowError):  # servers have sent "n/a": a count that is no number is 0
        return 0


def read_finish_reason(value: Any) -> str | None:
    """A finish_reason as read from the wire: None (or "") while the reply goes on; anything but a string is
    a reply nothing can be trusted from (a TypeError, which the client reports as a malformed reply)."""
    if value is None or isinstance(value, str):
        return value or None
    raise TypeError(f"finish_reason is {type(value).__name__} {str(value)[:40]!r}, not a string")


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # content parts
        return "".join(t for p in value if isinstance(p, dict) and isinstance(t := p.get("text"), str))
    return ""


def to_usage(raw: Any) -> Usage | None:
    if not isinstance(raw, dict):
        return None
    return Usage(*(_count(raw.get(k)) for k in ("prompt_tokens", "completion_tokens", "total_tokens")))


def build_reply(message: dict[str, Any], finish_reason: str | None, usage: Any, max_tokens: int | None) -> Reply:
    """Normalises one assistant message, per "Normalisation the client owes" in wire-formats.md.

    A truncated reply carries no executable calls: whatever calls it held move to malformed_calls.
    """
    raw_content = _text(message.get("content"))
    field = _text(message.get("reasoning_content")) or _text(message.get("reasoning"))
    inner, content = split_think(raw_content)
    reply = Reply(
        content=content,
        reasoning=(field or inner or "").strip(),
        finish_reason=finish_reason or "",
        usage=to_usage(usage),
        raw_content=raw_content,
    )
    broken_native = False
    for call in message.get("tool_calls") or []:
        if not isinstance(call, dict):
            continue  # a null entry is no call at all
        fn = _dict(call.get("function"))
        name, raw_args = fn.get("name") if isinstance(fn.get("name"), str) else "", fn.get("arguments")
        args = {} if raw_args is None else parse_arguments(raw_args)  # none at all: no arguments, as in markup
        if name and holds_no_object(raw_args):
            reply.non_object_calls.append(render_call(name, raw_args))
        if args is None or not name:
            broken_native = True
            reply.malformed_calls.append(render_call(name, raw_args))
        else:
            call_id = call.get("id") if isinstance(call.get("id"), str) and call["id"] else new_call_id()
            reply.tool_calls.append(ToolCall(id=call_id, name=name, arguments=args))
    if not reply.tool_calls and not broken_native:
        calls, bad, rest = salvage_calls(content)
        if calls or bad:
            reply.content = rest
        elif not content.strip() and reply.reasoning:
            calls, bad, rest = salvage_calls(reply.reasoning)
            if calls or bad:
                reply.reasoning = rest
        reply.tool_calls, reply.malformed_calls = calls, bad
    return _settled(reply, finish_reason, max_tokens, broken_native)


def _settled(reply: Reply, finish_reason: str | None, max_tokens: int | None, broken: bool) -> Reply:
    """Marks a reply cut by the token cap (or with calls whose arguments do not parse) and holds its calls back."""
    spent = reply.usage.completion_tokens if reply.usage else 0
    reply.cut_off = finish_reason == "length" or bool(max_tokens and spent >= max_tokens)
    reply.truncated = reply.cut_off or broken
    if reply.truncated and reply.tool_calls:
        reply.malformed_calls = [render_call(c.name, c.arguments) for c in reply.tool_calls] + reply.malformed_calls
        reply.tool_calls = []
    return reply


def text_reply(
    text: str,
    finish_reason: str | None,
    usage: Any,
    max_tokens: int | None,
    tools: Collection[str] = (),
    keep_unknown: bool = False,
) -> Reply:
    """A reply the client reads itself from the generated text, as the training harness read it (the text wires):
    the calls by sglang's qwen25 rules (calls.qwen25_calls) when the request offered tools, then a leading think block.

    Blocks whose JSON does not parse, and those of a reply the parser gave up on, become malformed_calls; calls to
    tools that were not offered are dropped (kept with `keep_unknown`), and named in `raw["dropped_calls"]`.
    """
    parsed = qwen25_calls(text, tools, keep_unknown)
    inner, content = split_think(parsed.content)
    reply = Reply(
        content=content,
        reasoning=(inner or "").strip(),
        finish_reason=finish_reason or "",
        usage=to_usage(usage),
        raw_content=text,
    )
    broken = False
    for name, arguments in parsed.calls:
        args = parse_arguments(arguments)
        if holds_no_object(arguments):  # the parser's JSON text of what the model wrote
            reply.non_object_calls.append(render_call(name, arguments))
        if args is None:  # arguments that are no object (null, a list, a number): no call camel could run
            broken = True
            reply.malformed_calls.append(render_call(name, arguments))
        else:
            reply.tool_calls.append(ToolCall(id=new_call_id(), name=name, arguments=args))
    unreadable = parsed.blocks if parsed.failed else parsed.bad_json
    reply.malformed_calls += [QWEN25_OPEN + body + QWEN25_CLOSE for body in unreadable]
    if parsed.unknown:
        reply.raw = {"dropped_calls": parsed.unknown}
    return _settled(reply, finish_reason, max_tokens, broken)


def encode_body(body: dict[str, Any]) -> bytes:
    """A request body as it goes on the wire: compact UTF-8 JSON. A lone surrogate (a model can write `\\ud800` in
    its JSON) has no UTF-8 form: it goes out as U+FFFD, as invalid bytes coming in are read."""
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    try:
        return text.encode()
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace").encode()
