"""`oc-repl resume`: a shell killed outright is taken up again, with the same history, in the same sandbox (a local:
directory, a kept container), for camel and terminus; a sandbox that is gone is a clear refusal."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess

import pytest

from tests.cli.test_repl_tmux import TmuxShell, answer, exec_call
from tests.conftest import run_cli

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]


def terminus(keys: list[str], complete: bool = False) -> dict:
    commands = [{"keystrokes": k, "duration": 0.3} for k in keys]
    return {"text": json.dumps({"analysis": "a", "plan": "p", "commands": commands, "task_complete": complete})}


SCRIPTS = {  # the first task's replies, then the second task's answer
    "camel-terminal-toolkit": [exec_call("echo one-4711 > one.txt"), answer("first done"), answer("second done")],
    "terminus-json": [
        terminus(["echo one-4711 > one.txt\n"]),
        terminus([], True),
        terminus([], True),
        terminus([], True),
        terminus([], True),
    ],  # fmt: skip
}


def kill_hard(sh: TmuxShell) -> None:
    """SIGKILL to the shell's process: nothing of its own cleanup runs."""
    pane = int(sh.display("#{pane_pid}"))
    children = subprocess.run(["pgrep", "-P", str(pane)], capture_output=True, text=True).stdout.split()
    for pid in children:
        os.kill(int(pid), signal.SIGKILL)
    sh.wait_for("oc-repl-exit-status=137")


def messages(request: dict) -> list[dict]:
    return request["body"]["messages"]


def conversation_resumes(tmp_path, serve, protocol: str, *sandbox: str) -> None:
    server = serve({"replies": SCRIPTS[protocol]})
    first = TmuxShell(tmp_path, server.url, "--yes", "--protocol", protocol, *sandbox)
    try:
        first.type_line("first task")
        first.wait_for("■ done", timeout=60)
        first.wait_for_prompt(2)
        before = messages(server.chat_requests()[-1])
        kill_hard(first)
    finally:
        first.close()
    second = TmuxShell(tmp_path, server.url, "--yes", "resume")
    try:
        second.wait_for("resumed a conversation of 1 task(s)")
        second.type_line("second task")
        second.wait_for("■ done", timeout=60, count=1)
        after = messages(server.chat_requests()[-1])
    finally:
        second.close()
    assert after[: len(before)] == before  # the whole history the model had, then what followed
    assert "first task" in json.dumps(before)
    assert any("second task" in m["content"] for m in after[len(before) :])
    assert sum("second task" in m.get("content", "") for m in after) == 1
    started = [json.loads(line) for line in transcript_of(tmp_path).read_text().splitlines()]
    threads = {e["thread_id"] for e in started if e["type"] == "thread.started"}
    assert len(threads) == 1  # one conversation, in one transcript


def transcript_of(tmp_path):
    [found] = (tmp_path / "state" / "oc-repl" / "sessions").glob("*/*/*/*-shell.jsonl")
    return found


@pytest.mark.parametrize("protocol", ["camel-terminal-toolkit", "terminus-json"])
def test_a_killed_shell_resumes_its_conversation_in_its_local_directory(tmp_path, serve, protocol):
    conversation_resumes(tmp_path, serve, protocol)
    assert (tmp_path / "work" / "one.txt").read_text() == "one-4711\n"


def kept_container(tmp_path) -> str:
    """The container the shell's conversation ran in, as its transcript names it (other containers may come and go
    on the same daemon meanwhile)."""
    events = [json.loads(line) for line in transcript_of(tmp_path).read_text().splitlines()]
    [spec] = {e["sandbox"] for e in events if e["type"] == "conversation.saved"}
    assert spec.startswith("docker:")
    return spec.removeprefix("docker:")


@pytest.mark.parametrize("protocol", ["camel-terminal-toolkit", "terminus-json"])
def test_a_killed_shell_resumes_its_conversation_in_its_kept_container(tmp_path, serve, protocol):
    import docker

    from tests.docker_support import IMAGE, docker_session

    client = next(docker_session())
    name = ""
    try:
        conversation_resumes(tmp_path, serve, protocol, "--sandbox", f"docker-image:{IMAGE}", "--keep")
        container = client.containers.get(name := kept_container(tmp_path))
        done = container.exec_run(["cat", f"{'/workspace' if protocol.startswith('camel') else '/'}/one.txt"])
        assert done.output.decode().strip() == "one-4711"
        container.remove(force=True)  # the kept container gone: the conversation cannot go on in it
        refused = run_cli(["resume"], tmp_path)
        assert refused.returncode == 2
        assert f"the conversation's container {name} is no longer there" in refused.stderr
    finally:
        with contextlib.suppress(docker.errors.NotFound, ValueError):
            client.containers.get(name or kept_container(tmp_path)).remove(force=True)


def test_a_sandbox_that_is_gone_is_refused_saying_so(tmp_path, serve):
    server = serve({"replies": [answer("done")]})
    shell = TmuxShell(tmp_path, server.url, "--yes")
    try:
        shell.type_line("a task")
        shell.wait_for("■ done")
        shell.wait_for_prompt(2)
        kill_hard(shell)
    finally:
        shell.close()
    (tmp_path / "work").rename(tmp_path / "moved")
    proc = run_cli(["resume"], tmp_path)
    assert proc.returncode == 2
    assert f"sandbox directory {tmp_path / 'work'} no longer exists" in proc.stderr


def test_nothing_to_resume_is_a_usage_error(tmp_path):
    proc = run_cli(["resume"], tmp_path)
    assert proc.returncode == 2 and "no shell conversation to resume" in proc.stderr


def test_a_resumed_conversation_keeps_its_turn_cap_model_and_verifier_unless_told_otherwise(tmp_path, serve):
    server = serve({"replies": SCRIPTS["camel-terminal-toolkit"]})
    first = TmuxShell(tmp_path, server.url, "--yes", "--max-turns", "5", "--verify", "test -f one.txt")
    try:
        first.type_line("first task")
        first.wait_for("■ verified", timeout=60)
        first.wait_for_prompt(2)
        kill_hard(first)
    finally:
        first.close()
    second = TmuxShell(tmp_path, server.url, "--yes", "resume")  # its server given again; the rest not
    try:
        second.wait_for("the conversation's model qwen3-8b-oc, max turns 5, verify test -f one.txt")
        second.type_line("second task")
        second.wait_for("■ verified", timeout=60, count=1)
    finally:
        second.close()
    events = [json.loads(line) for line in transcript_of(tmp_path).read_text().splitlines()]
    started = [e for e in events if e["type"] == "thread.started"]
    assert len(started) == 2 and started[-1]["options"]["max_turns"] == 5 and started[-1]["model"] == "qwen3-8b-oc"
    assert started[-1]["options"]["verify"] == "test -f one.txt"
    verdicts = [e for e in events if e["type"] == "verify.completed"]
    assert [v["command"] for v in verdicts] == ["test -f one.txt"] * 2 and all(v["passed"] for v in verdicts)


def test_a_verify_file_that_is_gone_is_said_not_restored(tmp_path):
    from oc_repl.cli.cmd_resume import conversation_settings
    from oc_repl.events import ThreadStarted

    check = tmp_path / "check.sh"
    check.write_text("test -f one.txt\n")
    started = ThreadStarted(
        thread_id="t", model="m", protocol="raw", sandbox="none", api_base="http://127.0.0.1:1/v1",
        options={"verify_file": str(check), "max_turns": 3},
    )  # fmt: skip
    assert conversation_settings(started) == (
        {"api_base": "http://127.0.0.1:1/v1", "model": "m", "max_turns": 3, "verify_file": check},
        [],
    )
    check.unlink()
    found, lost = conversation_settings(started)
    assert "verify_file" not in found and lost == [f"its verify file {check} is gone (/verify CMD sets a verifier)"]
