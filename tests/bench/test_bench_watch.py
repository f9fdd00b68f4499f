"""`bench watch` follows a bench from its directory alone: the trials finished of those planned, each arm's score
with its interval, infrastructure failures apart, the server's health as the running trials' transcripts tell it,
and the running trials with their turn; it ends once every planned trial is finished. And the server's health
decides how many trials start at once: fewer when replies slow down or it answers 429, more once it is well."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from oc_repl.bench.health import BASELINE, COOL_DOWN, Health
from oc_repl.bench.results import TRANSCRIPT, TrialResult, trial_dir, write_result
from tests.conftest import cli_env, run_cli


def record(out: Path, task: str, arm: str, outcome: str, mode: str, **more: object) -> None:
    directory = trial_dir(out, task, arm, 1)
    directory.mkdir(parents=True, exist_ok=True)
    write_result(directory, TrialResult(task, arm, 1, outcome, mode, mode == "resolved", 0, **more))  # type: ignore[arg-type]


def running(out: Path, task: str, arm: str) -> None:
    """A trial at its second turn, whose server has just answered 503 (the run retries)."""
    directory = trial_dir(out, task, arm, 1)
    directory.mkdir(parents=True, exist_ok=True)
    events = [
        {"type": "thread.started", "thread_id": "t"},
        {"type": "turn.started", "turn": 1},
        {"type": "turn.completed", "turn": 1, "usage": {"input_tokens": 50, "output_tokens": 120}},
        {"type": "turn.started", "turn": 2},
        {"type": "error", "kind": "server", "message": "HTTP 503: overloaded (attempt 1 of 4)", "retrying": True},
    ]
    (directory / TRANSCRIPT).write_text("".join(json.dumps(e) + "\n" for e in events))


def bench_of_four(out: Path) -> None:
    """Tasks a and b, arms p and q, one trial each: p's two finished (one of them a server failure), q's a running."""
    plan = {"tasks": [{"name": "a"}, {"name": "b"}], "protocols": ["p", "q"], "k": 1, "run_options": {}}
    out.mkdir(parents=True)
    (out / "bench.json").write_text(json.dumps(plan))
    record(out, "a", "p", "verified", "resolved")
    record(out, "b", "p", "server_error", "server_error", error="HTTP 503: overloaded")
    running(out, "a", "q")


def test_watch_once_shows_the_denominator_scores_infrastructure_health_and_running_trials(tmp_path):
    out = tmp_path / "bench"
    bench_of_four(out)
    proc = run_cli(["bench", "watch", str(out), "--once"], tmp_path, env={**cli_env(tmp_path), "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stderr.split())
    assert "trials 2/4 · running 1" in text and "1 infrastructure failures so far" in text
    assert "p: 1/1 resolved, pass@1 100.0% [" in text and "· 1 infra" in text  # the server failure left out
    assert "q: 0/0 resolved, pass@1 –" in text
    assert "server: 1 requests in flight" in text and "last error: HTTP 503: overloaded (attempt 1 of 4)" in text
    assert "a · q · #1 turn 2" in text


def test_watch_follows_until_every_planned_trial_is_finished(tmp_path):
    out = tmp_path / "bench"
    bench_of_four(out)
    watch = subprocess.Popen(
        [sys.executable, "-m", "oc_repl", "bench", "watch", str(out), "--interval", "0.1"],
        env=cli_env(tmp_path),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    try:
        assert "2 of 4 trials already finished in this directory: kept" in watch.stderr.readline()
        record(out, "a", "q", "verified", "resolved")
        assert watch.poll() is None  # one planned trial is still missing
        record(out, "b", "q", "verify_failed", "unresolved", tests_passed=1, tests_total=2)
        _, stderr = watch.communicate(timeout=60)
    finally:
        watch.kill()
        watch.wait()
    assert watch.returncode == 0, stderr
    text = " ".join(stderr.split())
    assert "[3/4] a · q · #1: resolved" in text and "[4/4] b · q · #1: unresolved 1/2 tests" in text


def test_fewer_trials_start_when_replies_slow_down_and_more_once_the_server_is_well_again():
    health = Health(jobs=8)
    for n in range(BASELINE):  # the usual wait: a second
        health.event(n, {"type": "turn.completed", "ttft_s": 1.0}, now=float(n))
    health.event("slow", {"type": "turn.completed", "ttft_s": 30.0}, now=10.0)
    assert health.allowed(now=10.0) == 4
    assert health.notes == ["a reply took 30 s to start (usually 1.0 s): at most 4 trials at once (was 8)"]
    health.event("slow", {"type": "turn.completed", "ttft_s": 30.0}, now=11.0)
    assert health.allowed(now=11.0) == 4  # one change per cool-down
    health.event("x", {"type": "error", "kind": "server", "message": "HTTP 429: slow down"}, now=10.0 + COOL_DOWN + 1)
    assert health.allowed(now=10.0 + COOL_DOWN + 1) == 2
    assert "last error: HTTP 429: slow down" in health.line(now=10.0 + COOL_DOWN + 1)
    well = 10.0 + COOL_DOWN + 1 + 2 * COOL_DOWN + 1
    assert health.allowed(now=well) == 3 and health.notes[-1].startswith("the server is answering well again")
    assert health.allowed(now=well + 1) == 3 and health.allowed(now=well + COOL_DOWN + 1) == 4


def test_fewer_trials_start_when_the_server_stalls_or_a_reply_came_only_after_retries():
    stalled = Health(jobs=4)
    message = "The model server at http://127.0.0.1:1/v1 sent nothing useful for 60s. Retrying in 1s. (attempt 2 of 3)"
    stalled.event("x", {"type": "error", "kind": "server", "message": message, "retrying": True}, now=1.0)
    assert stalled.allowed(now=1.0) == 2 and "sent nothing for its idle timeout" in stalled.notes[-1]
    retried = Health(jobs=4)
    for n in range(BASELINE):
        retried.event(n, {"type": "turn.completed", "ttft_s": 1.0, "duration_s": 2.0, "request_s": 2.0}, now=float(n))
    # the answering attempt started at once, after 120 s of attempts that stalled: the request waited 121 s
    late = {"type": "turn.completed", "ttft_s": 1.0, "duration_s": 2.0, "request_s": 122.0, "attempts_s": [60, 60, 2]}
    retried.event("late", late, now=10.0)
    assert retried.allowed(now=10.0) == 2 and retried.notes[-1].startswith("a reply took 121 s to start")


def test_fewer_trials_start_when_a_trials_time_went_to_the_server():
    health = Health(jobs=4)
    health.event("x", {"type": "thread.completed", "status": "agent_timeout"}, now=1.0)
    assert health.allowed(now=1.0) == 4  # the model's own time running out says nothing of the server
    health.event("y", {"type": "thread.completed", "status": "server_timeout"}, now=2.0)
    assert health.allowed(now=2.0) == 2 and health.notes == [
        "a trial's time went to waiting on the server: at most 2 trials at once (was 4)"
    ]
