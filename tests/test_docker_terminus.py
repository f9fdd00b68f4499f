"""terminus-json / terminus-xml in containers: tmux inside the sandbox, the example tasks, --verify and --task."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from oc_repl.events import parse_event
from tests.conftest import ROOT, run_cli
from tests.test_docker import IMAGE, docker_session
from tests.test_terminus_cli import js, xml

TASKS = ROOT / "examples" / "tasks"
pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def docker_client() -> Iterator[Any]:
    yield from docker_session()


def solution_keys(task: str) -> str:
    """The task's solution.sh typed into the terminal, line by line (heredocs included)."""
    lines = (TASKS / task / "solution.sh").read_text().splitlines()
    return "".join(line + "\n" for line in lines if not line.startswith("#!"))


def episode(protocol: str, keys: str) -> list[dict]:
    reply = js if protocol == "terminus-json" else xml
    return [reply([(keys, 2.0)]), reply([], complete=True), reply([], complete=True)]


def run(serve, tmp_path, replies: list[dict], *args: str) -> tuple[Any, list[Any]]:
    server = serve({"replies": replies})
    proc = run_cli(["run", "--api-base", server.url, "--retries", "0", "--json", *args], tmp_path, timeout=120)
    return proc, [parse_event(line) for line in proc.stdout.splitlines()], server


@pytest.mark.parametrize("protocol", ["terminus-json", "terminus-xml"])
@pytest.mark.parametrize("task", ["fix-permissions", "repair-module", "write-greeting"])
def test_example_tasks_are_solved_by_replayed_keystrokes(serve, tmp_path, docker_client, protocol, task):
    proc, events, server = run(
        serve, tmp_path, episode(protocol, solution_keys(task)), "--protocol", protocol, "--task", str(TASKS / task)
    )
    assert proc.returncode == 0, proc.stderr
    verify = next(e for e in events if e.type == "verify.completed")
    assert verify.tests_total > 0 and verify.tests_passed == verify.tests_total
    first = server.chat_requests()[0]["body"]["messages"][0]["content"]
    assert "root@" in first and ":/app#" in first  # the shell starts in the image's WORKDIR, as upstream


@pytest.mark.parametrize("protocol", ["terminus-json", "terminus-xml"])
def test_the_same_task_verified_by_verify_and_by_task(serve, tmp_path, docker_client, protocol):
    keys = solution_keys("write-greeting")
    proc, events, _ = run(
        serve, tmp_path, episode(protocol, keys), "--protocol", protocol, "--task", str(TASKS / "write-greeting")
    )
    assert proc.returncode == 0, proc.stderr
    proc, events, _ = run(
        serve,
        tmp_path,
        episode(protocol, keys),
        "--protocol",
        protocol,
        "--sandbox",
        "docker-image:oc-repl-task-write-greeting:latest",
        "--verify",
        "grep -qx 'Hello from oc-repl' /app/greeting.txt",
        "write the greeting",
    )
    assert proc.returncode == 0, proc.stderr
    assert events[-1].status == "verified"


def test_interrupt_parse_error_and_double_completion_in_a_container(serve, tmp_path, docker_client):
    replies = [
        js([("sleep 100\n", 0.5)]),
        js([("C-c", 0.5)]),
        {"text": "no json here"},
        js([("echo ok > /tmp/done.txt\n", 0.5)], complete=True),
        js([], complete=True),
    ]
    proc, events, server = run(
        serve,
        tmp_path,
        replies,
        "--protocol",
        "terminus-json",
        "--sandbox",
        f"docker-image:{IMAGE}",
        "--verify",
        "test -f /tmp/done.txt",
        "go",
    )
    assert proc.returncode == 0, proc.stderr
    users = [m["content"] for m in server.chat_requests()[-1]["body"]["messages"] if m["role"] == "user"]
    assert "^C" in users[2]
    assert users[3].startswith("Previous response had parsing errors:\nERROR: No valid JSON found in response")
    assert "task_complete" in users[4]  # the confirmation question after the first claim
    assert json.loads(proc.stdout.splitlines()[-1])["turns"] == 5
