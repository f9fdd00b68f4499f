"""`oc-repl export --format openai-chat`: each episode as exactly what went over the wire, one JSON line each."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from oc_repl.bench.results import TRANSCRIPT, TrialResult, trial_dir, write_result
from tests.cli.test_cli import answer
from tests.conftest import cli_env, run_cli
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


LARGE = 200_000  # characters of the model's one reply: each episode holds it in its request and its reply


def bench_of(source: Path, out: Path, trials: int) -> Path:
    """A bench directory of `trials` finished trials, each with `source` as its transcript (hard links: no disk)."""
    for attempt in range(1, trials + 1):
        directory = trial_dir(out, "big-task", "p", attempt)
        directory.mkdir(parents=True, exist_ok=True)
        write_result(directory, TrialResult("big-task", "p", attempt, "verified", "resolved", True, 0))
        os.link(source, directory / TRANSCRIPT)
    (out / "bench.json").write_text(json.dumps({"tasks": [{"name": "big-task"}], "protocols": ["p"], "k": trials}))
    return out


def peak_mb(args: list[str], tmp_path: Path) -> float:
    """The peak resident memory of `oc-repl ARGS` as its own process, in MB."""
    measure = (
        "import resource, subprocess, sys; "
        "proc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True); "
        "assert proc.returncode == 0, proc.stderr; "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", measure, sys.executable, "-m", "oc_repl", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=cli_env(tmp_path),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout) / 1024


def test_export_streams_its_memory_stays_flat_in_the_number_of_episodes(serve, tmp_path):
    transcript = tmp_path / "t.jsonl"
    big = {**answer("x" * LARGE), "usage": {"completion_tokens": 100}}  # well under the token limit
    server = serve({"replies": [big], "chunk_chars": 20_000})
    args = ["run", "--api-base", server.url, "--retries", "0", "--sandbox", f"local:{tmp_path / 'w'}", "--yes"]
    assert run_cli([*args, "--transcript", str(transcript), "write a lot"], tmp_path).returncode == 0
    few, many = bench_of(transcript, tmp_path / "few", 20), bench_of(transcript, tmp_path / "many", 400)
    target = tmp_path / "many.jsonl"
    small = peak_mb(["export", str(few), "-o", str(tmp_path / "few.jsonl")], tmp_path)
    large = peak_mb(["export", str(many), "-o", str(target)], tmp_path)
    assert sum(1 for _ in target.open()) == 400 and target.stat().st_size > 400 * LARGE
    # 380 more episodes of 0.4 MB each: held at once, they would take 150 MB and more
    assert large - small < 40, (small, large)
    stdout = peak_mb(["export", str(many)], tmp_path)  # to stdout: the same, through a file of its own
    assert stdout - small < 40, (small, stdout)


def test_a_bad_line_late_in_a_bench_leaves_the_output_as_it_was(serve, tmp_path):
    transcript = tmp_path / "t.jsonl"
    run_episode(serve, tmp_path, transcript, [answer("fine")])
    out = bench_of(transcript, tmp_path / "bench", 3)
    last = trial_dir(out, "big-task", "p", 3) / TRANSCRIPT
    last.unlink()
    events = [json.loads(line) for line in transcript.read_text().splitlines()]
    for event in events:
        if event["type"] == "response.received":
            event["raw"] = {"choices": 7}  # a reply of a shape no server sends
    last.write_text("".join(json.dumps(e) + "\n" for e in events))
    target = tmp_path / "episodes.jsonl"
    target.write_text("kept\n")
    proc = run_cli(["export", str(out), "-o", str(target)], tmp_path)
    assert proc.returncode == 2 and str(last) in proc.stderr, proc.stderr
    assert target.read_text() == "kept\n" and sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []
    proc = run_cli(["export", str(out)], tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""  # nothing of the first two episodes reached stdout either


def test_an_output_that_cannot_be_written_is_a_clear_error(serve, tmp_path):
    transcript = tmp_path / "t.jsonl"
    run_episode(serve, tmp_path, transcript, [answer("fine")])
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    proc = run_cli(["export", str(transcript), "-o", str(blocked / "episodes.jsonl")], tmp_path)
    assert proc.returncode == 2 and "cannot export: Not a directory" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_line_written_a_turn_at_a_time_is_the_whole_episodes_json(serve, tmp_path):
    import io

    from oc_repl.event_json import json_text
    from oc_repl.export import export

    transcript = tmp_path / "t.jsonl"
    for replies in ([exec_call("echo hi"), answer("Made it.")], [exec_call("echo \ud800 odd"), answer("ok")]):
        proc, _ = run_episode(serve, tmp_path, transcript, replies)
        assert proc.returncode == 0, proc.stderr
    made = list(export(transcript))
    assert len(made) == 2
    for episode in made:
        written = io.StringIO()
        episode.write(written)
        whole = {**episode.before, "turns": list(episode.turns()), **episode.after}
        assert written.getvalue() == json_text(whole) + "\n"
    assert "\\ud800" in json_text({**made[1].before, "turns": list(made[1].turns())})  # the escaped line
