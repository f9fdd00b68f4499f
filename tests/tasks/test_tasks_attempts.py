"""`oc-repl run --attempts N` on a real dockerd: each attempt in a fresh container, stop at the first verified one,
the outcome names it, and no attempt's container is left behind."""

from __future__ import annotations

from typing import Any

from tests.bench_scripts import TASKS, solution
from tests.cli.test_cli import answer
from tests.conftest import run_cli
from tests.docker_support import DOCKER, IMAGE, completed_commands, events_of, exec_call
from tests.tasks.test_docker_tasks import gone

pytestmark = DOCKER


def hostnames(events: list[Any]) -> list[str]:
    """A created container's hostname is its short id: each attempt starts with `hostname`."""
    return [c.aggregated_output.strip() for c in completed_commands(events) if c.command == "hostname"]


def test_attempts_stop_at_the_first_verified_one_and_name_it(serve, tmp_path, docker_client):
    wrong = [exec_call("hostname"), exec_call("echo nearly > /app/greeting.txt"), answer("Done.")]
    right = [exec_call("hostname"), exec_call(solution(TASKS / "write-greeting")), answer("Done.")]
    server = serve({"replies": [*wrong, *right, *right]})
    transcript = tmp_path / "t.jsonl"
    args = ["run", "--api-base", server.url, "--retries", "0", "--json", "--attempts", "3"]
    proc = run_cli(
        [*args, "--transcript", str(transcript), "--task", str(TASKS / "write-greeting")], tmp_path, timeout=180
    )
    assert proc.returncode == 0, proc.stderr
    events = events_of(proc.stdout)
    starts = [e for e in events if e.type == "thread.started"]
    ends = [e for e in events if e.type == "thread.completed"]
    assert [e.attempt for e in starts] == [1, 2] and [e.status for e in ends] == ["verify_failed", "verified"]
    assert (ends[-1].attempt, ends[-1].attempts, ends[-1].exit_code) == (2, 3, 0)
    assert len(server.chat_requests()) == 6  # the third attempt never ran
    first, second = hostnames(events)
    assert first != second  # a fresh container for the second attempt
    assert gone(docker_client, first) and gone(docker_client, second)
    assert transcript.read_text().count('"thread.completed"') == 2  # one transcript holds both attempts


def test_attempts_in_docker_image_sandboxes_start_afresh_and_all_may_fail(serve, tmp_path, docker_client):
    attempt = [exec_call("hostname"), exec_call("ls /workspace; touch /workspace/left-behind"), answer("Done.")]
    server = serve({"replies": attempt * 2})
    args = ["run", "--api-base", server.url, "--retries", "0", "--json", "--attempts", "2"]
    args += ["--sandbox", f"docker-image:{IMAGE}", "--verify", "test -f /workspace/wanted", "make it"]
    proc = run_cli(args, tmp_path, timeout=180)
    assert proc.returncode == 1, proc.stderr
    events = events_of(proc.stdout)
    listings = [c.aggregated_output for c in completed_commands(events) if c.command.startswith("ls ")]
    assert len(listings) == 2 and not any("left-behind" in text for text in listings)  # each starts afresh
    ends = [e for e in events if e.type == "thread.completed"]
    assert [(e.attempt, e.status) for e in ends] == [(1, "verify_failed"), (2, "verify_failed")]
    assert all(gone(docker_client, name) for name in hostnames(events))
