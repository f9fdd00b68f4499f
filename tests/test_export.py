"""`oc-repl export --format openai-chat`: each episode as exactly what went over the wire, one JSON line each."""

from __future__ import annotations

import json

from tests.cli.test_cli import answer
from tests.conftest import run_cli
from tests.docker_support import exec_call


def run_episode(serve, tmp_path, transcript, replies, *more):
    server = serve({"replies": replies})
    work = tmp_path / "w"
    args = ["run", "--api-base", server.url, "--retries", "0", "--sandbox", f"local:{work}", "--yes"]
    proc = run_cli([*args, "--transcript", str(transcript), *more, "make a file"], tmp_path)
    return proc, server


def test_an_episode_is_the_exact_requests_and_replies(serve, tmp_path):
    transcript = tmp_path / "t.jsonl"
    replies = [exec_call("echo hi > f.txt"), answer("Made it.")]
    proc, server = run_episode(serve, tmp_path, transcript, replies, "--verify", "test -f f.txt")
    assert proc.returncode == 0, proc.stderr
    out = run_cli(["export", str(transcript), "--format", "openai-chat"], tmp_path)
    assert out.returncode == 0, out.stderr
    (line,) = out.stdout.splitlines()
    episode = json.loads(line)
    wire = [r["body"] for r in server.chat_requests()]
    assert episode["format"] == "oc-repl/openai-chat/1"
    assert [t["messages"] for t in episode["turns"]] == [body["messages"] for body in wire]
    assert [t["tools"] for t in episode["turns"]] == [body["tools"] for body in wire]
    assert episode["tools"] == wire[-1]["tools"]
    first, last = episode["turns"]
    assert (
        first["reply"]["tool_calls"][0]["function"]["name"] == "shell_exec" and first["finish_reason"] == "tool_calls"
    )
    assert last["reply"]["content"].endswith("Made it.")  # as the server sent it, think block and all
    assert episode["messages"] == [*wire[-1]["messages"], last["reply"]]
    assert first["options"]["temperature"] == wire[0]["temperature"]
    meta = episode["metadata"]
    assert meta["verified"] and meta["status"] == "verified" and meta["protocol"] == "camel-terminal-toolkit"
    assert meta["task"] == "make a file" and meta["transcript"] == str(transcript)


def test_every_episode_of_a_transcript_and_a_cut_last_line(serve, tmp_path):
    transcript = tmp_path / "t.jsonl"
    for text in ("one", "two"):
        proc, _ = run_episode(serve, tmp_path, transcript, [answer(text)])  # appended to the same transcript
        assert proc.returncode == 0, proc.stderr
    with transcript.open("a") as f:
        f.write('{"type": "thread.started", "ts": 1')  # a crash mid-line
    target = tmp_path / "episodes.jsonl"
    out = run_cli(["export", str(transcript), "-o", str(target)], tmp_path)
    assert out.returncode == 0 and "2 episodes" in out.stderr
    answers = [json.loads(line)["messages"][-1]["content"].split()[-1] for line in target.read_text().splitlines()]
    assert answers == ["one", "two"]


def test_nothing_to_export_is_an_error(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    out = run_cli(["export", str(empty)], tmp_path)
    assert out.returncode == 2 and "no episode" in out.stderr


def test_threads_without_a_reply_are_counted_as_skipped_with_why(serve, tmp_path):
    transcript = tmp_path / "t.jsonl"
    run_episode(serve, tmp_path, transcript, [answer("one")])
    failing = serve({"replies": [{"http_error": 500, "text": ""}]})
    args = ["run", "--api-base", failing.url, "--retries", "0", "--sandbox", f"local:{tmp_path / 'w'}", "--yes"]
    assert run_cli([*args, "--transcript", str(transcript), "fail"], tmp_path).returncode == 5
    proc = run_cli(["export", str(transcript)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 1
    assert "1 episodes exported" in proc.stderr and "1 skipped: 1 no model reply (server_error)" in proc.stderr
