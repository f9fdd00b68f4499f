"""terminus-json / terminus-xml end to end through the CLI, on a local tmux terminal, against scripted servers."""

from __future__ import annotations

import json
import shutil
import subprocess
import time

import pytest

from oc_repl.event_read import parse_event
from oc_repl.protocols.templates import Templates
from oc_repl.protocols.terminus.parse import JSON_SPEC
from tests.conftest import cli_env, run_cli

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


def js(commands: list[tuple[str, float]], complete: bool = False, analysis: str = "looking") -> dict:
    body = {
        "analysis": analysis,
        "plan": "next steps",
        "commands": [{"keystrokes": k, "duration": d} for k, d in commands],
        "task_complete": complete,
    }
    return {"text": "<think>\n\n</think>\n\n" + json.dumps(body)}


def xml(commands: list[tuple[str, float]], complete: bool = False) -> dict:
    keys = "".join(f'<keystrokes duration="{d}">{k}</keystrokes>' for k, d in commands)
    done = "<task_complete>true</task_complete>" if complete else ""
    return {"text": f"<response><analysis>a</analysis><plan>p</plan><commands>{keys}</commands>{done}</response>"}


def terminus(server, work, protocol: str, *more: str) -> list[str]:
    return [
        "run",
        "--api-base",
        server.url,
        "--protocol",
        protocol,
        "--sandbox",
        f"local:{work}",
        "--yes",
        "--retries",
        "0",
        "--json",
        *more,
    ]


def user_messages(server) -> list[str]:
    last = server.chat_requests()[-1]["body"]["messages"]
    return [m["content"] for m in last if m["role"] == "user"]


@pytest.mark.parametrize("protocol,reply", [("terminus-json", js), ("terminus-xml", xml)])
def test_create_a_file_and_verify(serve, tmp_path, protocol, reply):
    server = serve({"replies": [reply([("echo Hello > hello.txt\n", 1.0)], complete=True), reply([], complete=True)]})
    work = tmp_path / "w"
    proc = run_cli(terminus(server, work, protocol, "--verify", "grep -qx Hello hello.txt", "make hello.txt"), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (work / "hello.txt").read_text() == "Hello\n"
    first = server.chat_requests()[0]["body"]
    assert "tools" not in first and [m["role"] for m in first["messages"]] == ["user"]
    assert "make hello.txt" in first["messages"][0]["content"]
    assert "Current Terminal Screen:\n" in first["messages"][0]["content"]
    second = user_messages(server)[-1]
    assert second.startswith("Current terminal state:\nNew Terminal Output:\n") and "echo Hello > hello.txt" in second
    marker = (
        '"task_complete": true in your JSON' if protocol == "terminus-json" else "<task_complete>true</task_complete>"
    )
    assert marker in second


def test_ctrl_c_interrupts_a_running_sleep(serve, tmp_path):
    replies = [
        js([("sleep 100.5\n", 0.5)]),
        js([("C-c", 0.5)]),
        js([("echo back-at-prompt\n", 0.5)]),
        js([], complete=True),
        js([], complete=True),
    ]
    server = serve({"replies": replies})
    proc = run_cli(terminus(server, tmp_path / "w", "terminus-json", "interrupt"), tmp_path)
    assert proc.returncode == 0, proc.stderr
    observations = user_messages(server)
    assert "sleep 100.5" in observations[1]
    assert "^C" in observations[2]
    assert "back-at-prompt" in observations[3]
    assert not subprocess.run(["pgrep", "-f", "sleep 100.5"], capture_output=True).stdout


def test_parse_error_turn_then_a_good_one(serve, tmp_path):
    server = serve(
        {"replies": [{"text": "I will now list the files."}, js([("ls\n", 0.2)]), js([], True), js([], True)]}
    )
    proc = run_cli(terminus(server, tmp_path / "w", "terminus-json", "list"), tmp_path)
    assert proc.returncode == 0, proc.stderr
    feedback = user_messages(server)[1]
    m = Templates.load("terminus-json", "messages.toml", JSON_SPEC)
    warning = "- " + m.render("json.warn.no_json_object")
    error_and_warnings = m.render("feedback.error_and_warnings", error=m.render("json.error.no_json"), warning=warning)
    assert feedback == m.render("prompt.parse_error", feedback=error_and_warnings)
    events = [parse_event(line) for line in proc.stdout.splitlines()]
    assert [e.item.type for e in events if e.type == "item.completed"].count("parse_error") == 1


def test_one_task_complete_does_not_end_but_two_in_a_row_do(serve, tmp_path):
    replies = [
        js([("echo one\n", 0.2)], complete=True),
        js([("echo two\n", 0.2)]),
        js([], complete=True),
        js([], complete=True),
        js([("echo never\n", 0.2)]),
    ]
    server = serve({"replies": replies})
    proc = run_cli(terminus(server, tmp_path / "w", "terminus-json", "count"), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert len(server.chat_requests()) == 4
    last = json.loads(proc.stdout.splitlines()[-1])
    assert last["status"] == "done" and last["turns"] == 4
    # a screen after each of the first three replies; the confirmation, which runs nothing, takes none
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    observed = [
        e["item"] for e in events if e["type"] == "item.completed" and e["item"].get("command") == "(observation)"
    ]
    assert len(observed) == 3


def test_a_confirmation_with_keys_still_types_them_as_upstream_does(serve, tmp_path):
    replies = [js([], complete=True), js([("echo late > late.txt\n", 0.2)], complete=True)]
    server = serve({"replies": replies})
    work = tmp_path / "w"
    proc = run_cli(terminus(server, work, "terminus-json", "count"), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (work / "late.txt").read_text() == "late\n"


def test_long_output_is_limited_to_10000_bytes(serve, tmp_path):
    # 250 kB fits the pane's 2000-line history (160 columns), so it comes back as new output, then limited
    big = "head -c 250000 /dev/zero | tr '\\0' a; echo\n"
    server = serve({"replies": [js([(big, 5.0)]), js([], True), js([], True)]})
    proc = run_cli(terminus(server, tmp_path / "w", "terminus-json", "print a lot"), tmp_path)
    assert proc.returncode == 0, proc.stderr
    observation = user_messages(server)[1]
    assert observation.startswith("New Terminal Output:\n")
    assert "output limited to 10000 bytes" in observation
    assert 9900 <= len(observation.encode()) <= 10300


def test_a_megabyte_overflows_the_history_and_falls_back_to_the_screen(serve, tmp_path):
    # upstream sets history-limit after the window exists, so the pane keeps tmux's default 2000 lines
    big = "head -c 1000000 /dev/zero | tr '\\0' a; echo; echo end-of-output\n"
    server = serve({"replies": [js([(big, 5.0)]), js([], True), js([], True)]})
    proc = run_cli(terminus(server, tmp_path / "w", "terminus-json", "print a lot"), tmp_path)
    assert proc.returncode == 0, proc.stderr
    observation = user_messages(server)[1]
    # The old capture (a bare prompt) is found again only at the new prompt, so that is all upstream shows.
    assert observation.startswith("New Terminal Output:\n") and observation.count("\n") == 2


def test_find_new_content_follows_upstream():
    from oc_repl.protocols.terminus.tmux import find_new_content

    assert find_new_content("$ ls\na\n$", "$ ls\na\n$ pwd\n/x\n$") == "\n$ pwd\n/x\n$"
    assert find_new_content("$", "out\n$") == "$"
    assert find_new_content("gone\n$", "$ clear\n$") is None


def test_exact_wait_sleeps_every_duration(serve, tmp_path):
    server = serve({"replies": [js([("true\n", 1.5)]), js([], True), js([], True)]})
    proc = run_cli(terminus(server, tmp_path / "w", "terminus-json", "--wait", "exact", "wait"), tmp_path)
    assert proc.returncode == 0, proc.stderr
    turns = [json.loads(line) for line in proc.stdout.splitlines() if '"turn.completed"' in line]
    assert turns[0]["duration_s"] < 1.0  # the model's own time; the wait is measured below
    waits = [
        json.loads(line)["item"]["aggregated_output"]
        for line in proc.stdout.splitlines()
        if '"keystrokes"' in line and '"item.completed"' in line
    ]
    assert waits and float(waits[0].split("waited ")[1].split("s")[0]) >= 1.5


def test_the_local_pane_ignores_the_users_tmux_config_and_shell(serve, tmp_path):
    # A user's config that would hide the status line and take a row from the pane, and a user whose shell is sh:
    # the local pane is still the one a fresh container shows, bash as a login shell on a 40-row pane.
    home = tmp_path / "home"
    home.mkdir()
    (home / ".tmux.conf").write_text("set -g status off\nset -g pane-border-status top\n")
    keys = 'echo "$0"; tput lines; tmux show-options -gv status\n'
    server = serve({"replies": [js([(keys, 1.0)]), js([], True), js([], True)]})
    env = {**cli_env(tmp_path), "HOME": str(home), "SHELL": "/bin/sh"}
    proc = run_cli(terminus(server, tmp_path / "w", "terminus-json", "look"), tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "\n-bash\n40\non\n" in user_messages(server)[1]


def test_typed_ahead_replies_show_what_an_exact_wait_shows(serve, tmp_path):
    from tests.protocols.terminus.test_pty_terminal import (
        SLOW_PROMPT,  # a prompt that looks idle a second before the shell reads
    )

    two = {"analysis": "a", "plan": "p", "commands": [{"keystrokes": f"echo {x}\n", "duration": 3.0} for x in "ab"]}
    replies = [
        js([(SLOW_PROMPT, 5.0)]),
        {"text": "```json\n" + json.dumps(two) + "\n```"},  # fenced: the observation comes with warnings
        js([("echo c\n", -1), ("echo d\n", 3.0)]),
        js([], True),
        js([], True),
    ]
    seen = {}
    for wait in ("exact", "detect"):
        server = serve({"replies": replies})
        proc = run_cli(terminus(server, tmp_path / "w", "terminus-json", "--wait", wait, "go"), tmp_path)
        assert proc.returncode == 0, proc.stderr
        seen[wait] = user_messages(server)
    assert "\na\nslow$\nb\nslow$\n" in seen["exact"][2] and "\nc\nslow$\nd\nslow$\n" in seen["exact"][3]
    assert seen["detect"] == seen["exact"]


@pytest.mark.parametrize("wait", ["detect", "exact"])
def test_a_shell_that_exits_ends_the_episode_as_upstream_does(serve, tmp_path, wait):
    """`exit` closes the pane and tmux with it: upstream sleeps, finds the session gone and asks the model no more.
    The run ends as done (the verifier, if any, decides), not as a broken sandbox."""
    server = serve({"replies": [js([("exit\n", 1.0)]), js([], complete=True)]})
    args = terminus(server, tmp_path / "w", "terminus-json", "--wait", wait, "--verify", "true", "leave")
    proc = run_cli(args, tmp_path)
    assert proc.returncode == 0, proc.stderr
    events = [parse_event(line) for line in proc.stdout.splitlines()]
    assert events[-1].status == "verified" and events[-1].final_answer == "The terminal session ended."
    assert len(server.chat_requests()) == 1 and not any(e.type == "error" for e in events)


def test_a_tmux_session_that_ended_is_seen_at_once_and_a_capture_answers_for_a_live_one(tmp_path, monkeypatch):
    from oc_repl.protocols.terminus.tmux import TmuxTerminal, private_socket
    from oc_repl.sandbox.local import LocalSandbox

    box = LocalSandbox(tmp_path / "w")
    tmux = TmuxTerminal(box, cwd=box.workdir, socket=private_socket())
    execs: list[str] = []
    monkeypatch.setattr(
        box, "exec", lambda command, **kw: execs.append(command) or LocalSandbox.exec(box, command, **kw)
    )
    try:
        tmux.observe()
        looked = len(execs)
        assert tmux.alive() and len(execs) == looked  # the capture's answer: no has-session of its own
        assert tmux.alive() and len(execs) == looked + 1  # asked again later, tmux is asked
        started = time.monotonic()
        tmux.send_keys("exit\n")
        tmux.wait(5.0, started)
        assert time.monotonic() - started < 3.0  # the wait ends with the session, not at its duration
        assert not tmux.alive() and tmux.observe() == ("screen", "")
    finally:
        tmux.close()
        box.close()
