"""terminus-json / terminus-xml in containers: tmux inside the sandbox, the example tasks, --verify and --task; the
pty terminal where a container has no tmux; and the terminals' promises (test_pty_terminal.py) held in a container."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from oc_repl.event_read import parse_event
from oc_repl.protocols.terminus.protocol import TerminusJson
from oc_repl.protocols.terminus.pty_terminal import PtyTerminal
from tests.conftest import ROOT, cli_env, run_cli
from tests.docker_support import IMAGE
from tests.protocols.terminus.test_pty_terminal import check_dashes_and_long_keys, check_typed_ahead, opened, play
from tests.protocols.terminus.test_terminus_cli import js, xml

TASKS = ROOT / "examples" / "tasks"
pytestmark = pytest.mark.docker


@pytest.fixture
def container(docker_client) -> Iterator[Any]:
    from oc_repl.sandbox.docker import DockerImageSandbox

    box = DockerImageSandbox.from_spec(IMAGE)
    yield box
    box.close()


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


# --- the pty terminal, and the terminals' promises, in a container ---------------------------------------------


def test_a_terminus_episode_on_a_pty_in_a_container(serve, tmp_path, docker_client):
    keys = 'echo "tmux=[$TMUX]"; echo made > /tmp/made.txt\n'
    server = serve({"replies": [js([(keys, 1.0)], complete=True), js([], complete=True)]})
    args = ["run", "--api-base", server.url, "--retries", "0", "--json", "--protocol", "terminus-json"]
    args += ["--sandbox", f"docker-image:{IMAGE}", "--verify", "grep -qx made /tmp/made.txt", "make the file"]
    proc = run_cli(args, tmp_path, timeout=120, env={**cli_env(tmp_path), "OC_REPL_TERMINAL": "pty"})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1])["status"] == "verified"
    messages = server.chat_requests()[-1]["body"]["messages"]
    first, observation = messages[0]["content"], messages[-1]["content"]
    assert "Current Terminal Screen:\nroot@" in first and ":/# \n" not in first  # prompt trimmed like tmux
    assert "\ntmux=[]\n" in observation  # the image has tmux, and yet no tmux ran: the override holds


@pytest.mark.parametrize("kind", ["tmux", "pty"])
def test_a_shell_that_exits_ends_the_episode_in_a_container(serve, tmp_path, docker_client, kind):
    server = serve({"replies": [js([("exit\n", 1.0)]), js([], complete=True)]})
    args = ["run", "--api-base", server.url, "--retries", "0", "--json", "--protocol", "terminus-json"]
    args += ["--sandbox", f"docker-image:{IMAGE}", "--verify", "true", "leave"]
    proc = run_cli(args, tmp_path, timeout=120, env={**cli_env(tmp_path), "OC_REPL_TERMINAL": kind})
    assert proc.returncode == 0, proc.stderr
    last = json.loads(proc.stdout.splitlines()[-1])
    assert last["status"] == "verified" and last["final_answer"] == "The terminal session ended."
    assert len(server.chat_requests()) == 1


def test_a_container_without_tmux_gets_the_pty(container, monkeypatch):
    monkeypatch.delenv("OC_REPL_TERMINAL", raising=False)
    assert container.exec("mv /usr/bin/tmux /usr/bin/tmux.hidden", timeout=30).exit_code == 0
    protocol = TerminusJson()
    terminal = protocol._terminal_for(container)
    assert isinstance(terminal, PtyTerminal)
    assert "\nhello from /dev/pts/" in play(terminal, [("echo hello from $(tty)\n", 1.0)])
    assert "^C" in play(terminal, [("sleep 100\n", 0.5), ("C-c", 2.0)]) and terminal.probe().idle
    protocol.close()


@pytest.mark.parametrize("kind", ["tmux", "tmux_inside", "pty"])
def test_typed_ahead_commands_show_what_full_sleeps_show_in_a_container(kind, container):
    check_typed_ahead(kind, container, "/tmp")


@pytest.mark.parametrize("kind", ["tmux", "tmux_inside", "pty"])
def test_and_10_5d_every_keystroke_string_is_typed_in_a_container(kind, container):
    with opened(kind, container, "/tmp") as terminal:
        check_dashes_and_long_keys(terminal)
