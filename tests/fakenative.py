"""The fake server's text routes: sglang's native `/generate` (at the server's root) and the OpenAI completions route
`/v1/completions` in vLLM's shapes, streamed or not.

The prompt arrives as token ids (decoded with the script's tokenizer) or as text; either way the request is recorded
with `prompt_text` and `prompt_ids`, so a test can hold what was sent against what it rendered. The scripted model
text is tokenized, ended by the EOS token, cut at the request's token budget, and decoded back the way each server
decodes (special tokens skipped unless the request says otherwise; the stop token kept only with sglang's
`no_stop_trim` / vLLM's `include_stop_str_in_output`).

Script keys: "tokenizer" (a tokenizer.json path: these routes need one), "eos" ("<|im_end|>"), "context_length"
(a longer prompt is refused as each server refuses it), "incremental_streaming_output" (sglang's flag: each streamed
event holds only the new text), "chunk_tokens" (tokens per streamed event, 1). REPLY keys: text, finish_reason,
http_error (+ body), stream_error, delay, no_eos (the model stops without its EOS token: the budget cuts it).
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from typing import Any

_TOKENIZERS: dict[str, Any] = {}
_LOCK = threading.Lock()


def route(path: str) -> str | None:
    """Which text route a path names: "generate", "completions", or None."""
    path = path.rstrip("/")
    if path == "/generate":
        return "generate"
    return "completions" if path.endswith("/completions") and not path.endswith("/chat/completions") else None


def tokenizer(script: dict[str, Any]) -> Any:
    path = script.get("tokenizer")
    if not path:
        return None
    with _LOCK:
        if path not in _TOKENIZERS:
            from tokenizers import Tokenizer

            _TOKENIZERS[path] = Tokenizer.from_file(str(path))
        return _TOKENIZERS[path]


def prompt_of(script: dict[str, Any], which: str, body: Any) -> tuple[list[int] | None, str | None]:
    """(prompt ids, prompt text) of a request, read as the server reads it."""
    tok = tokenizer(script)
    if tok is None or not isinstance(body, dict):
        return None, None
    prompt = body.get("input_ids") if which == "generate" else body.get("prompt")
    if which == "generate" and prompt is None:
        prompt = body.get("text")
    if isinstance(prompt, list) and all(isinstance(i, int) for i in prompt):
        return prompt, tok.decode(prompt, skip_special_tokens=False)
    if isinstance(prompt, str):
        return tok.encode(prompt, add_special_tokens=True).ids, prompt
    return None, None


def _error(status: int, message: str, which: str) -> dict[str, Any]:
    if which == "generate":
        return {"error": {"message": message}}
    return {"object": "error", "message": message, "type": "BadRequestError", "param": None, "code": status}


def _overflow(which: str, prompt: int, budget: int, context: int) -> str:
    if which == "generate":
        return f"The input ({prompt} tokens) is longer than the model's context length ({context} tokens)."
    return (
        f"This model's maximum context length is {context} tokens. However, you requested {prompt + budget} tokens "
        f"({prompt} in the messages, {budget} in the completion). Please reduce the length of the messages or "
        "completion."
    )


def _options(which: str, body: dict[str, Any]) -> tuple[int | None, bool, bool]:
    """(token budget, whether special tokens are skipped in the text, whether the stop token stays in it)."""
    if which == "generate":
        params = body.get("sampling_params") or {}
        return params.get("max_new_tokens"), params.get("skip_special_tokens", True), bool(params.get("no_stop_trim"))
    keep = bool(body.get("include_stop_str_in_output") or body.get("no_stop_trim"))
    return body.get("max_tokens"), body.get("skip_special_tokens", True), keep


def generation(script: dict[str, Any], reply: dict[str, Any], which: str, body: dict[str, Any]) -> dict[str, Any]:
    """The reply's token ids, and for every prefix of them the text the server shows, its finish and usage."""
    tok = tokenizer(script)
    budget, skip_special, keep_stop = _options(which, body)
    eos = tok.token_to_id(script.get("eos", "<|im_end|>"))
    ids = tok.encode(reply.get("text", ""), add_special_tokens=False).ids + ([] if reply.get("no_eos") else [eos])
    if budget is not None and len(ids) > budget:
        ids, finish = ids[:budget], {"type": "length", "length": budget}
    elif ids and ids[-1] == eos:
        finish = {"type": "stop", "matched": eos}
    else:
        finish = {"type": "stop", "matched": None}
    shown = ids if keep_stop or finish.get("matched") is None else ids[:-1]
    return {
        "ids": ids,
        "text": lambda n: tok.decode(shown[:n], skip_special_tokens=skip_special),
        "finish": {**finish, "type": reply.get("finish_reason", finish["type"])},
    }


def serve(handler: Any, which: str, body: Any, reply: dict[str, Any] | None, prompt: list[int] | None) -> None:
    script = handler.server.fake.script
    if tokenizer(script) is None:
        return handler._json(500, _error(500, "the fake server's text routes need a tokenizer in the script", which))
    if not isinstance(body, dict) or prompt is None:
        return handler._json(400, _error(400, "the request holds no prompt the server can read", which))
    if reply is None:
        return handler._json(500, _error(500, "script exhausted", which))
    stream = bool(body.get("stream"))
    if handler.server.fake._stopping.wait(reply.get("delay", 0)):
        return None
    if "http_error" in reply:
        return handler._json(reply["http_error"], reply.get("body") or _error(reply["http_error"], "boom", which))
    budget = _options(which, body)[0] or 0
    context = script.get("context_length")
    if context and (len(prompt) >= context if which == "generate" else len(prompt) + budget > context):
        error = _error(400, _overflow(which, len(prompt), budget, context), which)
        return _sse(handler, [error]) if stream and which == "generate" else handler._json(400, error)
    out = generation(script, reply, which, body)
    if not stream:
        return handler._json(
            200,
            _generate_answer(out, body, len(prompt)) if which == "generate" else _completion(out, body, len(prompt)),
        )
    if "stream_error" in reply:
        return _sse(handler, [{"error": {"message": reply["stream_error"], "code": 400}}])
    events = (
        _generate_events(script, out, body, len(prompt))
        if which == "generate"
        else _completion_events(script, out, body, len(prompt))
    )
    return _sse(handler, events)


def _meta(out: dict[str, Any], body: dict[str, Any], prompt: int, n: int, done: bool, since: int = 0) -> dict:
    meta = {
        "id": "fake-" + secrets.token_hex(4),
        "finish_reason": out["finish"] if done else None,
        "prompt_tokens": prompt,
        "completion_tokens": n,
        "cached_tokens": 0,
    }
    if body.get("return_logprob"):
        meta["output_token_logprobs"] = [[-0.25, i, None] for i in out["ids"][since:n]]
    return meta


def _generate_answer(out: dict[str, Any], body: dict[str, Any], prompt: int) -> dict[str, Any]:
    n = len(out["ids"])
    return {"text": out["text"](n), "output_ids": out["ids"], "meta_info": _meta(out, body, prompt, n, True)}


def _steps(script: dict[str, Any], n: int) -> list[int]:
    size = max(1, int(script.get("chunk_tokens", 1)))
    return [*range(size, n, size), n] if n else [0]


def _generate_events(script: dict[str, Any], out: dict[str, Any], body: dict[str, Any], prompt: int) -> list[Any]:
    incremental = bool(script.get("incremental_streaming_output"))
    events, sent, shown = [], 0, ""
    n = len(out["ids"])
    for k in _steps(script, n):
        text = out["text"](k)
        if k < n and text.endswith("\ufffd"):
            continue  # a character still incomplete in bytes: the detokenizer holds it back
        meta = _meta(out, body, prompt, k, k == n, since=sent if incremental else 0)
        ids = out["ids"][sent:k] if incremental else out["ids"][:k]
        events.append({"text": text[len(shown) :] if incremental else text, "output_ids": ids, "meta_info": meta})
        sent, shown = k, text
    return events


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _envelope(body: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "cmpl-" + secrets.token_hex(6),
        "object": "text_completion",
        "created": int(time.time()),
        "model": body.get("model"),
    }


def _finish_name(out: dict[str, Any]) -> str:
    return "length" if out["finish"]["type"] == "length" else "stop"


def _completion(out: dict[str, Any], body: dict[str, Any], prompt: int) -> dict[str, Any]:
    n = len(out["ids"])
    choice = {
        "index": 0,
        "text": out["text"](n),
        "logprobs": None,
        "finish_reason": _finish_name(out),
        "stop_reason": None,
    }
    return {**_envelope(body), "choices": [choice], "usage": _usage(prompt, n)}


def _completion_events(script: dict[str, Any], out: dict[str, Any], body: dict[str, Any], prompt: int) -> list[Any]:
    envelope, events, shown = _envelope(body), [], ""
    n = len(out["ids"])
    for k in _steps(script, n):
        text = out["text"](k)
        if k < n and text.endswith("\ufffd"):
            continue
        finish = _finish_name(out) if k == n else None
        choice = {
            "index": 0,
            "text": text[len(shown) :],
            "logprobs": None,
            "finish_reason": finish,
            "stop_reason": None,
        }
        events.append({**envelope, "choices": [choice], "usage": None})
        shown = text
    if (body.get("stream_options") or {}).get("include_usage"):
        events.append({**envelope, "choices": [], "usage": _usage(prompt, n)})
    return events


def _sse(handler: Any, events: list[Any]) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream")
    handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()
    try:
        for event in [*events, "[DONE]"]:
            data = event if isinstance(event, str) else json.dumps(event, ensure_ascii=False)
            handler._chunk(f"data: {data}\n\n".encode())
        handler._chunk(b"")
    except OSError:
        handler.close_connection = True
