"""ChatClient against the loopback fake server: the reply shapes of sglang, vLLM, llama.cpp and ollama,
streamed or not, truncation, salvage, streamed deltas and the request's shape."""

from __future__ import annotations

import json

import pytest

from oc_repl.client.stream import Events
from oc_repl.client.think import ThinkRouter
from oc_repl.client.wire import StreamAccumulator, build_reply
from tests.client_support import (
    LONG,
    LS,
    TOOLS,
    USER,
    _streamed_call_parts,
    both,
    run_fixture,  # noqa: F401 (the `run` fixture)
)
from tests.fakeserver import call_text, calls_text

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
