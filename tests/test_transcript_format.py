"""Transcripts of format 2: each request written against the thread's previous one, so a transcript grows with the
turns, not with their square; every reader gives each request whole, byte for byte as it was sent, and transcripts
of format 1 (every request whole) read as before."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oc_repl.event_json import json_text, to_dict
from oc_repl.events import RequestSent, ThreadStarted
from oc_repl.transcript import TranscriptWriter, read_events
from tests.cli.test_cli import base_args
from tests.conftest import raw_jsonl, read_jsonl, run_cli
from tests.fakemodel import call_text
from tests.tokenizer_support import model_dir

CAMEL, TERMINUS = "camel-terminal-toolkit", "terminus-json"
PADDING = "x" * 200  # each command's output: a turn's worth of new conversation
EXAMPLES = int(os.environ.get("OC_REPL_FUZZ_EXAMPLES", "100"))


def camel_turns(n: int) -> list[dict]:
    calls = [
        {"id": f"s{i}", "command": f"echo turn {i:04d} {PADDING}", "block": True, "timeout": None} for i in range(n)
    ]
    return [{"text": call_text("shell_exec", c)} for c in calls]


def terminus_turns(n: int) -> list[dict]:
    def turn(i: int) -> dict:
        # the screen cleared first: each turn shows as much as the last, from the first on
        keys = [{"keystrokes": f"clear; echo turn {i:04d} {PADDING}\n", "duration": 0.1}]
        return {"text": json.dumps({"analysis": "a", "plan": "p", "commands": keys, "task_complete": False})}

    return [turn(i) for i in range(n)]


def ran(serve, tmp_path: Path, name: str, replies: list[dict], turns: int, *more: str) -> Path:
    server = serve({"replies": replies})
    transcript = tmp_path / f"{name}.jsonl"
    args = ["--transcript", str(transcript), "--max-turns", str(turns), "--loop-limit", "0", *more]
    proc = run_cli([*base_args(server, tmp_path / name, *args), "go on"], tmp_path)
    assert proc.returncode == 3, proc.stderr  # the turn cap
    return transcript


@pytest.mark.timeout(900)
@pytest.mark.parametrize("protocol", [CAMEL, TERMINUS])
def test_a_transcript_of_twice_the_turns_is_at_most_twice_the_size(serve, tmp_path, protocol):
    replies = (camel_turns if protocol == CAMEL else terminus_turns)(200)
    short = ran(serve, tmp_path, "short", replies[:100], 100, "--protocol", protocol)
    long = ran(serve, tmp_path, "long", replies, 200, "--protocol", protocol)
    assert long.stat().st_size <= 2 * short.stat().st_size, (short.stat().st_size, long.stat().st_size)
    kinds = [e.type for e in read_events(long)]
    assert kinds.count("request.sent") == 200 and kinds.count("response.received") == 200
    last = [e for e in read_events(long) if e.type == "request.sent"][-1]
    assert f"turn 0198 {PADDING}" in json.dumps(last.request["messages"])  # the whole conversation, rebuilt


@pytest.mark.parametrize("wire", ["chat", "completions", "generate"])
def test_every_request_rebuilt_from_the_transcript_is_the_one_the_server_received(serve, tmp_path, wire):
    pytest.importorskip("tokenizers", reason="the text wires' fake server needs the tokenizers package")
    replies = [*camel_turns(4), {"text": "<think>\n\n</think>\n\nDone."}]
    more: tuple[str, ...] = ()
    if wire != "chat":
        model = model_dir(tmp_path / "model", "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}")
        more = ("--wire", wire, "--tokenizer", str(model))
    server = serve({"replies": replies, **({"tokenizer": str(more[-1]) + "/tokenizer.json"} if more else {})})
    transcript = tmp_path / "t.jsonl"
    args = base_args(server, tmp_path / "w", "--transcript", str(transcript), *more, "go on")
    assert run_cli(args, tmp_path).returncode == 0
    sent = [e for e in read_events(transcript) if e.type == "request.sent"]
    posted = [r["body"] for r in server.requests if r["method"] == "POST"]
    assert len(sent) == len(posted) == 5
    for event, body in zip(sent, posted, strict=True):
        if wire == "chat":  # the body's messages are the request's own, kept there once
            assert json.dumps(event.request["messages"]) == json.dumps(body.pop("messages"))
        assert json.dumps(event.body["json"]) == json.dumps(body)
    written = [e for e in raw_jsonl(transcript) if e["type"] == "request.sent"]
    assert all(set(e["request"]) == set(e["body"]) == {"$edit"} for e in written[1:])  # against the one before


def test_a_transcript_of_format_1_reads_as_it_did(serve, tmp_path):
    transcript = ran(serve, tmp_path, "t", camel_turns(3), 3)
    whole = tmp_path / "format1.jsonl"  # every request whole, no format named: as written before format 2
    events = read_jsonl(transcript)
    kept = [{k: v for k, v in e.items() if (k, e["type"]) != ("transcript", "thread.started")} for e in events]
    whole.write_text("".join(json_text(e) + "\n" for e in kept))
    assert [to_dict(e) for e in read_events(whole)] == [
        {**to_dict(e), "transcript": None} if e.type == "thread.started" else to_dict(e)
        for e in read_events(transcript)
    ]
    assert next(read_events(transcript)).transcript == 2


# --- the format on its own: any sequence of requests, written and read back -------------------------------------

scalar = st.one_of(
    st.integers(-3, 3), st.floats(allow_nan=False, allow_infinity=False), st.booleans(), st.none(), st.text(max_size=5)
)
value = st.recursive(scalar, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner))
message = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "tool"]), "content": value})
# how each request follows the one before: messages appended, some dropped or changed, tools and options changed
change = st.tuples(
    st.integers(0, 3),  # messages kept from the end... of the previous ones: how many dropped
    st.lists(message, max_size=3),  # appended
    st.booleans(),  # tools changed
    st.dictionaries(st.sampled_from(["temperature", "top_p", "extra_body", "stop"]), value, max_size=3),
    st.lists(st.integers(0, 9), max_size=4),  # token ids appended
    st.integers(0, 2),  # token ids dropped at the end
)


@settings(max_examples=EXAMPLES, deadline=None)
@given(first=st.lists(message, max_size=3), changes=st.lists(change, max_size=6), threads=st.integers(1, 2))
def test_any_sequence_of_requests_reads_back_byte_for_byte(tmp_path_factory, first, changes, threads):
    path = tmp_path_factory.mktemp("format") / "t.jsonl"
    writer, sent = TranscriptWriter(path), []
    for thread in range(threads):
        writer(ThreadStarted(thread_id=f"t{thread}", model="m", protocol="p", sandbox="s", api_base="b"))
        messages, tools, ids = list(first), [{"type": "function"}], [1, 2, 3]
        for turn, (dropped, added, retool, options, more_ids, cut) in enumerate(changes, start=1):
            messages = messages[: max(0, len(messages) - dropped)] + added
            tools = [{"type": "function", "n": turn}] if retool else tools
            ids = ids[: max(0, len(ids) - cut)] + more_ids
            request = {"messages": messages, "tools": tools, **options}
            event = RequestSent(turn=turn, request=request, body={"wire": "w", "json": {"input_ids": ids, **options}})
            writer(event)
            sent.append(json_text(to_dict(event)))
    writer.close()
    assert [json_text(to_dict(e)) for e in read_events(path) if e.type == "request.sent"] == sent


def test_a_secret_in_the_conversation_is_redacted_in_every_request_read_back(tmp_path):
    from oc_repl.redact import redactor

    key = "sk-local-7f3a9c2e5b1d"
    path, redact = tmp_path / "t.jsonl", redactor(key)
    writer, sent = TranscriptWriter(path, secrets=(key,)), []
    writer(ThreadStarted(thread_id="t", model="m", protocol="p", sandbox="s", api_base="b"))
    messages: list[dict] = [{"role": "user", "content": "go on " * 30}]
    for turn in range(1, 5):
        messages = [*messages, {"role": "tool", "content": f"turn {turn}: the key is {key}, twice: {key}"}]
        event = RequestSent(turn=turn, request={"messages": messages}, body={"wire": "chat", "json": {"n": turn}})
        writer(event)
        sent.append(json_text(redact.data(to_dict(event))))
    writer.close()
    assert key not in path.read_text()
    assert [json_text(to_dict(e)) for e in read_events(path) if e.type == "request.sent"] == sent
