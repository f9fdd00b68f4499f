"""A bench against a server that queues and stalls, end to end on a real dockerd under `-j 4`: time the server took
is never charged to the model, the bench starts fewer trials and says why, and the records keep every attempt."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from oc_repl.bench.results import TRANSCRIPT
from tests.bench.test_bench import results
from tests.bench_scripts import CAMEL, TASKS, episode, scripted, solution
from tests.conftest import run_cli
from tests.docker_support import docker_session


@pytest.fixture(scope="module")
def docker_client() -> Iterator[Any]:
    yield from docker_session()


pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("docker_client")]

IDLE, AGENT = 3, 15  # seconds: the client's idle timeout, the agent's whole budget


def variant(marker: str, first_delay: float = 0, second_delay: float = 0) -> dict:
    replies = episode(CAMEL, f"echo {marker}\n{solution(TASKS / 'write-greeting')}")
    replies = [{**replies[0], "delay": first_delay}, {**replies[1], "delay": second_delay}]
    return {"replies": replies, "marker": marker}


def transcripts(out: Path) -> list[list[dict]]:
    found = []
    for path in (out / "trials").glob(f"*/*/*/{TRANSCRIPT}"):
        found.append([json.loads(line) for line in path.read_text().splitlines() if line.strip()])
    return found


@pytest.mark.timeout(600)
def test_a_queueing_stalling_server_costs_the_model_nothing_and_the_bench_starts_fewer_trials(serve, tmp_path):
    # Conversations take the variants in the order they start (a retried first request starts again, on the next):
    # the first waits in the server's queue past the idle timeout once; the second's next reply never comes in time.
    variants = [
        variant("queued-once", first_delay=2 * IDLE),
        variant("never-answered", second_delay=10 * AGENT),
        *[variant("answered") for _ in range(6)],
    ]
    server = serve(scripted({"match": "Task name:write-greeting\n", "tools": True, "variants": variants}))
    out = tmp_path / "out"
    args = ["bench", str(TASKS / "write-greeting"), "-k", "4", "-j", "4", "--api-base", server.url, "--out", str(out)]
    args += ["--idle-timeout", str(IDLE), "--timeout", str(AGENT), "--retries", "20"]
    proc = run_cli(args, tmp_path, timeout=400)
    assert proc.returncode == 0, proc.stderr
    said = " ".join(proc.stderr.split())
    assert "the server sent nothing for its idle timeout (a stall, then a retry): at most 2 trials at once (was 4)" in (
        said
    )
    modes = sorted(r["failure_mode"] for r in results(out).values())
    assert modes == ["resolved", "resolved", "resolved", "server_timeout"], modes  # never agent_timeout

    threads = transcripts(out)
    timed_out = [t for t in threads if t[-1].get("status") == "server_timeout"]
    assert len(timed_out) == 1
    assert any("waiting on the model server" in e.get("message", "") for e in timed_out[0] if e["type"] == "error")
    # the queued turn: its first attempt waited out the idle timeout, the second answered; the turn keeps both
    retried = [e for t in threads for e in t if e["type"] == "turn.completed" and len(e.get("attempts_s") or []) > 1]
    assert len(retried) == 1, retried
    turn = retried[0]
    assert turn["attempts_s"][0] >= IDLE and turn["request_s"] >= sum(turn["attempts_s"]) > turn["duration_s"]

    # the server's failure is the infrastructure's: the next run runs it again, and the model solves it
    again = run_cli(args, tmp_path, timeout=400)
    assert again.returncode == 0, again.stderr
    assert [r["failure_mode"] for r in results(out).values()] == ["resolved"] * 4
