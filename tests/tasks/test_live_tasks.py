"""Honest solutions that leave a process running pass: the live tasks (tests/fixtures/live_tasks: a server, a growing
log, a daemon, a process found by name), solved by a scripted model, are `verified` by oc-repl in `run` with every
protocol, in `bench`, with `--attempts`, as terminal-bench 0.2.18 itself resolves them with its oracle (the
differential test runs both on the same tasks and images); and on `local:`, a `--verify` check of a server the model
started passes.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Any

import pytest

from tests.bench_scripts import CAMEL, TERMINUS, route, scripted, solution
from tests.cli.test_cli import base_args
from tests.conftest import run_cli
from tests.docker_support import DOCKER, answer, events_of, exec_call
from tests.protocols.terminus.test_terminus_cli import js, xml
from tests.reference_harnesses import LIVE_TASKS, terminal_bench_verdicts
from tests.tasks.test_docker_tasks import run_task

NAMES = ["daemon", "growing-log", "http-server", "process-by-name"]
FORMATS = {"terminal-bench": LIVE_TASKS / "terminal-bench", "harbor": LIVE_TASKS / "harbor"}
SLOW = os.environ.get("OC_REPL_SLOW_TESTS") == "1"


def docker(test: Any) -> Any:
    """The docker tests' marks (the local one below needs none)."""
    for mark in reversed(DOCKER):
        test = mark(test)
    return test


def as_script(task: Path) -> str:
    """The solution as keystrokes for a terminal: written to a file, then run (typed line by line it would exit the
    terminal's shell)."""
    return f"cat > /tmp/solve.sh <<'SOLVE'\n{solution(task)}\nSOLVE\nbash /tmp/solve.sh\n"


def replies(protocol: str, task: Path) -> list[dict]:
    if protocol == CAMEL:
        return [exec_call(solution(task), timeout=120), answer("Done.")]
    turn = js if protocol == TERMINUS else xml
    return [turn([(as_script(task), 15.0)]), turn([], complete=True), turn([], complete=True)]


def bench_verdicts(out: Path) -> dict[str, bool]:
    """Each task's verdict in a bench of one trial per task: resolved or not."""
    found = [json.loads(p.read_text()) for p in (out / "trials").glob("*/*/*/result.json")]
    return {r["task"]: r["failure_mode"] == "resolved" for r in found}


def verdict(events: list[Any]) -> Any:
    return next(e for e in events if e.type == "verify.completed")


CASES = [(CAMEL, fmt, name) for fmt in FORMATS for name in NAMES]
CASES += [(TERMINUS, "terminal-bench", name) for name in NAMES] + [("terminus-xml", "harbor", n) for n in NAMES]


@docker
@pytest.mark.parametrize(("protocol", "fmt", "name"), CASES)
def test_an_honest_solution_leaving_a_process_running_is_verified(serve, tmp_path, protocol, fmt, name):
    task = FORMATS[fmt] / name
    proc, events = run_task(serve, tmp_path, task, replies(protocol, task), "--protocol", protocol)
    assert proc.returncode == 0, proc.stderr
    assert events[-1].status == "verified"
    verify = verdict(events)
    assert verify.passed and verify.sealed and not [f for f in verify.findings if f.affects_tests], verify.findings
    assert any(f.kind == "process" and "left running beside the verifier" in f.detail for f in verify.findings)


@docker
def test_a_server_left_in_the_foreground_of_the_terminal_is_verified(serve, tmp_path):
    """terminus: the model starts the server in its own terminal and never gets the prompt back; the terminal stays."""
    task = FORMATS["terminal-bench"] / "http-server"
    keys = "mkdir -p /app/site && printf ok > /app/site/index.html\n"
    keys += "python3 -m http.server 8123 --bind 127.0.0.1 --directory /app/site\n"
    turns = [js([(keys, 3.0)]), js([], complete=True), js([], complete=True)]
    proc, events = run_task(serve, tmp_path, task, turns, "--protocol", TERMINUS)
    assert proc.returncode == 0, proc.stderr
    assert verdict(events).passed


@docker
@pytest.mark.parametrize("name", NAMES)
def test_a_live_task_left_unsolved_fails(serve, tmp_path, name):
    proc, events = run_task(serve, tmp_path, FORMATS["terminal-bench"] / name, [answer("Done.")])
    assert proc.returncode == 1, proc.stderr
    assert events[-1].status == "verify_failed"


@docker
def test_a_second_attempt_that_solves_a_live_task_is_verified(serve, tmp_path):
    task = FORMATS["harbor"] / "http-server"
    server = serve({"replies": [answer("Nothing to do."), *replies(CAMEL, task)]})
    args = ["run", "--api-base", server.url, "--retries", "0", "--json", "--task", str(task), "--attempts", "2"]
    proc = run_cli(args, tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    events = events_of(proc.stdout)
    assert [e.status for e in events if e.type == "thread.completed"] == ["verify_failed", "verified"]


@docker
def test_a_bench_of_the_live_tasks_resolves_each_of_them(serve, tmp_path):
    tasks = FORMATS["terminal-bench"]
    server = serve(scripted(*(route(tasks / name, CAMEL, "good") for name in NAMES)))
    out = tmp_path / "bench"
    args = ["bench", str(tasks), "--api-base", server.url, "--retries", "0", "-k", "1", "-j", "2", "--out", str(out)]
    proc = run_cli(args, tmp_path, timeout=900)
    assert proc.returncode == 0, proc.stderr
    assert bench_verdicts(out) == dict.fromkeys(NAMES, True)


def test_a_local_verify_check_reaches_the_server_the_model_left_running(serve, tmp_path):
    start = "setsid nohup python3 -m http.server 8765 --bind 127.0.0.1 </dev/null >/dev/null 2>&1 &"
    wait = "for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/8765) 2>/dev/null && break; sleep 0.1; done"
    check = "python3 -c " + shlex.quote("import urllib.request; urllib.request.urlopen('http://127.0.0.1:8765/')")
    server = serve({"replies": [exec_call(f"{start}\n{wait}", timeout=60), answer("The server runs.")]})
    args = [*base_args(server, tmp_path / "w", "--json", "--verify", check), "start a server on 127.0.0.1:8765"]
    proc = run_cli(args, tmp_path, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert verdict(events_of(proc.stdout)).passed


@pytest.mark.reference
@pytest.mark.skipif(not SLOW, reason="installs and runs terminal-bench 0.2.18; set OC_REPL_SLOW_TESTS=1")
@docker
@pytest.mark.timeout(2700)
@pytest.mark.parametrize(("agent", "plays"), [("oracle", "good"), ("nop", "bad")], ids=["solved", "unsolved"])
def test_oc_repl_gives_terminal_benchs_verdicts_on_the_live_tasks(serve, tmp_path, agent, plays):
    """The same tasks and images through terminal-bench 0.2.18 (its oracle or nop agent) and through oc-repl's bench
    (a scripted model running the same solution, or nothing): the same verdict for every task."""
    tasks = FORMATS["terminal-bench"]
    reference = terminal_bench_verdicts(tasks, agent, concurrency=4, out=tmp_path / "tb")
    server = serve(scripted(*(route(tasks / name, CAMEL, plays) for name in NAMES)))
    out = tmp_path / "bench"
    args = ["bench", str(tasks), "--api-base", server.url, "--retries", "0", "-k", "1", "-j", "2", "--out", str(out)]
    run_cli(args, tmp_path, timeout=900)
    assert bench_verdicts(out) == reference == dict.fromkeys(NAMES, plays == "good")
