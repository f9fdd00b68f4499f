"""The two wires that carry a prompt the client rendered itself, and their replies: pure functions, no network.

- sglang's native `POST <server root>/generate` (server root: api_base.server_root): `{"input_ids": [...]}` (or
  `{"text": ...}` without a tokenizer), `"sampling_params"` in sglang's names, `"return_logprob"`. The answer is
  `{"text", "output_ids", "meta_info": {"finish_reason": {"type": "stop", "matched": <token id or string>} |
  {"type": "length", "length": n} | {"type": "abort", "message": ...}, "prompt_tokens", "completion_tokens", ...}}`.
  Streamed (`"stream": true`), each `data:` event is such an object with `finish_reason` null until the last one,
  then `data: [DONE]`; errors come as `data: {"error": {...}}`. Its `text` (and `output_ids`) are cumulative, the
  whole reply so far, unless the server runs with `--incremental-streaming-output` (`--stream-output` before 0.5),
  when each event holds only what is new (sglang 0.5 `managers/tokenizer_manager.py::_handle_batch_output`). The
  stream reader tells them apart: an event whose `output_ids` are as many as its `completion_tokens` is cumulative.
- the OpenAI-compatible `POST /v1/completions` (vLLM's shapes; sglang's too): `"prompt"` as token ids or text,
  `{"choices": [{"text", "finish_reason": "stop" | "length", "stop_reason"}], "usage"}`; streamed, each chunk's
  choice holds the new text only, a last chunk carries the usage (`stream_options.include_usage`), then `[DONE]`.

Both replies are read as the training harness read them (wire.text_reply): sglang's qwen25 parser rules on the text.
A stop token the server leaves in the text (sglang with `no_stop_trim`, as trained, keeps `<|im_end|>`) is taken
off the end when its text is among `eos_texts`; the reply's `raw` keeps the server's answer as it came.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from typing import Any

from oc_repl.calls import QWEN25_OPEN, bounded_json
from oc_repl.client.failures import Incomplete, Malformed, Reported
from oc_repl.client.think import Delta, ThinkRouter, held_suffix
from oc_repl.client.wire import text_reply
from oc_repl.types import Reply

Prompt = list[int] | str

# sglang's sampling names -> the OpenAI completions names (vLLM's and sglang's); the rest go as they are.
COMPLETIONS_NAMES = {"max_new_tokens": "max_tokens", "min_new_tokens": "min_tokens", "sampling_seed": "seed"}
# What training's sampling had of the keys a server fills from the model's generation_config.json (vLLM's default
# `--generation-config auto`) or its preferred sampling params (sglang) when a completions request leaves them out.
NEUTRAL = {"min_p": 0.0, "repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}


# --- requests --------------------------------------------------------------------------------------------------------


def generate_body(prompt: Prompt, sampling_params: dict[str, Any], stream: bool = False, logprobs: bool = True) -> dict:
    """The body of sglang's `/generate`. Its logprobs are what makes a record RL data (training asked for them);
    streamed, a server without `--incremental-streaming-output` repeats them all in every event, as it does the ids."""
    body: dict[str, Any] = {"input_ids": list(prompt)} if isinstance(prompt, list) else {"text": prompt}
    body["sampling_params"] = dict(sampling_params)
    body["return_logprob"] = logprobs
    if stream:
        body["stream"] = True
    return body


def generate_request(model: str, prompt: Prompt, sampling_params: dict[str, Any], stream: bool = False) -> dict:
    """`generate_body` as every text wire's builder is called, logprobs asked for streamed or not."""
    return generate_body(prompt, sampling_params, stream=stream)


def completions_body(model: str, prompt: Prompt, sampling_params: dict[str, Any], stream: bool = False) -> dict:
    """The body of `/v1/completions` for the same sampling: every field sent, the neutral values of those a server
    would otherwise fill from the model's generation_config.json included, null ones left out; sglang's
    `no_stop_trim` goes under both servers' names, its `sampling_seed` as `seed`."""
    body: dict[str, Any] = {"model": model, "prompt": list(prompt) if isinstance(prompt, list) else prompt, **NEUTRAL}
    for key, value in sampling_params.items():
        if value is not None:
            body[COMPLETIONS_NAMES.get(key, key)] = value
    if "no_stop_trim" in sampling_params:
        body["include_stop_str_in_output"] = bool(sampling_params["no_stop_trim"])  # vLLM's name for it
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


# --- what each reply says --------------------------------------------------------------------------------------------


def _dict(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise Malformed(f"{what} is {type(value).__name__}, not an object")
    return value


def _text(value: Any, what: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise Malformed(f"{what} is {type(value).__name__}, not a string")
    return value


def generate_finish(meta: dict[str, Any]) -> tuple[str | None, Any]:
    """(finish reason as OpenAI names it, or None while the reply goes on; what matched the stop)."""
    finish = meta.get("finish_reason")
    if finish is None:
        return None, None
    if isinstance(finish, str):  # some servers speaking this wire write the type alone
        return finish, None
    finish = _dict(finish, "meta_info.finish_reason")
    kind = finish.get("type")
    if kind == "abort":
        raise Reported({"message": finish.get("message") or "the server aborted the request"})
    if not isinstance(kind, str) or not kind:
        raise Malformed(f"meta_info.finish_reason has no type: {str(finish)[:80]}")
    return kind, finish.get("matched")


def generate_usage(meta: dict[str, Any]) -> dict[str, Any]:
    prompt, completion = meta.get("prompt_tokens"), meta.get("completion_tokens")
    usage = {"prompt_tokens": prompt, "completion_tokens": completion}
    if isinstance(prompt, int) and isinstance(completion, int):
        usage["total_tokens"] = prompt + completion
    return usage


def _trimmed(text: str, finish: str | None, stop_was_string: bool, eos_texts: Collection[str]) -> str:
    if finish == "stop" and not stop_was_string:
        for eos in eos_texts:
            if eos and text.endswith(eos):
                return text[: -len(eos)]
    return text


def _error(raw: Any) -> None:
    if isinstance(raw, dict) and (raw.get("error") or raw.get("object") == "error"):
        raise Reported(raw.get("error") or raw)


def generate_reply(
    raw: Any,
    max_tokens: int | None,
    tools: Collection[str] = (),
    eos_texts: Collection[str] = (),
    keep_unknown: bool = False,
) -> Reply:
    """The reply in an unstreamed `/generate` answer."""
    _error(raw)
    raw = _dict(raw, "the answer")
    meta = _dict(raw.get("meta_info"), "meta_info")
    finish, matched = generate_finish(meta)
    if finish is None:
        raise Incomplete("the answer has no finish_reason")
    text = _trimmed(_text(raw.get("text"), "text"), finish, isinstance(matched, str), eos_texts)
    reply = text_reply(text, finish, generate_usage(meta), max_tokens, tools, keep_unknown)
    reply.raw = {**raw, **reply.raw}
    return reply


def _stopped_by_string(choice: dict[str, Any]) -> bool:
    """Whether a stop string (not a token) ended the choice: vLLM's `stop_reason`, sglang's `matched_stop`."""
    matched = choice.get("stop_reason")
    return isinstance(matched if matched is not None else choice.get("matched_stop"), str)


def _choice(raw: dict[str, Any]) -> dict[str, Any] | None:
    choices = raw.get("choices")
    if choices is None or choices == []:
        return None
    if not isinstance(choices, list):
        raise Malformed(f"`choices` is {type(choices).__name__}, not a list")
    return _dict(choices[0], "choices[0]")


def completions_reply(
    raw: Any,
    max_tokens: int | None,
    tools: Collection[str] = (),
    eos_texts: Collection[str] = (),
    keep_unknown: bool = False,
) -> Reply:
    """The reply in an unstreamed `/v1/completions` answer."""
    _error(raw)
    raw = _dict(raw, "the answer")
    choice = _choice(raw)
    if choice is None:
        raise Incomplete("the server answered without a choice")
    finish = _text(choice.get("finish_reason"), "finish_reason") or None
    if finish is None:
        raise Incomplete("the answer has no finish_reason")
    text = _trimmed(_text(choice.get("text"), "text"), finish, _stopped_by_string(choice), eos_texts)
    reply = text_reply(text, finish, raw.get("usage"), max_tokens, tools, keep_unknown)
    reply.raw = {**raw, **reply.raw}
    return reply


# --- streams ---------------------------------------------------------------------------------------------------------


class Shown:
    """What of a streamed text reaches the screen, so that the deltas add up to the reply's content: its end is held
    back while it could still be a stop token the server leaves in the text (dropped at the end when it is one), and
    when tools were offered it stops at the first `<tool_call>\\n`, whitespace before it dropped (by the qwen25 rules
    what follows is calls, and the prose before them is stripped)."""

    def __init__(self, emit: Any, tools: bool, eos_texts: Collection[str]) -> None:
        self._emit, self._tools, self._eos = emit, tools, [e for e in eos_texts if e]
        self._held, self._done = "", False

    def add(self, text: str) -> None:
        if self._done:
            return
        text, self._held = self._held + text, ""
        if self._tools and (cut := text.find(QWEN25_OPEN)) >= 0:
            self._done = True
            return self._send(text[:cut].rstrip())
        keep = max([held_suffix(text, QWEN25_OPEN) if self._tools else 0, *(held_suffix(text, e) for e in self._eos)])
        keep = max([keep, *(len(e) for e in self._eos if text.endswith(e))])
        body = text[: len(text) - keep]
        shown = body.rstrip() if self._tools else body
        self._held = text[len(shown) :]
        return self._send(shown)

    def flush(self, trim: bool) -> None:
        held, self._held = self._held, ""
        if self._done:
            return
        for eos in self._eos if trim else ():
            if held.endswith(eos):
                held = held[: -len(eos)]
                break
        self._send(held)

    def _send(self, text: str) -> None:
        if text:
            self._emit(text)


class TextStream:
    """Folds one streamed reply of a text wire, event by event (`take` each SSE payload), and sends its text on to
    `on_delta` as content and reasoning deltas (a leading think block is reasoning; calls are not shown)."""

    def __init__(
        self,
        on_delta: Delta | None = None,
        tools: Collection[str] = (),
        eos_texts: Collection[str] = (),
        started: float | None = None,
    ) -> None:
        self.tools, self.eos_texts = tools, eos_texts
        self.chunks: list[dict[str, Any]] = []
        self.text = ""
        self.finish: str | None = None
        self.stop_was_string = False
        self.usage: dict[str, Any] | None = None
        self.done = False
        self.output_ids: list[int] | None = None  # the reply's ids, when the server sends them
        self.output_logprobs: list[Any] | None = None  # and their logprobs, as sglang gives them
        self.started = time.monotonic() if started is None else started
        self.ttft: float | None = None
        self._router = ThinkRouter(on_delta) if on_delta else None
        self._shown = Shown(self._router.content, bool(tools), eos_texts) if self._router else None

    def take(self, payload: str) -> None:
        if self.done:
            return
        if payload.startswith("[DONE]"):
            self.done = True
            return
        try:
            chunk = bounded_json(payload)
        except ValueError as exc:
            raise Incomplete(f"an event is not JSON ({exc}): {payload[:80]!r}") from exc
        _error(chunk)
        chunk = _dict(chunk, "an event")
        self.chunks.append(chunk)
        delta = self._fold(chunk)
        if delta:
            if self.ttft is None:
                self.ttft = time.monotonic() - self.started
            if self._shown is not None:
                self._shown.add(delta)

    def _fold(self, chunk: dict[str, Any]) -> str:
        """Reads one event into the reply so far (`text`, `finish`, `usage`); returns the text it adds."""
        raise NotImplementedError

    def reply(self, max_tokens: int | None, keep_unknown: bool = False) -> Reply:
        if self.finish is None:
            raise Incomplete("the stream ended before the reply was complete")
        text = _trimmed(self.text, self.finish, self.stop_was_string, self.eos_texts)
        if self._shown is not None and self._router is not None:
            self._shown.flush(trim=text != self.text)
            self._router.flush()
        reply = text_reply(text, self.finish, self.usage, max_tokens, self.tools, keep_unknown)
        reply.raw = {"chunks": self.chunks, "text": self.text, "finish_reason": self.finish, **reply.raw}
        if self.output_ids is not None:
            reply.raw["output_ids"] = self.output_ids
        if self.output_logprobs is not None:
            reply.raw["output_token_logprobs"] = self.output_logprobs
        reply.ttft_s, reply.duration_s = self.ttft, time.monotonic() - self.started
        return reply


class GenerateStream(TextStream):
    """sglang's streamed `/generate`, cumulative or incremental. The events are kept as incremental ones (each with
    its new text, ids and logprobs only), so a long cumulative stream is not kept over and over; `output_ids` and
    `output_logprobs` gather them."""

    def _fold(self, chunk: dict[str, Any]) -> str:
        meta = _dict(chunk.get("meta_info"), "meta_info")
        text = _text(chunk.get("text"), "text")
        ids, spent = chunk.get("output_ids"), meta.get("completion_tokens")
        if isinstance(ids, list) and isinstance(spent, int):
            cumulative = len(ids) >= spent
        else:
            cumulative = text.startswith(self.text)
        if not cumulative:
            delta = text
        elif text.startswith(self.text):
            delta = text[len(self.text) :]
        else:  # a whole text that does not go on from the last one: it stands, though what was shown cannot go back
            self.text, delta = text, ""
        self.text += delta
        if isinstance(ids, list):
            known = self.output_ids or []
            new_ids = ids[len(known) :] if cumulative else ids
            self.output_ids = known + new_ids
            self.chunks[-1] = {**chunk, "text": delta, "output_ids": new_ids}
        logprobs = meta.get("output_token_logprobs")
        if isinstance(logprobs, list):  # [logprob, token id, token text or null] a token, cumulative as the ids
            had = self.output_logprobs or []
            new = logprobs[len(had) :] if cumulative else logprobs
            self.output_logprobs = had + new
            self.chunks[-1] = {**self.chunks[-1], "meta_info": {**meta, "output_token_logprobs": new}}
        finish, matched = generate_finish(meta)
        if finish is not None:
            self.finish, self.stop_was_string = finish, isinstance(matched, str)
        self.usage = generate_usage(meta)
        return delta


class CompletionsStream(TextStream):
    """A streamed `/v1/completions`: each chunk's text is new."""

    def _fold(self, chunk: dict[str, Any]) -> str:
        if chunk.get("usage"):
            self.usage = _dict(chunk["usage"], "usage")
        choice = _choice(chunk)
        if choice is None:
            return ""
        finish = _text(choice.get("finish_reason"), "finish_reason") or None
        if finish is not None:
            self.finish, self.stop_was_string = finish, _stopped_by_string(choice)
        delta = _text(choice.get("text"), "text")
        self.text += delta
        return delta
