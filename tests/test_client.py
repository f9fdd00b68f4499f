"""ChatClient against the loopback fake server: real HTTP over loopback, every server habit and hostile input."""

from __future__ import annotations

import contextlib
import json
import random
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from oc_repl.client.chat import ChatClient
from oc_repl.client.failures import RETRY_AFTER_CAP, Failure, retry_after, retry_wait
from oc_repl.client.stream import Events
from oc_repl.client.think import ThinkRouter
from oc_repl.client.wire import MAX_DEPTH, StreamAccumulator, TooDeep, build_reply, loads, normalise_history
from oc_repl.errors import ContextOverflow, ServerError, ServerUnreachable, UsageError
from tests.conftest import run_cli
from tests.fakeserver import FakeServer, call_text, calls_text

ROOT = Path(__file__).resolve().parent.parent
USER = [{"role": "user", "content": "list the files"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "shell_exec",
            "description": "Run a command",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
]
LS = {"id": "s1", "command": "ls -la", "block": True, "timeout": None}
LONG = {"command": "for i in $(seq 1 100); do echo line $i; done > out.txt && wc -l out.txt"}
OVERFLOW_BODIES = {
    "vllm": {
        "object": "error",
        "message": "This model's maximum context length is 32768 tokens. However, you requested 40000 tokens "
        "(39000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    },
    "sglang": {
        "object": "error",
        "message": "The input (40000 tokens) is longer than the model's context length (32768 tokens).",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    },
    "llamacpp": {
        "error": {
            "code": 400,
            "message": "the request exceeds the available context size, try increasing it",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": 40000,
            "n_ctx": 32768,
        }
    },
}

both = pytest.mark.parametrize("stream", [True, False], ids=["stream", "plain"])


def _streamed_call_parts(reply) -> list[dict]:
    """Every tool-call delta exactly as the server streamed it."""
    return [p for c in reply.raw["chunks"] for ch in c["choices"] for p in ch["delta"].get("tool_calls") or []]


class Run:
    """One scripted server and a client pointed at it; deltas and retries recorded."""

    def __init__(self, script: dict, stream: bool = True, **kw) -> None:
        self.server = FakeServer(script).start()
        self.retries: list[tuple[str, int]] = []
        self.deltas: list[tuple[str, str]] = []
        kw.setdefault("backoff", 0.01)
        self.client = ChatClient(
            self.server.url, "sk-test", stream=stream, on_retry=lambda m, n: self.retries.append((m, n)), **kw
        )

    def complete(self, options: dict | None = None, messages: list | None = None):
        opts = {"tools": TOOLS} if options is None else options
        return self.client.complete(messages or USER, opts, on_delta=lambda k, t: self.deltas.append((k, t)))

    def text(self, kind: str) -> str:
        return "".join(t for k, t in self.deltas if k == kind)

    def chat_bodies(self) -> list[dict]:
        return [r["body"] for r in self.server.chat_requests()]


@pytest.fixture
def run():
    made: list[Run] = []

    def make(script: dict, stream: bool = True, **kw) -> Run:
        made.append(Run(script, stream, **kw))
        return made[-1]

    yield make
    for r in made:
        r.server.stop()


# --- shapes F1-F5 --------------------------------------------------------------------------------------


@both
def test_plain_answer_strips_think(run, stream):
    r = run({"flavour": "vllm", "replies": [{"text": "<think>\n\n</think>\n\n2 + 2 = 4."}]}, stream)
    reply = r.complete({})
    assert reply.content == "2 + 2 = 4."
    assert reply.reasoning == ""
    assert reply.raw_content == "<think>\n\n</think>\n\n2 + 2 = 4."
    assert reply.tool_calls == [] and reply.malformed_calls == []
    assert (reply.finish_reason, reply.truncated) == ("stop", False)
    assert reply.usage is not None and reply.usage.completion_tokens > 0
    assert reply.duration_s > 0
    if stream:
        assert reply.ttft_s is not None and reply.ttft_s <= reply.duration_s
        assert len(reply.raw["chunks"]) > 3 and reply.raw["message"]["content"] == reply.raw_content
        assert r.text("content") == "2 + 2 = 4." and r.text("reasoning") == ""
    else:
        assert reply.raw["object"] == "chat.completion" and reply.ttft_s is None


@both
def test_single_call_sglang(run, stream):
    r = run({"flavour": "sglang", "reasoning_parser": True, "replies": [{"text": call_text("shell_exec", LS)}]}, stream)
    reply = r.complete()
    assert [(c.name, c.arguments, c.source) for c in reply.tool_calls] == [("shell_exec", LS, "native")]
    assert reply.tool_calls[0].id.startswith("call_")
    assert (reply.content, reply.finish_reason, reply.truncated) == ("", "tool_calls", False)
    assert (r.client.native_calls, r.client.salvaged_calls) == (1, 0)


@both
def test_vllm_call(run, stream):
    r = run({"flavour": "vllm", "replies": [{"text": call_text("shell_exec", LS)}]}, stream)
    reply = r.complete()
    assert [(c.name, c.arguments, c.source) for c in reply.tool_calls] == [("shell_exec", LS, "native")]
    assert reply.tool_calls[0].id.startswith("chatcmpl-tool-")
    assert reply.content == "" and reply.raw_content == "<think>\n\n</think>\n\n"
    if stream:  # the vLLM shape: the first call delta carries no arguments key
        parts = _streamed_call_parts(reply)
        assert "arguments" not in parts[0]["function"] and len(parts) > 2
        assert r.text("content") == ""


@both
@pytest.mark.parametrize("flavour", ["sglang", "vllm", "llamacpp-python", "ollama"])
def test_two_calls_keep_order(run, stream, flavour):
    text = calls_text([("shell_exec", {"command": "ls"}), ("write_file", {"path": "a", "content": "b"})])
    reply = run({"flavour": flavour, "replies": [{"text": text}]}, stream).complete()
    assert [c.name for c in reply.tool_calls] == ["shell_exec", "write_file"]
    assert reply.tool_calls[1].arguments == {"path": "a", "content": "b"}
    assert len({c.id for c in reply.tool_calls}) == 2
    if stream and flavour != "ollama":
        assert {p["index"] for p in _streamed_call_parts(reply)} == {0, 1}


@both
def test_no_parser_salvages(run, stream):
    text = "Listing.\n" + call_text("shell_exec", LS, think=False)
    r = run({"flavour": "noparser", "replies": [{"text": text}]}, stream)
    reply = r.complete()
    assert [(c.name, c.arguments, c.source) for c in reply.tool_calls] == [("shell_exec", LS, "salvaged")]
    assert reply.tool_calls[0].id.startswith("call_") and len(reply.tool_calls[0].id) > 10
    assert reply.content == "Listing." and "<tool_call>" in reply.raw_content
    assert (reply.finish_reason, reply.truncated) == ("stop", False)
    assert (r.client.native_calls, r.client.salvaged_calls) == (0, 1)


@both
@pytest.mark.parametrize(
    "flavour,field", [("sglang", "reasoning_content"), ("vllm", "reasoning"), ("ollama", "reasoning")]
)
def test_reasoning_fields(run, stream, flavour, field):
    text = "<think>\nThe user wants a listing.\n</think>\n\nHere it is."
    script = {"flavour": flavour, "reasoning_parser": True, "reasoning_field": field, "replies": [{"text": text}]}
    r = run(script, stream)
    reply = r.complete({})
    assert reply.reasoning == "The user wants a listing."
    assert reply.content == "Here it is."
    wire = reply.raw["message"] if stream else reply.raw["choices"][0]["message"]
    assert field in wire and "<think>" not in (wire.get("content") or "")
    if stream:
        assert r.text("reasoning") == "The user wants a listing." and r.text("content") == "Here it is."


def test_sglang_unclosed_think_salvages_from_reasoning(run):
    text = "<think>\nI will list.\n" + call_text("shell_exec", LS, think=False)
    reply = run({"flavour": "sglang", "reasoning_parser": True, "replies": [{"text": text}]}).complete()
    assert [(c.name, c.source) for c in reply.tool_calls] == [("shell_exec", "salvaged")]
    assert reply.reasoning == "I will list." and reply.content == ""


# --- F6 truncation -------------------------------------------------------------------------------------


@both
@pytest.mark.parametrize("flavour", ["sglang", "vllm", "noparser", "llamacpp-python", "ollama"])
@pytest.mark.parametrize(
    "usage",
    [{}, {"usage": {"completion_tokens": 3}}, {"omit_usage": True}],
    ids=["usage-at-cap", "usage-under", "usage-omitted"],
)
def test_truncated_mid_call_is_never_executable(run, stream, flavour, usage):
    # with usage under-reported or missing, only finish_reason and the arguments check can catch the cut
    text = call_text("shell_exec", LONG)
    script = {"flavour": flavour, "replies": [{"text": text, "max_tokens_cut": len(text) - 40, **usage}]}
    reply = run(script, stream).complete({"tools": TOOLS, "max_tokens": 64})
    assert reply.truncated is True
    assert reply.tool_calls == []
    if usage:
        assert (reply.usage.completion_tokens if reply.usage else 0) < 64


def test_vllm_streamed_cut_caught_by_arguments_alone(run):
    # vLLM says "tool_calls" although the arguments were cut; no max_tokens is sent, so only the JSON check can tell
    text = call_text("shell_exec", LONG)
    r = run({"flavour": "vllm", "replies": [{"text": text, "max_tokens_cut": len(text) - 40}]})
    reply = r.complete()
    assert reply.finish_reason == "tool_calls"
    assert reply.truncated is True and reply.tool_calls == []
    assert len(reply.malformed_calls) == 1 and "for i in" in reply.malformed_calls[0]
    assert r.client.native_calls == 0


def test_sglang_streamed_cut_with_closing_fragment(run):
    # the flushed fragment makes the JSON valid; finish_reason "length" alone must stop execution
    text = call_text("shell_exec", LONG)
    r = run({"flavour": "sglang", "replies": [{"text": text, "max_tokens_cut": len(text) - 40}]})
    reply = r.complete()
    assert json.loads(reply.raw["message"]["tool_calls"][0]["function"]["arguments"])
    assert reply.finish_reason == "length"
    assert reply.truncated is True and reply.tool_calls == []


@both
def test_completion_tokens_at_cap_is_truncated(run, stream):
    reply_script = {"text": call_text("shell_exec", LS), "usage": {"completion_tokens": 64}}
    reply = run({"flavour": "sglang", "replies": [reply_script]}, stream).complete({"tools": TOOLS, "max_tokens": 64})
    assert reply.finish_reason == "tool_calls"
    assert reply.truncated is True and reply.tool_calls == []


# --- salvage details -------------------------------------------------------------------------------------


@both
def test_llamacpp_python_repeated_id_and_name(run, stream):
    reply = run({"flavour": "llamacpp-python", "replies": [{"text": call_text("shell_exec", LONG)}]}, stream).complete()
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [("shell_exec", LONG)]
    assert reply.tool_calls[0].id.count("call_") == 1
    if stream:
        names = [p["function"]["name"] for p in _streamed_call_parts(reply)]
        assert len(names) > 2 and set(names) == {"shell_exec"}


@both
def test_vllm_bad_json_in_one_block(run, stream):
    bad = '<tool_call>\n{"name": "shell_exec", "arguments": {"command": "ls"}\n</tool_call>'
    text = "<think>\n\n</think>\n\n" + call_text("shell_exec", LS, think=False) + "\n" + bad
    r = run({"flavour": "vllm", "replies": [{"text": text}]}, stream)
    reply = r.complete()
    assert [(c.name, c.arguments, c.source) for c in reply.tool_calls] == [("shell_exec", LS, "salvaged")]
    assert reply.malformed_calls == [bad]
    assert "<tool_call>" not in reply.content
    assert (r.client.native_calls, r.client.salvaged_calls) == (0, 1)


@both
@pytest.mark.parametrize("flavour", ["sglang", "noparser"])
def test_double_encoded_arguments(run, stream, flavour):
    text = call_text("shell_exec", json.dumps(LS))  # the model wrote the arguments as a JSON string
    reply = run({"flavour": flavour, "replies": [{"text": text}]}, stream).complete()
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [("shell_exec", LS)]
    assert reply.truncated is False


@both
@pytest.mark.parametrize("flavour", ["sglang", "noparser"])
def test_parameters_key(run, stream, flavour):
    text = '<tool_call>\n{"name": "shell_exec", "parameters": {"command": "pwd"}}\n</tool_call>'
    reply = run({"flavour": flavour, "replies": [{"text": text}]}, stream).complete()
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [("shell_exec", {"command": "pwd"})]
    assert reply.tool_calls[0].source == ("native" if flavour == "sglang" else "salvaged")


@both
@pytest.mark.parametrize("flavour,source", [("sglang", "salvaged"), ("vllm", "native")])
def test_call_without_newlines(run, stream, flavour, source):
    # sglang's parser needs the newlines around the JSON, vLLM's does not
    text = call_text("shell_exec", LS, newlines=False)
    reply = run({"flavour": flavour, "replies": [{"text": text}]}, stream).complete()
    assert [(c.name, c.arguments, c.source) for c in reply.tool_calls] == [("shell_exec", LS, source)]


def test_salvage_without_newlines_and_unterminated_block():
    text = '<tool_call>{"name": "a", "arguments": {}}</tool_call> then <tool_call>{"name": "b", "argu'
    reply = build_reply({"content": text}, "stop", None, None)
    assert [c.name for c in reply.tool_calls] == ["a"]
    assert reply.malformed_calls == ['<tool_call>{"name": "b", "argu']
    assert reply.content == "then"


def _fold(parts: list[dict]) -> list[dict]:
    acc = StreamAccumulator()
    for part in parts:
        acc.add({"choices": [{"index": 0, "delta": {"tool_calls": [part]}}]})
    return [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in acc.calls]


def test_accumulator_edge_shapes():
    fn = "function"
    # llama-cpp-python: id and name in every chunk
    repeated = [{"index": 0, "id": "c1", fn: {"name": "ls", "arguments": a}} for a in ['{"a"', ": 1", "}"]]
    assert _fold(repeated) == [("c1", "ls", '{"a": 1}')]
    # no index at all: arrival order, a new name opens a new call
    unindexed = [
        {"id": "c1", fn: {"name": "ls", "arguments": "{"}},
        {fn: {"arguments": "}"}},
        {fn: {"name": "pwd", "arguments": "{}"}},
    ]
    assert _fold(unindexed) == [("c1", "ls", "{}"), ("", "pwd", "{}")]
    # every whole call numbered 0, told apart by id
    zeroed = [{"index": 0, "id": f"c{i}", fn: {"name": n, "arguments": "{}"}} for i, n in enumerate(["ls", "pwd"])]
    assert _fold(zeroed) == [("c0", "ls", "{}"), ("c1", "pwd", "{}")]
    # object arguments (some servers send them unencoded)
    assert _fold([{"index": 0, "id": "c", fn: {"name": "ls", "arguments": {"a": 1}}}]) == [("c", "ls", '{"a": 1}')]


# --- streaming deltas -----------------------------------------------------------------------------------


@pytest.mark.parametrize("chunk_chars", [1, 2, 3, 4, 7])
@pytest.mark.parametrize(
    "text,content,reasoning",
    [
        ("<think>\nLet me look.\n</think>\n\nDone.", "Done.", "Let me look."),
        ("</think>\n\nHello.", "Hello.", ""),
        ("\n<think>\n\n</think>\n\n<b>bold</b>", "<b>bold</b>", ""),
    ],
)
def test_on_delta_never_shows_think(run, chunk_chars, text, content, reasoning):
    r = run({"flavour": "vllm", "chunk_chars": chunk_chars, "replies": [{"text": text}]})
    reply = r.complete({})
    assert (reply.content, reply.reasoning) == (content, reasoning)
    assert r.text("content") == content and r.text("reasoning") == reasoning
    assert all("think>" not in t for k, t in r.deltas if k == "content")


def test_think_router_every_split():
    text = "  <think>\n  a </thin b\n</think>\n\n x <think>y"
    for i in range(len(text) + 1):
        for j in range(i, len(text) + 1):
            out: list[tuple[str, str]] = []
            router = ThinkRouter(lambda k, t, out=out: out.append((k, t)))
            for piece in (text[:i], text[i:j], text[j:]):
                router.content(piece)
            router.flush()
            got = {k: "".join(t for kk, t in out if kk == k) for k in ("content", "reasoning")}
            assert got == {"content": "x <think>y", "reasoning": "a </thin b"}, (i, j)


def test_sse_events_whatever_the_split():
    # CRLF, LF and lone CR line ends; a comment; other fields; two data lines; an empty event; no final blank line
    text = b': ping\r\n\r\ndata: {"a": 1}\r\n\r\nevent: x\nid: 3\ndata:two\ndata: lines\n\n'
    text += b"data: a\r\rdata\r\rdata: [DONE]"
    for i in range(len(text) + 1):
        for j in range(i, len(text) + 1):
            events = Events()
            got = events.feed(text[:i]) + events.feed(text[i:j]) + events.feed(text[j:]) + events.end()
            assert got == ['{"a": 1}', "two\nlines", "a", "[DONE]"], (i, j)


# --- request shaping ----------------------------------------------------------------------------------------


@both
def test_request_shape(run, stream):
    r = run({"flavour": "sglang", "replies": [{"text": "ok"}]}, stream)
    history = [
        *USER,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "shell_exec", "arguments": {"command": "ls"}}},
                {"id": "c2", "type": "function", "function": {"name": "shell_exec", "arguments": '{"command": "for'}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "a.txt"},
        {"role": "tool", "tool_call_id": "c2", "content": "error"},
    ]
    original = json.dumps(history)
    r.complete({"tools": TOOLS, "temperature": 0.6, "top_k": 20, "max_tokens": 100}, history)
    body = r.chat_bodies()[-1]
    assert body["tool_choice"] == "auto" and body["tools"] == TOOLS
    assert body["temperature"] == 0.6 and body["top_k"] == 20 and body["max_tokens"] == 100
    sent = body["messages"][1]
    assert sent["content"] == ""
    assert [c["function"]["arguments"] for c in sent["tool_calls"]] == ['{"command": "ls"}', "{}"]
    assert json.dumps(history) == original  # the caller's history is left alone
    assert r.server.chat_requests()[-1]["headers"].get("authorization") is None
    if stream:
        assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    else:
        assert not body.get("stream")


def test_explicit_tool_choice_kept_and_no_tools_sends_none(run):
    r = run({"flavour": "sglang", "cycle": True, "replies": [{"text": "ok"}]})
    r.complete({"tools": TOOLS, "tool_choice": "none"})
    r.complete({})
    first, second = r.chat_bodies()
    assert first["tool_choice"] == "none"
    assert "tools" not in second and "tool_choice" not in second


def test_resolve_model_once(run):
    r = run({"model": "qwen3-8b-oc", "cycle": True, "replies": [{"text": "ok"}]})
    r.complete({})
    r.complete({})
    assert r.client.resolve_model() == "qwen3-8b-oc"
    assert [q["path"] for q in r.server.requests].count("/v1/models") == 1
    assert all(b["model"] == "qwen3-8b-oc" for b in r.chat_bodies())


# --- F7 and other failures -------------------------------------------------------------------------------


@both
def test_error_inside_stream_is_retried_then_fails(run, stream):
    broken = {"text": "x", "stream_error": "Internal server error: boom"}
    r = run({"cycle": True, "replies": [broken]}, stream, retries=2)
    with pytest.raises(ServerError) as info:
        r.complete()
    assert "boom" in info.value.message and not isinstance(info.value, ServerUnreachable)
    assert len(r.chat_bodies()) == 3
    assert [n for _, n in r.retries] == [2, 3]


@both
def test_two_500s_then_success(run, stream):
    script = {"replies": [{"http_error": 500}, {"http_error": 503}, {"text": "<think>\n\n</think>\n\nfine"}]}
    r = run(script, stream)
    reply = r.complete({})
    assert reply.content == "fine"
    assert len(r.retries) == 2 and "500" in r.retries[0][0]


@both
def test_disconnect_mid_response_is_retried(run, stream):
    r = run({"replies": [{"text": "a long enough answer to cut", "disconnect": True}, {"text": "whole"}]}, stream)
    assert r.complete({}).content == "whole"
    assert len(r.retries) == 1


def test_stalled_stream_times_out_and_fails(run):
    r = run({"cycle": True, "replies": [{"text": "slow words here", "stall": 5}]}, idle_timeout=0.5, retries=1)
    started = time.monotonic()
    with pytest.raises(ServerError) as info:
        r.complete({})
    assert time.monotonic() - started < 3
    assert "0.5s" in info.value.message
    assert len(r.retries) == 1 and len(r.chat_bodies()) == 2


def test_stream_closed_without_data_falls_back_to_plain(run):
    # llama-cpp-python's known failure: HTTP 200, then the connection closes with nothing sent
    script = {"flavour": "llamacpp-python", "strict": True, "cycle": True, "replies": [{"text": "ok"}]}
    r = run(script, retries=1)
    assert r.complete().content == "ok" and r.client.stream_tools is False
    assert [bool(b.get("stream")) for b in r.chat_bodies()] == [True, False] and r.retries == []
    r.complete()  # later requests with tools go plain at once; requests without tools still stream
    r.complete({})
    assert [bool(b.get("stream")) for b in r.chat_bodies()] == [True, False, False, True]


@pytest.mark.parametrize("trickle", ["keepalive", "empty_deltas"])
def test_stream_that_only_trickles_is_a_stall(run, trickle):
    # `: ping` comments or empty deltas keep bytes flowing, so the read timeout alone would never fire
    r = run({"cycle": True, "replies": [{"text": "slow words here", trickle: 5}]}, idle_timeout=0.5, retries=1)
    started = time.monotonic()
    with pytest.raises(ServerError) as info:
        r.complete({})
    assert time.monotonic() - started < 3
    assert "nothing useful for 0.5s" in info.value.message
    assert len(r.retries) == 1 and len(r.chat_bodies()) == 2


def test_slow_but_steady_stream_is_not_a_stall(run):
    # each delta is useful progress, so the watchdog waits although the whole reply takes longer than the limit
    r = run({"chunk_chars": 1, "replies": [{"text": "x" * 30, "keepalive": 0.3}]}, idle_timeout=0.5)
    assert r.complete({}).content == "x" * 30
    assert r.retries == []


def test_stream_dropped_without_data_falls_back_to_plain(run):
    # llama-cpp-python may also drop the connection outright: no data, no terminating chunk
    r = run({"flavour": "llamacpp-python", "cycle": True, "replies": [{"text": "ok", "drop_stream": True}]}, retries=1)
    assert r.complete().content == "ok" and r.client.stream_tools is False
    assert [bool(b.get("stream")) for b in r.chat_bodies()] == [True, False] and r.retries == []


def test_stream_dropped_without_tools_is_retried(run):
    r = run({"cycle": True, "replies": [{"text": "ok", "drop_stream": True}]}, retries=1)
    with pytest.raises(ServerError, match="broke"):
        r.complete({})
    assert len(r.retries) == 1 and r.client.stream_tools is True
    assert all(b.get("stream") for b in r.chat_bodies())


def _chunk(delta: dict | None = None, finish: str | None = None) -> dict:
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}]}


@pytest.mark.parametrize(
    "bad",
    [
        {"choices": [None]},
        {"choices": "x"},
        _chunk("not a delta"),
        _chunk({"tool_calls": [None]}),
        _chunk({"tool_calls": [{"index": 0, "id": "c1", "function": "x"}]}),
        {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": "n/a", "total_tokens": None}},
    ],
)
def test_malformed_chunks_are_skipped(run, bad):
    chunks = [_chunk({"role": "assistant", "content": "he"}), bad, _chunk({"content": "llo"}), _chunk(finish="stop")]
    reply = run({"replies": [{"raw_stream": chunks}]}).complete({"max_tokens": 64})
    assert reply.content == "hello" and reply.tool_calls == []


def test_malformed_plain_reply_is_read_defensively(run):
    message = {"role": "assistant", "content": "hi", "tool_calls": [None, {"id": "c1", "function": "x"}]}
    body = {"choices": [{"message": message, "finish_reason": "stop"}], "usage": {"completion_tokens": "n/a"}}
    reply = run({"replies": [{"raw_body": body}]}, stream=False).complete({"max_tokens": 64})
    assert reply.content == "hi" and reply.tool_calls == [] and reply.usage.completion_tokens == 0


@both
def test_unreadable_reply_is_a_server_error_not_retried(run, stream):
    if stream:
        script = {"cycle": True, "replies": [{"raw_stream": [_chunk({"tool_calls": 5}), _chunk(finish="stop")]}]}
    else:
        script = {"cycle": True, "replies": [{"raw_body": {"choices": [{"message": "x", "finish_reason": "stop"}]}}]}
    r = run(script, stream, retries=2)
    with pytest.raises(ServerError, match="malformed reply"):
        r.complete()
    assert len(r.chat_bodies()) == 1 and r.retries == []


def test_stream_broken_after_data_is_retried_not_unstreamed(run):
    script = {"flavour": "sglang", "cycle": True, "replies": [{"text": "ok", "disconnect": True}]}
    r = run(script, retries=1)
    with pytest.raises(ServerError):
        r.complete()
    assert len(r.retries) == 1 and r.client.stream_tools is True
    assert all(b.get("stream") for b in r.chat_bodies())


def test_nothing_listening(run):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    retried: list[int] = []
    api_base = f"http://127.0.0.1:{port}/v1"
    client = ChatClient(api_base, "", "m", retries=2, backoff=0.01, on_retry=lambda m, n: retried.append(n))
    started = time.monotonic()
    with pytest.raises(ServerUnreachable) as info:
        client.complete(USER, {})
    assert time.monotonic() - started < 2
    assert f"127.0.0.1:{port}/v1" in info.value.message
    assert "sglang.launch_server" in info.value.hint and "--tool-call-parser hermes" in info.value.hint
    assert retried == [2, 3]


@both
@pytest.mark.parametrize("server", sorted(OVERFLOW_BODIES))
def test_context_overflow(run, stream, server):
    r = run({"cycle": True, "replies": [{"http_error": 400, "body": OVERFLOW_BODIES[server]}]}, stream)
    with pytest.raises(ContextOverflow) as info:
        r.complete()
    assert "40000" in info.value.message and "32768" in info.value.message
    assert len(r.chat_bodies()) == 1 and r.retries == []


def test_vllm_prompt_plus_max_tokens_overflow(run):
    said = (
        "'max_tokens' or 'max_completion_tokens' is too large: 8192. This model's maximum context length is "
        "16384 tokens and your request has 9000 input tokens (8192 > 16384 - 9000)."
    )
    body = {"object": "error", "message": said, "type": "BadRequestError", "param": None, "code": 400}
    r = run({"cycle": True, "replies": [{"http_error": 400, "body": body}]})
    with pytest.raises(ContextOverflow) as info:
        r.complete({"tools": TOOLS, "max_tokens": 8192})
    message = info.value.message
    assert "prompt (9000 tokens)" in message and "new tokens (8192)" in message and "(16384)" in message
    assert info.value.hint.startswith("Lower --max-tokens") and "larger context" in info.value.hint
    assert r.retries == []


@pytest.mark.parametrize("status", [400, 401, 404, 422])
def test_client_errors_are_not_retried(run, status):
    body = {"object": "error", "message": "tool_choice auto needs a parser", "type": "BadRequestError", "code": status}
    r = run({"cycle": True, "replies": [{"http_error": status, "body": body}]})
    with pytest.raises(ServerError) as info:
        r.complete()
    assert not isinstance(info.value, ContextOverflow)
    assert str(status) in info.value.message and "needs a parser" in info.value.message
    assert len(r.chat_bodies()) == 1 and r.retries == []


def test_script_exhausted_is_a_server_error(run):
    r = run({"replies": []}, retries=1)
    with pytest.raises(ServerError, match="script exhausted"):
        r.complete({})


# --- issue 10: hostile server input -------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["disconnect", "reset"])
def test_10_1_stream_dropped_mid_reply_is_retried(run, how):
    r = run({"flavour": "vllm", "replies": [{"text": "a reply long enough to break", how: True}, {"text": "whole"}]})
    assert r.complete({}).content == "whole"
    assert len(r.retries) == 1 and "broke" in r.retries[0][0]
    r = run({"cycle": True, "replies": [{"text": "a reply long enough to break", how: True}]}, retries=1)
    with pytest.raises(ServerError, match="broke"):
        r.complete({})
    assert len(r.chat_bodies()) == 2


@both
@pytest.mark.parametrize("finish", [5, ["stop"], {"reason": "stop"}, True])
def test_10_3_non_string_finish_reason_is_a_server_error(run, stream, finish):
    if stream:
        reply = {"raw_stream": [_chunk({"role": "assistant", "content": "hi"}), _chunk(finish=finish)]}
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
def test_10_3_unusable_model_list_is_a_server_error(run, listing):
    r = run({"models_body": listing, "replies": [{"text": "ok"}]}, retries=2)
    with pytest.raises(ServerError, match="malformed reply") as info:
        r.client.resolve_model()
    assert info.value.exit_code == 5 and r.retries == [] and r.chat_bodies() == []


def test_10_3_empty_model_list_asks_for_a_model(run):
    r = run({"models_body": {"data": []}, "replies": [{"text": "ok"}]})
    with pytest.raises(ServerError, match="lists no models") as info:
        r.client.resolve_model()
    assert "--model" in info.value.hint


@both
def test_10_3_wrongly_typed_fields_are_read_as_absent(run, stream):
    call = {"id": 7, "type": "function", "function": {"name": "shell_exec", "arguments": '{"command": "ls"}'}}
    content = [{"type": "text", "text": "he"}, {"type": "text", "text": 5}, {"type": "text", "text": "llo"}]
    usage = {"prompt_tokens": [], "completion_tokens": "n/a", "total_tokens": 1e400}
    if stream:
        reply = {"raw_stream": [_chunk({"tool_calls": [{"index": 0, **call}]}), _chunk(finish="tool_calls")]}
    else:
        message = {"role": "assistant", "content": content, "tool_calls": [call], "reasoning_content": 3}
        reply = {"raw_body": {"choices": [{"message": message, "finish_reason": "tool_calls"}], "usage": usage}}
    got = run({"replies": [reply]}, stream).complete()
    assert [(c.name, c.arguments) for c in got.tool_calls] == [("shell_exec", {"command": "ls"})]
    assert isinstance(got.tool_calls[0].id, str) and got.tool_calls[0].id
    assert got.reasoning == "" and got.content == ("" if stream else "hello")


@both
def test_10_3_choices_that_are_not_a_list_are_malformed(run, stream):
    reply = {"raw_stream": [{"choices": 5}]} if stream else {"raw_body": {"choices": 5}}
    r = run({"cycle": True, "replies": [reply]}, stream, retries=1)
    with pytest.raises(ServerError, match="malformed reply" if not stream else "broken response"):
        r.complete({})


DEEP = "[" * 1000


@both
@pytest.mark.parametrize("flavour", ["sglang", "noparser"])
def test_10_5a_deeply_nested_arguments_are_a_malformed_call(run, stream, flavour):
    # sglang hands the arguments over natively, as a string; without a parser the markup is salvaged from the text
    text = '<tool_call>\n{"name": "shell_exec", "arguments": {"command": ' + DEEP + "}}\n</tool_call>"
    if flavour == "sglang":
        arguments = '{"command": ' + DEEP
        call = {"id": "c1", "type": "function", "function": {"name": "shell_exec", "arguments": arguments}}
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
        if stream:
            reply = {"raw_stream": [_chunk({"tool_calls": [{"index": 0, **call}]}), _chunk(finish="tool_calls")]}
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


def test_10_5a_depth_limit_of_untrusted_json():
    assert loads("[" * MAX_DEPTH + "]" * MAX_DEPTH) is not None
    for depth in (MAX_DEPTH + 1, 1000, 100_000):
        with pytest.raises(TooDeep):
            loads("[" * depth + "]" * depth)
    with pytest.raises(ValueError):
        loads("[" * 100_000)  # unterminated as well as deep
    assert build_reply({"content": "<tool_call>" + "[" * 100_000}, "stop", None, None).malformed_calls


@both
def test_10_5a_deeply_nested_reply_is_a_malformed_reply(run, stream):
    nested = json.loads("[" * 150 + "]" * 150)
    reply = {"raw_stream": [_chunk({"content": "x", "extra": nested})]} if stream else {"raw_body": {"x": nested}}
    r = run({"cycle": True, "replies": [reply]}, stream, retries=2)
    with pytest.raises(ServerError, match="malformed reply: .*nested deeper"):
        r.complete({})
    assert r.retries == []


@both
def test_10_5b_invalid_utf8_reads_as_replacement_characters(run, stream):
    text = b'"caf\xe9 \xff\xfe ok"'
    if stream:
        data = b'data: {"choices":[{"index":0,"delta":{"content":' + text + b'},"finish_reason":null}]}\n\n'
        reply = {"raw_stream": [data, _chunk(finish="stop")]}
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
def test_10_5c_api_base_that_is_not_http_is_a_usage_error(api_base):
    started = time.monotonic()
    with pytest.raises(UsageError) as info:
        ChatClient(api_base, "k", "m", retries=3)
    assert info.value.exit_code == 2 and "http(s) URL" in info.value.message
    assert time.monotonic() - started < 2  # no request, no backoff


@pytest.mark.parametrize("command", ["run", "doctor"])
def test_10_5c_cli_rejects_an_api_base_that_is_not_http(tmp_path, command):
    extra = ["--sandbox", f"local:{tmp_path}", "--yes", "hello"] if command == "run" else []
    proc = run_cli([command, "--api-base", "ftp://x", *extra], tmp_path, timeout=60)
    assert proc.returncode == 2 and "http(s) URL" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("kwargs", [{"api_key": "a\nb"}, {"api_key": "clé"}, {"idle_timeout": 0}])
def test_10_5c_other_unusable_configuration_is_a_usage_error(kwargs):
    with pytest.raises(UsageError):
        ChatClient("http://127.0.0.1:9/v1", **{"api_key": "k", **kwargs})


@pytest.mark.parametrize("status", [429, 503])
@pytest.mark.parametrize("form", ["seconds", "date"])
def test_10_22_retry_after_is_honoured(run, status, form):
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


def test_10_22_retry_after_is_capped():
    error = ServerError("HTTP 429")
    assert retry_after("3600") == 3600 and retry_after("-5") == 0 and retry_after("soon") is None
    assert retry_after("nan") is None and retry_after("inf") is None and retry_after("") is None
    assert retry_after("Wed, 21 Oct 2015 07:28:30 GMT", now=1445412500.0) == 10.0
    delay, said = retry_wait(Failure(error, True, asked=3600.0), 1, 0.5)
    assert delay == RETRY_AFTER_CAP == 60 and "asked for 3600s" in said and "Retrying in 60s" in said
    assert retry_wait(Failure(error, True), 2, 0.5) == (1.0, "Retrying in 1s.")


@pytest.mark.parametrize("how", ["silent", "trickle"])
def test_10_23_unstreamed_request_is_bounded_by_the_request_timeout(run, how):
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


def test_10_random_server_bodies_end_in_a_reply_or_a_server_error(run):
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


# --- issue 12: start-up and per-turn cost -------------------------------------------------------------------


def test_12_client_import_is_cheap():
    code = (
        "import sys\nfrom oc_repl.client.chat import ChatClient\n"
        "heavy = lambda: sorted(m for m in ('openai', 'pydantic', 'httpx') if m in sys.modules)\n"
        "print(heavy())\nChatClient('http://127.0.0.1:9/v1', 'k', 'm')\nprint(heavy())"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, capture_output=True, text=True).stdout
    assert out.splitlines() == ["[]", "['httpx']"]


def test_12_turns_reuse_one_connection(run):
    r = run({"flavour": "vllm", "cycle": True, "replies": [{"text": call_text("shell_exec", LS)}]})
    for options in ({"tools": TOOLS}, {"tools": TOOLS, "stream": False}, {"tools": TOOLS}):
        assert r.complete(options).tool_calls
    assert len({q["client_port"] for q in r.server.requests}) == 1


def test_12_streamed_turn_starts_no_thread(tmp_path):
    with _served({"chunk_chars": 1, "replies": [{"text": "x" * 20, "keepalive": 0.3}]}, tmp_path) as url:
        client = ChatClient(url, "k", "m", idle_timeout=5)
        before = set(threading.enumerate())
        during: set[threading.Thread] = set()
        reply = client.complete(USER, {}, on_delta=lambda k, t: during.update(threading.enumerate()))
    assert reply.content == "x" * 20 and during and during <= before


def test_12_history_arguments_are_checked_once():
    memo: dict[str, str] = {}
    calls = [{"id": "c1", "function": {"name": "ls", "arguments": a}} for a in ('{"a": 1}', '{"cut')]
    history = [*USER, {"role": "assistant", "content": "", "tool_calls": calls}]
    first, again = normalise_history(history, memo), normalise_history(history, memo)
    sent = [c["function"]["arguments"] for c in again[1]["tool_calls"]]
    assert sent == ['{"a": 1}', "{}"] and sent[0] is calls[0]["function"]["arguments"]
    assert again[1]["tool_calls"][1]["function"]["arguments"] is first[1]["tool_calls"][1]["function"]["arguments"]
    assert normalise_history(USER, memo) is USER


# --- packaging --------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _served(script: dict, tmp_path: Path, log: Path | None = None):
    """The fake server in a process of its own (so this process's threads are the client's only)."""
    path, port_file = tmp_path / "script.json", tmp_path / "port"
    path.write_text(json.dumps(script))
    cmd = [sys.executable, "-m", "tests.fakeserver", str(path), "--port-file", str(port_file)]
    cmd += ["--requests-log", str(log)] if log else []
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not port_file.exists():
            assert time.monotonic() < deadline and proc.poll() is None, "the fake server did not start"
            time.sleep(0.02)
        yield f"http://127.0.0.1:{port_file.read_text()}/v1"
    finally:
        proc.terminate()
        proc.wait(10)


def test_fakeserver_cli(tmp_path):
    script = {"flavour": "noparser", "replies": [{"text": call_text("shell_exec", LS)}]}
    log = tmp_path / "requests.jsonl"
    with _served(script, tmp_path, log) as url:
        client = ChatClient(url, "k", "m", backoff=0.01)
        reply = client.complete(USER, {"tools": TOOLS})
    assert [c.source for c in reply.tool_calls] == ["salvaged"]
    logged = [json.loads(line) for line in log.read_text().splitlines()]
    assert logged[-1]["body"]["tool_choice"] == "auto"
