"""ChatClient against failing servers (errors, stalls, drops, overflow: retried or reported), the client's cost,
and the fake server's own command line."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from oc_repl.client.chat import ChatClient
from oc_repl.client.wire import normalise_history
from oc_repl.errors import ContextOverflow, ServerError, ServerUnreachable
from tests.client_support import (
    LS,
    OVERFLOW_BODIES,
    ROOT,
    TOOLS,
    USER,
    both,
    run_fixture,  # noqa: F401 (the `run` fixture)
    sse_chunk,
)
from tests.fakeserver import call_text

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


def test_stream_closed_without_data_falls_back_to_plain(run):
    # llama-cpp-python's known failure: HTTP 200, then the connection closes with nothing sent
    script = {"flavour": "llamacpp-python", "strict": True, "cycle": True, "replies": [{"text": "ok"}]}
    r = run(script, retries=1)
    assert r.complete().content == "ok" and r.client.stream_tools is False
    assert [bool(b.get("stream")) for b in r.chat_bodies()] == [True, False] and r.retries == []
    r.complete()  # later requests with tools go plain at once; requests without tools still stream
    r.complete({})
    assert [bool(b.get("stream")) for b in r.chat_bodies()] == [True, False, False, True]


@pytest.mark.parametrize(
    ("how", "said"),
    [("stall", "0.5s"), ("keepalive", "nothing useful for 0.5s"), ("empty_deltas", "nothing useful for 0.5s")],
)
def test_a_stream_that_stalls_or_only_trickles_times_out_and_fails(run, how, said):
    # `: ping` comments or empty deltas keep bytes flowing, so the read timeout alone would never fire
    r = run({"cycle": True, "replies": [{"text": "slow words here", how: 5}]}, idle_timeout=0.5, retries=1)
    started = time.monotonic()
    with pytest.raises(ServerError) as info:
        r.complete({})
    assert time.monotonic() - started < 3
    assert said in info.value.message
    assert len(r.retries) == 1 and len(r.chat_bodies()) == 2
    (retried, _), given_up = r.retries[0], info.value.hint  # both say how to give a busy server more time
    assert "--idle-timeout" in retried and "--idle-timeout" in given_up and "-j" in given_up


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


@pytest.mark.parametrize(
    "bad",
    [
        {"choices": [None]},
        {"choices": "x"},
        sse_chunk("not a delta"),
        sse_chunk({"tool_calls": [None]}),
        sse_chunk({"tool_calls": [{"index": 0, "id": "c1", "function": "x"}]}),
        {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": "n/a", "total_tokens": None}},
    ],
)
def test_malformed_chunks_are_skipped(run, bad):
    chunks = [
        sse_chunk({"role": "assistant", "content": "he"}),
        bad,
        sse_chunk({"content": "llo"}),
        sse_chunk(finish="stop"),
    ]
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
        script = {"cycle": True, "replies": [{"raw_stream": [sse_chunk({"tool_calls": 5}), sse_chunk(finish="stop")]}]}
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


# --- start-up and per-turn cost -------------------------------------------------------------------------


def test_client_import_is_cheap():
    code = (
        "import sys\nfrom oc_repl.client.chat import ChatClient\n"
        "heavy = lambda: sorted(m for m in ('openai', 'pydantic', 'httpx') if m in sys.modules)\n"
        "print(heavy())\nclient = ChatClient('http://127.0.0.1:9/v1', 'k', 'm')\nprint(heavy())\n"
        "client.connect()\nprint(heavy())"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, capture_output=True, text=True).stdout
    assert out.splitlines() == ["[]", "[]", "['httpx']"]  # httpx loads when the client connects, never the SDKs


def test_turns_reuse_one_connection(run):
    r = run({"flavour": "vllm", "cycle": True, "replies": [{"text": call_text("shell_exec", LS)}]})
    for options in ({"tools": TOOLS}, {"tools": TOOLS, "stream": False}, {"tools": TOOLS}):
        assert r.complete(options).tool_calls
    assert len({q["client_port"] for q in r.server.requests}) == 1


def test_streamed_turn_starts_no_thread(tmp_path):
    with _served({"chunk_chars": 1, "replies": [{"text": "x" * 20, "keepalive": 0.3}]}, tmp_path) as url:
        client = ChatClient(url, "k", "m", idle_timeout=5)
        before = set(threading.enumerate())
        during: set[threading.Thread] = set()
        reply = client.complete(USER, {}, on_delta=lambda k, t: during.update(threading.enumerate()))
    assert reply.content == "x" * 20 and during and during <= before


def test_history_arguments_are_checked_once():
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


def test_a_reply_keeps_the_time_of_every_attempt_of_its_request(run):
    # the first attempt stalls past the idle timeout, the second answers: the turn's record keeps both
    r = run({"replies": [{"text": "never", "stall": 5}, {"text": "ok"}]}, idle_timeout=0.5, retries=1)
    reply = r.complete({})
    assert reply.content == "ok" and len(reply.attempts_s) == 2
    assert reply.attempts_s[0] >= 0.5 and reply.request_s >= sum(reply.attempts_s) > reply.duration_s
