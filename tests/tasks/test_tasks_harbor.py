"""Harbor task directories end to end on a real dockerd: the two example tasks pass and fail through `run --task`,
the reward decides, the agent never sees tests or solution, the task's limits and timeouts hold."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from tests.bench_scripts import TASKS, solution
from tests.cli.test_cli import answer
from tests.conftest import run_cli
from tests.docker_support import DOCKER, events_of, exec_call

pytestmark = DOCKER


def run_task(serve, tmp_path: Path, task: Path, replies: list[dict], *more: str, timeout: float = 120):
    server = serve({"replies": replies})
    args = ["run", "--api-base", server.url, "--retries", "0", "--json", "--task", str(task), *more]
    proc = run_cli(args, tmp_path, timeout=timeout)
    return proc, events_of(proc.stdout) if proc.stdout else []


def verify_of(events: list[Any]) -> Any:
    return next(e for e in events if e.type == "verify.completed")


def outputs(events: list[Any]) -> list[str]:
    return [
        e.item.aggregated_output for e in events if e.type == "item.completed" and e.item.type == "command_execution"
    ]


@pytest.mark.parametrize("task", ["count-words", "fix-json-config"])
def test_harbor_example_solved_is_resolved(serve, tmp_path, task):
    proc, events = run_task(serve, tmp_path, TASKS / task, [exec_call(solution(TASKS / task)), answer("Done.")])
    assert proc.returncode == 0, proc.stderr
    verify = verify_of(events)
    assert verify.passed and verify.reward == 1.0 and verify.command == f"/tests/test.sh ({task})"
    assert events[0].sandbox == f"docker-image:oc-repl-task-{task}:latest"
    assert events[-1].status == "verified"


@pytest.mark.parametrize("task", ["count-words", "fix-json-config"])
def test_harbor_example_not_solved_is_unresolved(serve, tmp_path, task):
    proc, events = run_task(serve, tmp_path, TASKS / task, [exec_call("ls /app"), answer("Looks fine to me.")])
    assert proc.returncode == 1, proc.stderr
    verify = verify_of(events)
    assert not verify.passed and verify.reward == 0.0
    assert events[-1].status == "verify_failed"


def test_a_reward_the_agent_leaves_behind_does_not_count(serve, tmp_path):
    cheat = "mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt && echo 1 > /logs/verifier/reward.json"
    proc, events = run_task(serve, tmp_path, TASKS / "fix-json-config", [exec_call(cheat), answer("Done.")])
    assert proc.returncode == 1, proc.stderr  # the verifier's /logs/verifier is its own: the task's own verdict stands
    verify = verify_of(events)
    assert verify.reward == 0.0 and verify.sealed and events[-1].status == "verify_failed"
    named = {f.path: f for f in verify.findings}
    assert set(named) == {"/logs/verifier/reward.txt", "/logs/verifier/reward.json"}
    assert all(f.kind == "verifier_file" and "never reached it" in f.detail for f in named.values())


def test_the_agent_sees_neither_tests_nor_solution(serve, tmp_path):
    look = "ls -d /tests /solution 2>&1; find / -name 'solve.sh' -o -name 'test_outputs.py' 2>/dev/null | head"
    proc, events = run_task(serve, tmp_path, TASKS / "count-words", [exec_call(look), answer("Nothing.")])
    assert proc.returncode == 1, proc.stderr
    (seen,) = outputs(events)
    assert "No such file" in seen and "solve.sh" not in seen and "test_outputs.py" not in seen


def test_the_tasks_cpu_and_memory_limits_hold_in_its_container(serve, tmp_path):
    probe = (
        "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes; "
        "cat /sys/fs/cgroup/cpu.max 2>/dev/null || cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us"
    )
    proc, events = run_task(serve, tmp_path, TASKS / "count-words", [exec_call(probe), answer("Seen.")])
    assert proc.returncode == 1, proc.stderr
    memory, cpu = outputs(events)[0].split("\n")[:2]
    assert memory == str(512 << 20)  # memory_mb = 512
    assert cpu.split()[0] == "100000"  # cpus = 1: a full period's quota


def harbor_copy(tmp_path: Path, toml: str, test_sh: str | None = None) -> Path:
    task = tmp_path / "harbor-copy"
    shutil.copytree(TASKS / "count-words", task)
    (task / "task.toml").write_text(toml)
    if test_sh is not None:
        (task / "tests" / "test.sh").write_text(test_sh)
    return task


def test_the_agent_is_stopped_at_the_tasks_agent_timeout(serve, tmp_path):
    task = harbor_copy(tmp_path, "[agent]\ntimeout_sec = 3\n[verifier]\ntimeout_sec = 60\n")
    started = time.monotonic()
    proc, events = run_task(serve, tmp_path, task, [exec_call("sleep 40", timeout=60), answer("late")])
    assert proc.returncode == 7, proc.stderr
    assert time.monotonic() - started < 30
    assert events[-1].status == "agent_timeout"
    assert verify_of(events).reward == 0.0  # the tests still ran: a timed-out agent may have solved it


def test_tests_are_killed_at_the_verifier_timeout_and_bench_calls_it_test_timeout(serve, tmp_path):
    hang = "#!/bin/bash\nsleep 45\necho 1 > /logs/verifier/reward.txt\n"
    task = harbor_copy(tmp_path, "[verifier]\ntimeout_sec = 2\n", hang)
    server = serve({"replies": [exec_call(solution(TASKS / "count-words")), answer("Done.")]})
    out = tmp_path / "out"
    started = time.monotonic()
    args = ["bench", str(task), "--api-base", server.url, "--retries", "0", "--out", str(out), "-j", "1"]
    proc = run_cli(args, tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - started < 60
    result = json.loads((out / "trials" / task.name / "camel-terminal-toolkit" / "1" / "result.json").read_text())
    assert result["failure_mode"] == "test_timeout" and result["outcome"] == "verify_failed"
    assert result["reward"] is None and not result["resolved"]
