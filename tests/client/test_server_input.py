"""ChatClient against hostile server input: broken streams, odd types, deep nesting, bad bytes, bad URLs,
Retry-After, and random bodies."""

from __future__ import annotations

import json
import random
import re
import time

import pytest

from oc_repl.calls import MAX_DEPTH, TooDeep, bounded_json
from oc_repl.client.chat import ChatClient
from oc_repl.client.failures import RETRY_AFTER_CAP, Failure, retry_after, retry_wait
from oc_repl.client.wire import build_reply
from oc_repl.errors import ContextOverflow, ServerError, UsageError
from tests.client_support import (
    OVERFLOW_BODIES,
    TOOLS,
    USER,
    both,
    run_fixture,  # noqa: F401 (the `run` fixture)
    sse_chunk,
)
from tests.conftest import run_cli

# --- hostile server input -------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["disconnect", "reset"])
def test_stream_dropped_mid_reply_is_retried(run, how):
    r = run({"flavour": "vllm", "replies": [{"text": "a reply long enough to break", how: True}, {"text": "whole"}]})
    assert r.complete({}).content == "whole"
    assert len(r.retries) == 1 and "broke" in r.retries[0][0]
    r = run({"cycle": True, "replies": [{"text": "a reply long enough to break", how: True}]}, retries=1)
    with pytest.raises(ServerError, match="broke"):
        r.complete({})
    assert len(r.chat_bodies()) == 2


@both
@pytest.mark.parametrize("finish", [5, ["stop"], {"reason": "stop"}, True])
def test_non_string_finish_reason_is_a_server_error(run, stream, finish):
    if stream:
        reply = {"raw_stream": [sse_chunk({"role": "assistant", "content": "hi"}), sse_chunk(finish=finish)]}
    else:
        reply = {"raw_body": {"choices": [{"message": {"content": "hi"}, "finish_reason": finish}]}}
    r = run({"cycle": True, "replies": [reply]}, stream, retries=2)
    with pytest.raises(ServerError, match="malformed reply: .*finish_reason"):
        r.complete({})
    assert len(r.chat_bodies()) == 1 and r.retries == []


@pytest.mark.parametrize(
    "listing",
    [{"data": [{"id": 5}]}, {"data": [{"id": None}]}, {"data": [{"id": ""}]}, {"data": [None]}, {"data": "x"}, []],
)
def test_unusable_model_list_is_a_server_error(run, listing):
    r = run({"models_body": listing, "replies": [{"text": "ok"}]}, retries=2)
    with pytest.raises(ServerError, match="malformed reply") as info:
        r.client.resolve_model()
    assert info.value.exit_code == 5 and r.retries == [] and r.chat_bodies() == []


def test_empty_model_list_asks_for_a_model(run):
    r = run({"models_body": {"data": []}, "replies": [{"text": "ok"}]})
    with pytest.raises(ServerError, match="lists no models") as info:
        r.client.resolve_model()
    assert "--model" in info.value.hint


@both
def test_wrongly_typed_fields_are_read_as_absent(run, stream):
    call = {"id": 7, "type": "function", "function": {"name": "shell_exec", "arguments": '{"command": "ls"}'}}
    content = [{"type": "text", "text": "he"}, {"type": "text", "text": 5}, {"type": "text", "text": "llo"}]
    usage = {"prompt_tokens": [], "completion_tokens": "n/a", "total_tokens": 1e400}
    if stream:
        reply = {"raw_stream": [sse_chunk({"tool_calls": [{"index": 0, **call}]}), sse_chunk(finish="tool_calls")]}
    else:
        message = {"role": "assistant", "content": content, "tool_calls": [call], "reasoning_content": 3}
        reply = {"raw_body": {"choices": [{"message": message, "finish_reason": "tool_calls"}], "usage": usage}}
    got = run({"replies": [reply]}, stream).complete()
    assert [(c.name, c.arguments) for c in got.tool_calls] == [("shell_exec", {"command": "ls"})]
    assert isinstance(got.tool_calls[0].id, str) and got.tool_calls[0].id
    assert got.reasoning == "" and got.content == ("" if stream else "hello")


@both
def test_choices_that_are_not_a_list_are_malformed(run, stream):
    reply = {"raw_stream": [{"choices": 5}]} if stream else {"raw_body": {"choices": 5}}
    r = run({"cycle": True, "replies": [reply]}, stream, retries=1)
    with pytest.raises(ServerError, match="malformed reply" if not stream else "broken response"):
        r.complete({})


DEEP = "[" * 1000


@both
@pytest.mark.parametrize("flavour", ["sglang", "noparser"])
def test_deeply_nested_arguments_are_a_malformed_call(run, stream, flavour):
    # sglang hands the arguments over natively, as a string; without a parser the markup is salvaged from the text
    text = '<tool_call>\n{"name": "shell_exec", "arguments": {"command": ' + DEEP + "}}\n</tool_call>"
    if flavour == "sglang":
        arguments = '{"command": ' + DEEP
        call = {"id": "c1", "type": "function", "function": {"name": "shell_exec", "arguments": arguments}}
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
        if stream:
            reply = {"raw_stream": [sse_chunk({"tool_calls": [{"index": 0, **call}]}), sse_chunk(finish="tool_calls")]}
        else:
            reply = {"raw_body": {"choices": [{"message": message, "finish_reason": "tool_calls"}]}}
    else:
        reply = {"text": text}
    r = run({"flavour": flavour, "replies": [reply]}, stream)
    started = time.monotonic()
    got = r.complete()
    assert got.tool_calls == [] and len(got.malformed_calls) == 1 and DEEP[:50] in got.malformed_calls[0]
    history = [*USER, {"role": "assistant", "content": None, "tool_calls": [{**call_of(got), "id": "c1"}]}]
    r.server.script["replies"].append({"text": "ok"})
    assert r.complete({}, history).content == "ok"  # the broken call goes back as "{}", the server accepts it
    assert time.monotonic() - started < 5  # generous: the pathology this guards against took seconds
    assert r.chat_bodies()[-1]["messages"][1]["tool_calls"][0]["function"]["arguments"] == "{}"


def call_of(reply) -> dict:
    return {"type": "function", "function": {"name": "shell_exec", "arguments": reply.malformed_calls[0]}}


def test_depth_limit_of_untrusted_json():
    assert bounded_json("[" * MAX_DEPTH + "]" * MAX_DEPTH) is not None
    for depth in (MAX_DEPTH + 1, 1000, 100_000):
        with pytest.raises(TooDeep):
            bounded_json("[" * depth + "]" * depth)
    with pytest.raises(ValueError):
        bounded_json("[" * 100_000)  # unterminated as well as deep
    assert build_reply({"content": "<tool_call>" + "[" * 100_000}, "stop", None, None).malformed_calls


@both
def test_deeply_nested_reply_is_a_malformed_reply(run, stream):
    nested = json.loads("[" * 150 + "]" * 150)
    reply = {"raw_stream": [sse_chunk({"content": "x", "extra": nested})]} if stream else {"raw_body": {"x": nested}}
    r = run({"cycle": True, "replies": [reply]}, stream, retries=2)
    with pytest.raises(ServerError, match="malformed reply: .*nested deeper"):
        r.complete({})
    assert r.retries == []


@both
def test_invalid_utf8_reads_as_replacement_characters(run, stream):
    text = b'"caf\xe9 \xff\xfe ok"'
    if stream:
        data = b'data: {"choices":[{"index":0,"delta":{"content":' + text + b'},"finish_reason":null}]}\n\n'
        reply = {"raw_stream": [data, sse_chunk(finish="stop")]}
    else:
        reply = {"raw_body": b'{"choices":[{"message":{"content":' + text + b'},"finish_reason":"stop"}]}'}
    r = run({"replies": [reply]}, stream)
    got = r.complete({})
    assert got.content == "caf\ufffd \ufffd\ufffd ok"
    if stream:
        assert r.text("content") == got.content


@pytest.mark.parametrize(
    "api_base", ["not a url", "ftp://x", "", "   ", "http://", "http://host:port/v1", "127.0.0.1", "http://a b/v1"]
)
def test_api_base_that_is_not_http_is_a_usage_error(api_base):
    started = time.monotonic()
    with pytest.raises(UsageError) as info:
        ChatClient(api_base, "k", "m", retries=3)
    assert info.value.exit_code == 2 and "http(s) URL" in info.value.message
    assert time.monotonic() - started < 2  # no request, no backoff


@pytest.mark.parametrize("command", ["run", "doctor"])
def test_cli_rejects_an_api_base_that_is_not_http(tmp_path, command):
    extra = ["--sandbox", f"local:{tmp_path}", "--yes", "hello"] if command == "run" else []
    proc = run_cli([command, "--api-base", "ftp://x", *extra], tmp_path, timeout=60)
    assert proc.returncode == 2 and "http(s) URL" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("kwargs", [{"api_key": "a\nb"}, {"api_key": "clé"}, {"idle_timeout": 0}])
def test_other_unusable_configuration_is_a_usage_error(kwargs):
    with pytest.raises(UsageError):
        ChatClient("http://127.0.0.1:9/v1", **{"api_key": "k", **kwargs})


@pytest.mark.parametrize("status", [429, 503])
@pytest.mark.parametrize("form", ["seconds", "date"])
def test_retry_after_is_honoured(run, status, form):
    from email.utils import formatdate

    value = "1" if form == "seconds" else formatdate(time.time() + 2.5, usegmt=True)
    busy = {"http_error": status, "headers": {"Retry-After": value}}
    r = run({"replies": [busy, {"text": "ok"}]}, backoff=0.01)
    started = time.monotonic()
    assert r.complete({}).content == "ok"
    waited = time.monotonic() - started
    [(message, _)] = r.retries
    asked = float(re.search(r"Retrying in ([\d.]+)s, as the server asked", message).group(1))
    assert (asked == 1.0) if form == "seconds" else (0 < asked <= 2.5)  # whole seconds, counted from the send
    assert waited >= asked - 0.05


def test_retry_after_is_capped():
    error = ServerError("HTTP 429")
    assert retry_after("3600") == 3600 and retry_after("-5") == 0 and retry_after("soon") is None
    assert retry_after("nan") is None and retry_after("inf") is None and retry_after("") is None
    assert retry_after("Wed, 21 Oct 2015 07:28:30 GMT", now=1445412500.0) == 10.0
    delay, said = retry_wait(Failure(error, True, asked=3600.0), 1, 0.5)
    assert delay == RETRY_AFTER_CAP == 60 and "asked for 3600s" in said and "Retrying in 60s" in said
    assert retry_wait(Failure(error, True), 2, 0.5) == (1.0, "Retrying in 1s.")


@pytest.mark.parametrize("how", ["silent", "trickle"])
def test_unstreamed_request_is_bounded_by_the_request_timeout(run, how):
    # silent: accepted, never answered; trickle: a space every 0.1 s, so no read timeout ever fires
    reply = {"text": "late", "delay": 30} if how == "silent" else {"text": "late", "keepalive": 30}
    r = run({"cycle": True, "replies": [reply]}, stream=False, request_timeout=0.5, retries=1)
    started = time.monotonic()
    with pytest.raises(ServerError) as info:
        r.complete({})
    assert time.monotonic() - started < 10
    said = "sent nothing for 0.5s" if how == "silent" else "still arriving 0.5s after the request"
    assert said in info.value.message and len(r.chat_bodies()) == 2


@both
def test_redirect_is_reported_not_followed(run, stream):
    moved = {"http_error": 307, "headers": {"Location": "http://elsewhere:8000/v1/chat/completions"}}
    r = run({"cycle": True, "replies": [moved]}, stream)
    with pytest.raises(ServerError, match="HTTP 307") as info:
        r.complete({})
    assert "http://elsewhere:8000" in info.value.hint and r.retries == []


def test_error_object_as_a_plain_body(run):
    r = run({"replies": [{"raw_body": {"error": {"message": "busy"}}}, {"text": "ok"}]}, stream=False)
    assert r.complete({}).content == "ok" and "reported an error: busy" in r.retries[0][0]
    r = run({"cycle": True, "replies": [{"raw_body": {"error": OVERFLOW_BODIES["vllm"]}}]}, stream=False)
    with pytest.raises(ContextOverflow):
        r.complete({})


_ATOMS = [None, True, 0, -1, 1.5, 1e308, "", "x", "stop", "length", "tool_calls", "\ud800", [], {}, [None], "[DONE]"]
_KEYS = ["choices", "delta", "message", "content", "tool_calls", "function", "name", "arguments", "id", "index"]
_KEYS += ["finish_reason", "usage", "reasoning_content", "reasoning", "error", "completion_tokens", "text"]


def _random_body(rng: random.Random, stream: bool) -> dict:
    """A reply script entry: bodies and streams of every shape, JSON or not, UTF-8 or not."""

    def value(depth: int = 0):
        roll = rng.random()
        if depth > 4 or roll < 0.4:
            return rng.choice(_ATOMS)
        if roll < 0.7:
            return {rng.choice(_KEYS): value(depth + 1) for _ in range(rng.randint(0, 4))}
        return [value(depth + 1) for _ in range(rng.randint(0, 3))]

    def shaped() -> dict:
        call = {"id": value(3), "function": {"name": rng.choice(["ls", value(3)]), "arguments": value(3)}}
        message = {"role": "assistant", "content": value(2), "tool_calls": rng.choice([value(2), [call]])}
        return {"choices": [{"message": message, "delta": message, "finish_reason": rng.choice(_ATOMS)}]}

    def junk() -> bytes:
        return bytes(rng.randrange(256) for _ in range(rng.randint(0, 40)))

    def one():
        return rng.choice([shaped, shaped, value, lambda: b"data: " + junk() + b"\n\n", junk])()

    if stream:
        return {"raw_stream": [one() for _ in range(rng.randint(0, 6))]}
    return {"raw_body": rng.choice([shaped, value, junk])()}


def test_random_server_bodies_end_in_a_reply_or_a_server_error(run):
    rng = random.Random(10)
    r = run({"cycle": True, "replies": [{"text": "ok"}]}, retries=0)
    for case in range(300):
        stream = case % 2 == 0
        r.server.script["replies"][0] = _random_body(rng, stream)
        r.client.stream = stream
        try:
            reply = r.complete({"tools": TOOLS} if case % 3 else {})
        except ServerError:
            continue
        assert all(isinstance(getattr(reply, f), str) for f in ("content", "reasoning", "finish_reason")), case
        assert all(isinstance(c.id, str) and isinstance(c.arguments, dict) for c in reply.tool_calls), case
