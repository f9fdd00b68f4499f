"""Whole CLI runs on a real dockerd: `docker-image:` runs leave no container behind (normal end, server failure,
SIGINT), --keep, runs that cannot go on (no daemon, a vanished container, a hanging command), and terminal-bench
task dirs end to end.

A created container's hostname is its short id, so each scripted episode starts with `hostname`: that names the
container of this run exactly, whatever other runs on the same daemon create or leave at the same time.
"""

from __future__ import annotations

import shutil
import signal
import time
import uuid
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import pytest

from oc_repl.event_read import parse_event
from tests.conftest import ROOT, cli_env, run_cli
from tests.docker_support import (
    DOCKER,
    IMAGE,
    answer,
    cli_args,
    completed_commands,
    events_of,
    exec_call,
    started_cli,
    wait_for_command,
    wait_gone,
    write_call,
)

TASKS = ROOT / "examples" / "tasks"


pytestmark = DOCKER


def labelled(client: Any) -> set[str]:
    # sparse: the ids as listed, without inspecting each (one removed by a run beside this test would fail that)
    return {c.id for c in client.containers.list(all=True, filters={"label": "oc-repl=1"}, sparse=True)}


@pytest.fixture
def run_containers(docker_client: Any) -> Iterator[list[str]]:
    """Short ids of the containers the runs reported; whatever a failing test left of them is removed at the end."""
    seen: list[str] = []
    yield seen
    for short in seen:
        with suppress(Exception):
            docker_client.containers.get(short).remove(force=True)


def gone(client: Any, short_id: str) -> bool:
    import docker

    try:
        client.containers.get(short_id)
    except docker.errors.NotFound:
        return True
    return False


def hostname_of(events: list[Any]) -> str:
    first = completed_commands(events)[0]
    assert first.command == "hostname", first
    return first.aggregated_output.strip()


# --- image mode: create, then remove; interrupts ----------------------------------------------------------------------


def test_image_mode_removes_its_container_after_a_normal_run(serve, tmp_path, docker_client, run_containers):
    before = labelled(docker_client)
    server = serve({"replies": [exec_call("hostname"), answer("done")]})
    proc = run_cli(cli_args(server, f"docker-image:{IMAGE}", "--json", "look"), tmp_path)
    assert proc.returncode == 0, proc.stderr
    events = events_of(proc.stdout)
    run_containers.append(short := hostname_of(events))
    assert events[0].sandbox == f"docker-image:{IMAGE}" and events[-1].kept_container == ""
    assert gone(docker_client, short)
    assert not {i for i in labelled(docker_client) - before if i.startswith(short)}


def test_image_mode_removes_its_container_when_the_server_fails(serve, tmp_path, docker_client, run_containers):
    server = serve({"replies": [exec_call("hostname"), {"http_error": 500}]})
    proc = run_cli(cli_args(server, f"docker-image:{IMAGE}", "--json", "look"), tmp_path)
    assert proc.returncode == 5, proc.stderr
    events = events_of(proc.stdout)
    run_containers.append(short := hostname_of(events))
    assert events[-1].status == "server_error"
    assert gone(docker_client, short)


def test_image_mode_removes_its_container_on_sigint(serve, tmp_path, docker_client, run_containers):
    server = serve({"replies": [exec_call("hostname"), exec_call("sleep 30", timeout=60), answer("done")]})
    transcript = tmp_path / "t.jsonl"
    args = cli_args(server, f"docker-image:{IMAGE}", "--json", "--transcript", str(transcript), "x")
    proc = started_cli(args, tmp_path)
    try:
        wait_for_command(transcript, "sleep 30", proc)
        written = transcript.read_text()
        short = hostname_of(events_of(written[: written.rfind("\n") + 1]))  # whole lines only
        run_containers.append(short)
        assert docker_client.containers.get(short).labels.get("oc-repl") == "1"
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130, stderr
    assert time.monotonic() - started < 10
    assert events_of(stdout)[-1].status == "interrupted"
    assert gone(docker_client, short)


def test_sigint_in_attach_mode_stops_the_command_not_the_container(serve, tmp_path, own_container):
    container = own_container()
    server = serve({"replies": [exec_call("sleep 31", timeout=60), answer("done")]})
    transcript = tmp_path / "t.jsonl"
    proc = started_cli(cli_args(server, f"docker:{container.name}", "--transcript", str(transcript), "x"), tmp_path)
    try:
        wait_for_command(transcript, "sleep 31", proc)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert wait_gone(container, "sleep 31") == []
    container.reload()
    assert container.status == "running"


def test_keep_leaves_the_container_running_and_names_it(serve, tmp_path, docker_client, run_containers):
    server = serve({"replies": [exec_call("hostname"), exec_call("echo kept > /workspace/k.txt"), answer("done")]})
    proc = run_cli(cli_args(server, f"docker-image:{IMAGE}", "--json", "--keep", "look"), tmp_path)
    assert proc.returncode == 0, proc.stderr
    events = events_of(proc.stdout)
    run_containers.append(short := hostname_of(events))
    kept = events[-1].kept_container
    container = docker_client.containers.get(kept)
    assert container.id.startswith(short) and container.status == "running"
    assert container.exec_run(["cat", "/workspace/k.txt"]).output == b"kept\n"


# --- runs that cannot go on: no daemon, a vanished container, a hanging command ---------------------------------------


@pytest.mark.parametrize("sandbox", ["docker:anything", f"docker-image:{IMAGE}", "task"])
def test_unreachable_daemon_is_exit_6_naming_docker_host(serve, tmp_path, sandbox):
    server = serve({"replies": [answer("never asked")]})
    env = {**cli_env(tmp_path), "DOCKER_HOST": "unix:///nonexistent.sock"}
    where = ["--task", str(ROOT / "examples/tasks/write-greeting")] if sandbox == "task" else ["--sandbox", sandbox]
    args = ["run", "--api-base", server.url, "--retries", "0", "--json", *where]
    proc = run_cli([*args] + ([] if sandbox == "task" else ["hello"]), tmp_path, env=env, timeout=30)
    assert proc.returncode == 6, proc.stderr
    error = next(e for e in events_of(proc.stdout) if e.type == "error")
    assert "DOCKER_HOST" in error.message and "unix:///nonexistent.sock" in error.message
    assert server.chat_requests() == []


def test_container_removed_mid_run_is_exit_6_with_a_readable_transcript(serve, tmp_path, own_container):
    container = own_container()
    server = serve({"replies": [exec_call("sleep 30", timeout=60), answer("done")]})
    transcript = tmp_path / "t.jsonl"
    args = cli_args(server, f"docker:{container.name}", "--json", "--transcript", str(transcript), "wait")
    proc = started_cli(args, tmp_path)
    try:
        wait_for_command(transcript, "sleep 30", proc)
        time.sleep(0.3)  # let the exec really start in the container
        started = time.monotonic()
        container.remove(force=True)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 6, stderr
    assert time.monotonic() - started < 15
    events = [parse_event(line) for line in transcript.read_text().splitlines()]
    assert events_of(stdout)[-1] == events[-1]
    errors = [e for e in events if e.type == "error"]
    assert errors and container.name in errors[-1].message and errors[-1].kind == "sandbox_lost"
    assert events[-1].type == "thread.completed" and events[-1].status == "sandbox_error"
    assert len(server.chat_requests()) == 1  # the loss ended the run; the model was not asked again


def test_hanging_commands_end_at_their_timeout_and_the_run_goes_on(serve, tmp_path, own_container):
    container = own_container()
    server = serve({"replies": [exec_call("sleep 1000", timeout=2), exec_call("pwd"), answer("Gave up waiting.")]})
    args = cli_args(server, f"docker:{container.name}", "--json", "--workdir", "/srv/job")
    started = time.monotonic()
    proc = run_cli([*args, "--verify", "sleep 1001", "--verify-timeout", "2", "wait"], tmp_path, timeout=60)
    elapsed = time.monotonic() - started
    assert proc.returncode == 1, proc.stderr  # the verifier was killed at its timeout: not verified
    assert elapsed < 20
    events = events_of(proc.stdout)
    hung, after = completed_commands(events)
    # camel on rich 14 (the default) drops the final line break
    assert (
        hung.status == "timed_out" and after.aggregated_output == "/srv/job"
    )  # rich 14 (the default) drops the final break
    assert len(server.chat_requests()) == 3  # the turns after the hang happened
    assert "did not finish within 2 seconds" in server.chat_requests()[1]["body"]["messages"][-1]["content"]
    verify = next(e for e in events if e.type == "verify.completed")
    assert verify.timed_out and not verify.passed
    # the hung session ended with the episode and the verifier's command at its timeout
    assert wait_gone(container, "sleep 1000") == [] and wait_gone(container, "sleep 1001") == []
    container.reload()
    assert container.status == "running"


# --- terminal-bench task directories --------------------------------------------------------------------------------


def solution_replay(task: str) -> list[dict]:
    """The task's own solution.sh, run as the model would: one blocking shell_exec of its commands."""
    script = (TASKS / task / "solution.sh").read_text()
    return [exec_call(script, timeout=60), answer("Solved.")]


# A plausible wrong attempt per task (doing nothing, a partial fix, a missing newline) and the tests it must fail.
WRONG: dict[str, tuple[list[dict], set[str]]] = {
    "fix-permissions": ([], {"test_script_is_executable", "test_script_prints_the_report"}),
    "repair-module": ([exec_call("sed -i 's|// len|/ len|' /app/stats.py")], {"test_median_odd", "test_median_even"}),
    "write-greeting": (
        [write_call("Hello from oc-repl", "/app/greeting.txt")],  # the final newline is missing
        {"test_greeting_content"},
    ),
}


def run_task(serve: Any, tmp_path: Path, task: Path, replies: list[dict], *more: str) -> tuple[Any, list[Any]]:
    server = serve({"replies": replies})
    args = ["run", "--api-base", server.url, "--retries", "0", "--json", "--task", str(task), *more]
    proc = run_cli(args, tmp_path, timeout=90)
    return proc, events_of(proc.stdout) if proc.stdout else []


@pytest.mark.parametrize("task", sorted(WRONG))
def test_task_with_its_solution_is_verified(serve, tmp_path, task):
    proc, events = run_task(serve, tmp_path, TASKS / task, solution_replay(task))
    assert proc.returncode == 0, proc.stderr
    verify = next(e for e in events if e.type == "verify.completed")
    assert verify.passed and verify.tests_total > 0 and verify.tests_passed == verify.tests_total, verify
    assert events[0].sandbox == f"docker-image:oc-repl-task-{task}:latest"
    assert events[-1].status == "verified"


@pytest.mark.parametrize("task", sorted(WRONG))
def test_task_with_a_wrong_solution_fails_naming_the_failed_tests(serve, tmp_path, task):
    steps, must_fail = WRONG[task]
    proc, events = run_task(serve, tmp_path, TASKS / task, [*steps, answer("Done, I think.")])
    assert proc.returncode == 1, proc.stderr
    verify = next(e for e in events if e.type == "verify.completed")
    assert not verify.passed and verify.tests_total > 0 and verify.tests_passed < verify.tests_total
    assert {name.rsplit("::", 1)[-1] for name in verify.failed_tests} == must_fail
    assert verify.tests_passed == verify.tests_total - len(must_fail)
    assert events[-1].status == "verify_failed"


def task_copy(tmp_path: Path, dockerfile: str, name: str = "") -> Path:
    """write-greeting with another Dockerfile, under a fresh name unless one is given (its image tag follows it)."""
    task = tmp_path / (name or f"tb-copy-{uuid.uuid4().hex[:8]}")
    shutil.copytree(TASKS / "write-greeting", task)
    (task / "Dockerfile").write_text(dockerfile)
    return task


def test_task_from_a_missing_base_image_fails_fast_and_clearly(serve, tmp_path, docker_client):
    task = task_copy(tmp_path, "FROM oc-repl-no-such-base:never\nWORKDIR /app\n")
    server = serve({"replies": [answer("never asked")]})
    started = time.monotonic()
    proc = run_cli(["run", "--api-base", server.url, "--retries", "0", "--task", str(task)], tmp_path, timeout=30)
    assert proc.returncode == 6, proc.stderr
    assert time.monotonic() - started < 15
    message = " ".join(proc.stderr.split())  # the human renderer wraps long lines
    assert "oc-repl-no-such-base:never" in message and "not available locally" in message
    # what works is making the base image; --image would skip the task's Dockerfile and its set-up
    assert "docker build -t oc-repl-no-such-base:never" in message and "--image" not in message
    assert server.chat_requests() == []


@pytest.mark.parametrize(("base", "code"), [(IMAGE, 0), ("oc-repl-no-such-base:never", 6)])
def test_task_whose_base_image_is_a_build_arg(serve, tmp_path, base, code):
    # the build passes no build arguments: the ARG's default is the base image, checked before the build as any other
    task = task_copy(tmp_path, f"ARG BASE={base}\nFROM ${{BASE}}\nWORKDIR /app\n", name="tb-arg-base")
    started = time.monotonic()
    proc, events = run_task(serve, tmp_path, task, solution_replay("write-greeting"))
    assert proc.returncode == code, proc.stderr
    assert time.monotonic() - started < 30 and "Traceback" not in proc.stderr
    if code == 0:
        assert events[-1].status == "verified"
    else:
        error = next(e for e in events if e.type == "error")
        assert "builds FROM oc-repl-no-such-base:never, which is not available locally" in error.message


def test_image_flag_skips_the_build(serve, tmp_path, docker_client):
    import docker

    task = task_copy(tmp_path, "FROM oc-repl-no-such-base:never\n")  # building it would fail
    write = exec_call("mkdir -p /app && echo 'Hello from oc-repl' > /app/greeting.txt")
    proc, events = run_task(serve, tmp_path, task, [write, answer("Written.")], "--image", IMAGE)
    assert proc.returncode == 0, proc.stderr
    assert events[0].sandbox == f"docker-image:{IMAGE}"
    verify = next(e for e in events if e.type == "verify.completed")
    assert verify.tests_passed == verify.tests_total == 2
    with pytest.raises(docker.errors.ImageNotFound):
        docker_client.images.get(f"oc-repl-task-{task.name}:latest")
