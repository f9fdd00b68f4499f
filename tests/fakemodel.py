"""What the fake server's model writes, and what each server flavour makes of it: sglang's, vLLM's (hermes) and
llama-cpp-python's tool parsers or none, think blocks routed or not, a cut at the token limit; the streamed deltas
and the whole message built from that (see tests/fakeserver.py for the script format)."""

from __future__ import annotations

import json
import re
import secrets
from typing import Any

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
_SGLANG_BLOCK = re.compile(r"<tool_call>\n(.*?)\n</tool_call>", re.S)
_HERMES_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)", re.S)
_PARTIAL = re.compile(r'<tool_call>\s*\{\s*"name"\s*:\s*"([^"]*)"\s*,\s*"(?:arguments|parameters)"\s*:\s*(.*)', re.S)


def call_text(name: str, arguments: dict[str, Any] | str, newlines: bool = True, think: bool = True) -> str:
    """What Qwen3 writes for one call; a str `arguments` is written as a JSON string (double-encoded)."""
    body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    nl = "\n" if newlines else ""
    return ("<think>\n\n</think>\n\n" if think else "") + f"{CALL_OPEN}{nl}{body}{nl}{CALL_CLOSE}"


def calls_text(calls: list[tuple[str, dict[str, Any] | str]], newlines: bool = True, think: bool = True) -> str:
    blocks = [call_text(name, args, newlines, think=False) for name, args in calls]
    return ("<think>\n\n</think>\n\n" if think else "") + "\n".join(blocks)


# --- what each server makes of the model text --------------------------------------------------------


def _sglang_tools(text: str) -> tuple[str | None, list[tuple[str, str]]]:
    start = text.find(CALL_OPEN + "\n")
    if start < 0:
        return text, []
    calls = []
    for m in _SGLANG_BLOCK.finditer(text):
        try:  # a block that does not parse is skipped, the others survive
            obj = json.loads(m.group(1).strip())
            args = obj.get("parameters") or obj.get("arguments", {})
            calls.append((obj["name"], json.dumps(args, ensure_ascii=False)))
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
    if not calls:
        return text, []
    return text[:start].strip() or None, calls


def _hermes_tools(text: str) -> tuple[str | None, list[tuple[str, str]]]:
    if CALL_OPEN not in text:
        return text, []
    try:  # one bad block loses every call
        objs = [json.loads(a or b) for a, b in _HERMES_BLOCK.findall(text)]
        calls = [(o["name"], json.dumps(o["arguments"], ensure_ascii=False)) for o in objs]
    except (ValueError, KeyError, TypeError):
        return text, []
    return text[: text.find(CALL_OPEN)] or None, calls


def _lenient_tools(text: str) -> tuple[str | None, list[tuple[str, str]]]:
    calls = []
    for a, b in _HERMES_BLOCK.findall(text):
        try:
            obj = json.loads(a or b)
            calls.append((obj["name"], json.dumps(obj.get("arguments", {}), ensure_ascii=False)))
        except (ValueError, KeyError, TypeError):
            continue
    return ("" if calls else text), calls


_TOOL_PARSERS = {"sglang": _sglang_tools, "vllm": _hermes_tools, "llamacpp-python": _lenient_tools}


def _close_json(prefix: str) -> str:
    """The fragment a flushing parser may add so that a cut JSON object parses."""
    quoted = len(re.findall(r'(?<!\\)"', prefix)) % 2 == 1
    depth = prefix.count("{") - prefix.count("}")
    return ('"' if quoted else "") + "}" * max(depth, 0)


def generate(script: dict[str, Any], reply: dict[str, Any], stream: bool) -> dict[str, Any]:
    """reasoning, content, calls [(name, arguments)], finish_reason and the generated text."""
    flavour = script.get("flavour", "sglang")
    text = reply.get("text", "")
    cut = reply.get("max_tokens_cut")
    if cut is not None:
        text = text[:cut]
    generated, reasoning = text, None
    if flavour == "ollama" or (script.get("reasoning_parser") and flavour in ("sglang", "vllm")):
        if "</think>" in text:
            head, _, text = text.partition("</think>")
            reasoning = head.split("<think>", 1)[-1]
        elif flavour == "sglang":  # sglang keeps everything as reasoning until </think> shows up
            reasoning, text = text.replace("<think>", "", 1), ""
        reasoning = reasoning if reasoning and reasoning.strip() else None
    parse = _TOOL_PARSERS.get(flavour, _lenient_tools if flavour == "ollama" else None)
    content, calls = parse(text) if parse else (text, [])
    last = text.rfind(CALL_OPEN)
    partial = None
    if cut is not None and stream and flavour in _TOOL_PARSERS and last >= 0 and CALL_CLOSE not in text[last:]:
        partial = _PARTIAL.match(text, last)
    if partial:
        # a streaming parser has already sent the name and part of the arguments when the cut comes
        calls = parse(text[:last])[1]
        if flavour == "llamacpp-python":
            content = ""
        else:
            content = text[: text.find(CALL_OPEN)]
            content = (content.strip() if flavour == "sglang" else content) or None
        args = partial.group(2)
        calls = [*calls, (partial.group(1), args + (_close_json(args) if flavour == "sglang" else ""))]
    finish = "tool_calls" if calls else "stop"
    if cut is not None:
        finish = "tool_calls" if flavour == "vllm" and stream and calls else "length"
    return {
        "reasoning": reasoning,
        "content": content,
        "calls": calls,
        "finish": reply.get("finish_reason", finish),
        "generated": generated,
        "had_markup": CALL_OPEN in text,
    }


def _call_id(flavour: str, i: int) -> str:
    if flavour == "vllm":
        return "chatcmpl-tool-" + secrets.token_hex(8)
    return f"call_{i}_" + secrets.token_hex(4) if flavour == "llamacpp-python" else "call_" + secrets.token_hex(4)


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), max(1, size))]


def stream_deltas(script: dict[str, Any], out: dict[str, Any]) -> list[dict[str, Any]]:
    """Choice deltas in the order and shape the flavour streams them, the finish chunk last."""
    flavour, size = script.get("flavour", "sglang"), int(script.get("chunk_chars", 5))
    rkey = "reasoning" if flavour == "ollama" else script.get("reasoning_field", "reasoning_content")
    deltas: list[dict[str, Any]] = [{"delta": {"role": "assistant", "content": ""}}]
    deltas += [{"delta": {rkey: p}} for p in _pieces(out["reasoning"] or "", size)]
    deltas += [{"delta": {"content": p}} for p in _pieces(out["content"] or "", size)]
    for i, (name, args) in enumerate(out["calls"]):
        cid, frags = _call_id(flavour, i), _pieces(args, size * 2)
        if flavour == "ollama":
            parts = [{"index": i, "id": cid, "type": "function", "function": {"name": name, "arguments": args}}]
        elif flavour == "llamacpp-python":
            fn = [{"name": name, "arguments": f} for f in frags or [""]]
            parts = [{"index": i, "id": cid, "type": "function", "function": f} for f in fn]
        elif flavour == "vllm":
            parts = [{"id": cid, "type": "function", "index": i, "function": {"name": name}}]
            parts += [{"index": i, "function": {"arguments": f}} for f in frags]
        else:
            parts = [{"id": cid, "index": i, "type": "function", "function": {"name": name, "arguments": ""}}]
            parts += [
                {"id": None, "index": i, "type": "function", "function": {"name": None, "arguments": f}} for f in frags
            ]
        deltas += [{"delta": {"tool_calls": [p]}} for p in parts]
    deltas.append({"delta": {}, "finish_reason": out["finish"]})
    return deltas


def full_message(script: dict[str, Any], out: dict[str, Any]) -> dict[str, Any]:
    flavour = script.get("flavour", "sglang")
    calls = [
        {"id": _call_id(flavour, i), "type": "function", "function": {"name": n, "arguments": a}}
        | ({"index": i} if flavour == "sglang" else {})
        for i, (n, a) in enumerate(out["calls"])
    ]
    message: dict[str, Any] = {"role": "assistant", "content": out["content"]}
    if flavour == "ollama":
        message["reasoning"] = out["reasoning"]
    elif script.get("reasoning_parser") and flavour in ("sglang", "vllm"):
        message[script.get("reasoning_field", "reasoning_content")] = out["reasoning"]
    keep_empty = flavour == "vllm" or (flavour == "sglang" and out["had_markup"])
    message["tool_calls"] = calls if calls or keep_empty else None
    return message
