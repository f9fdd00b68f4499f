"""The interactive shell in a real terminal: tmux runs it, send-keys types, capture-pane reads the screen."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import cli_env
from tests.fakeserver import call_text

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


def exec_call(command: str, timeout: float | None = None) -> dict:
    return {"text": call_text("shell_exec", {"id": "s1", "command": command, "block": True, "timeout": timeout})}


def answer(text: str) -> dict:
    return {"text": f"<think>\n\n</think>\n\n{text}"}


class TmuxShell:
    server: Any  # the fake model server it talks to

    def __init__(self, tmp_path: Path, url: str, *args: str) -> None:
        self.socket = f"oc-repl-test-{uuid.uuid4().hex[:8]}"
        self.work = tmp_path / "work"
        self.work.mkdir(exist_ok=True)
        env = cli_env(tmp_path)
        env.pop("NO_COLOR", None)
        exports = " ".join(f"{k}={_quote(v)}" for k, v in env.items() if k in ("XDG_STATE_HOME", "XDG_CONFIG_HOME"))
        argv = " ".join(
            _quote(a)
            for a in [sys.executable, "-m", "oc_repl", "--api-base", url, "--sandbox", f"local:{self.work}", *args]
        )
        command = f"cd {_quote(str(tmp_path))} && env {exports} {argv}; echo oc-repl-exit-status=$?"
        self._tmux("new-session", "-d", "-s", "t", "-x", "140", "-y", "50", command)
        self._tmux("set-option", "-t", "t", "remain-on-exit", "on")
        self._tmux("resize-window", "-t", "t", "-x", "140", "-y", "50")  # detached sessions start at 80x24
        self.wait_for_prompt(1)

    def _tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, check=True).stdout

    def send(self, *keys: str) -> None:
        self._tmux("send-keys", "-t", "t", *keys)

    def type_line(self, text: str) -> None:
        self._tmux("send-keys", "-t", "t", "-l", text)
        self.send("Enter")

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-t", "t", "-S", "-200")

    def wait_for(self, text: str, timeout: float = 15.0, count: int = 1) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            screen = self.screen()
            if screen.count(text) >= count:
                return screen
            time.sleep(0.05)
        raise AssertionError(f"{text!r} did not appear on screen:\n{self.screen()}")

    def wait_for_prompt(self, count: int, timeout: float = 15.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            screen = self.screen()
            if prompts(screen) >= count:
                return screen
            time.sleep(0.05)
        raise AssertionError(f"prompt #{count} did not appear:\n{self.screen()}")

    def display(self, fmt: str) -> str:
        return self._tmux("display-message", "-p", "-t", "t", fmt).strip()

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True)


def _quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def prompts(screen: str) -> int:
    """Prompts on screen (capture-pane trims the space after an empty prompt)."""
    return sum(1 for line in screen.splitlines() if line == "›" or line.startswith("› "))


def test_task_shows_tool_output_and_answer(shell):
    sh = shell({"replies": [exec_call("echo from-the-sandbox"), answer("All finished here.")]})
    sh.type_line("print something")
    screen = sh.wait_for("All finished here.")
    assert "shell_exec" in screen and "from-the-sandbox" in screen
    sh.wait_for("■ done · exit 0")
    sh.wait_for_prompt(2)


def test_help_lists_the_commands(shell):
    sh = shell({"replies": []})
    sh.type_line("/help")
    screen = sh.wait_for("/exit")
    for name in (
        "/protocol",
        "/model",
        "/sandbox",
        "/turns",
        "/verify",
        "/new",
        "/history",
        "/transcript",
        "/save",
        "/approval",
        "/think",
    ):
        assert name in screen


def test_verify_prints_pass_and_fail(shell):
    sh = shell({"replies": [exec_call("echo hi > made.txt"), answer("made it")]})
    sh.type_line("/verify test -f made.txt")
    sh.wait_for(" FAIL ")
    sh.type_line("make the file")
    sh.wait_for("made it")
    sh.type_line("/verify")
    screen = sh.wait_for(" PASS ")
    assert "test -f made.txt" in screen


def test_ctrl_c_interrupts_a_running_command_and_returns_to_the_prompt(shell):
    marker = "107.25"
    sh = shell({"replies": [exec_call(f"sleep {marker}", timeout=300), answer("never")]})
    sh.type_line("wait a long time")
    sh.wait_for(f"sleep {marker}")
    time.sleep(0.3)
    start = time.monotonic()
    sh.send("C-c")
    screen = sh.wait_for("interrupted", timeout=5)
    sh.wait_for_prompt(2, timeout=5)
    assert time.monotonic() - start < 2.0, screen
    alive = subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True, text=True).stdout
    assert not alive.strip(), "the interrupted command is still running"


def test_escape_sequences_from_commands_do_not_reach_the_terminal(shell):
    payload = r"printf 'visible\033]0;PWNED-TITLE\007\033[2J\033[31mred\n'"
    sh = shell({"replies": [exec_call(payload), answer("printed")]})
    title_before = sh.display("#{pane_title}")
    sh.type_line("print escapes")
    screen = sh.wait_for("printed")
    assert sh.display("#{pane_title}") == title_before != "PWNED-TITLE"
    assert "oc-repl — type a task" in screen  # the screen was not cleared
    assert "\x1b" not in screen


def test_exit_command_exits_zero(shell):
    sh = shell({"replies": []})
    sh.type_line("/exit")
    sh.wait_for("oc-repl-exit-status=0")


def test_history_persists_across_sessions(shell, tmp_path):
    first = shell({"replies": []})
    first.type_line("/transcript")
    first.wait_for(".jsonl")
    first.type_line("/exit")
    first.wait_for("oc-repl-exit-status=0")
    second = shell({"replies": []})
    second.send("Up")
    screen = second.wait_for("› /exit")
    second.send("Up")
    screen = second.wait_for("› /transcript")
    assert (tmp_path / "state" / "oc-repl" / "history").read_text().count("/transcript") == 1, screen


def test_approval_ask_runs_only_what_is_approved(tmp_path, serve):
    server = serve(
        {"replies": [exec_call("echo approved-run > a.txt"), exec_call("echo denied > b.txt"), answer("finished")]}
    )
    sh = TmuxShell(tmp_path, server.url)
    try:
        sh.type_line("two commands")
        sh.wait_for("approve?")
        sh.type_line("y")
        sh.wait_for("approve?", count=2)
        sh.type_line("n")
        sh.wait_for("finished")
        assert (sh.work / "a.txt").read_text() == "approved-run\n"
        assert not (sh.work / "b.txt").exists()
        assert "declined" in server.chat_requests()[-1]["body"]["messages"][-1]["content"]
    finally:
        sh.close()


def test_bad_commands_are_errors_not_crashes(shell):
    sh = shell({"replies": []})
    sh.type_line("/save /nonexistent-dir/x.jsonl")
    sh.wait_for("cannot save the transcript")
    sh.type_line("/turns ²")
    sh.wait_for("/turns needs a positive number")
    sh.type_line("/turns 3")
    sh.wait_for("turn 0/3")  # the toolbar shows the new cap at once
    sh.type_line("/exit")
    sh.wait_for("oc-repl-exit-status=0")


def test_a_setting_changed_in_the_shell_is_confirmed(shell):
    sh = shell({"replies": []})
    for line, said in [
        ("/turns 5", "at most 5 model turns per task"),
        ("/approval ask", "each command is asked about before it runs"),
        ("/approval auto", "commands run without asking"),
        ("/think hide", "the model's reasoning is hidden"),
        ("/think show", "the model's reasoning is shown"),
    ]:
        sh.type_line(line)
        sh.wait_for(said)
    sh.type_line("/exit")
    sh.wait_for("oc-repl-exit-status=0")


def test_ctrl_d_at_the_approval_prompt_declines(tmp_path, serve):
    server = serve({"replies": [exec_call("echo never > c.txt"), answer("went on")]})
    sh = TmuxShell(tmp_path, server.url)
    try:
        sh.type_line("one command")
        sh.wait_for("approve?")
        sh.send("C-d")
        sh.wait_for("went on")
        sh.wait_for_prompt(2)
        assert not (sh.work / "c.txt").exists()
        assert "declined" in server.chat_requests()[-1]["body"]["messages"][-1]["content"]
    finally:
        sh.close()


def test_sigterm_to_the_shell_cleans_up_and_leaves(shell):
    marker = "sleep 77.5"
    start = {"text": call_text("shell_exec", {"id": "bg", "command": marker, "block": False, "timeout": None})}
    sh = shell({"replies": [start, answer("started it")]})
    sh.type_line("start a background job")
    sh.wait_for("started it")
    sh.wait_for_prompt(2)
    assert subprocess.run(["pgrep", "-f", marker], capture_output=True).stdout
    pid = sh.display("#{pane_pid}")
    shell_pid = subprocess.run(["pgrep", "-P", pid, "-f", "oc_repl"], capture_output=True, text=True).stdout.split()
    subprocess.run(["kill", "-TERM", *shell_pid], check=True)
    screen = sh.wait_for("oc-repl-exit-status=130")
    assert "transcript: " in screen
    assert not subprocess.run(["pgrep", "-f", marker], capture_output=True).stdout


@pytest.mark.parametrize("attempt", range(3))
def test_a_closed_terminal_ends_the_shell_at_its_prompt(tmp_path, serve, attempt):
    """tmux going away hangs up the terminal and signals the shell, here just as its next prompt is drawn: the prompt
    ends and the shell cleans up and leaves. (An exception raised inside prompt_toolkit's event loop once left a
    shell cancelling tasks for ever; that took a loaded machine and a few runs to show.)"""
    from tests.sandbox.test_local_sandbox import gone

    server = serve({"replies": [answer("hello")]})
    sh = TmuxShell(tmp_path, server.url)
    sh.type_line("say hello")
    sh.wait_for("hello", count=2)  # the answer: the next prompt is being drawn, or about to be
    sh.close()
    assert gone(f"local:{sh.work}", within=30), "the shell outlived its terminal"
    transcript = next((tmp_path / "state").rglob("*-shell.jsonl"))
    assert transcript.read_text().endswith("\n")  # closed whole


def test_a_failed_sandbox_switch_keeps_the_working_sandbox(shell):
    sh = shell({"replies": [exec_call("pwd > where.txt"), answer("noted")]})
    sh.type_line("/sandbox docker:oc-repl-no-such-container")
    sh.wait_for("error:")
    sh.wait_for_prompt(2)
    sh.type_line("where am I")
    sh.wait_for("noted")
    assert (sh.work / "where.txt").read_text().strip() == str(sh.work)
    assert "· local:" in sh.screen().splitlines()[-1] or "local:" in sh.screen()


def test_an_interrupt_ends_on_its_own_line_and_counts_are_per_task(shell):
    sh = shell({"replies": [exec_call("echo one"), answer("first"), exec_call("sleep 97.5", timeout=300), answer("x")]})
    sh.type_line("first task")
    sh.wait_for("first")
    sh.wait_for("tool calls 1 native")
    sh.type_line("second task")
    sh.wait_for("sleep 97.5")
    time.sleep(0.3)
    sh.send("C-c")
    screen = sh.wait_for("■ interrupted")
    assert "^C■" not in screen
    assert "tool calls 1 native" in screen.split("■ interrupted")[1]


def test_a_slow_model_shows_a_spinner_with_the_seconds(shell):
    sh = shell({"replies": [{**answer("slow answer"), "delay": 3}]})
    sh.type_line("take your time")
    sh.wait_for("waiting for the model")
    sh.wait_for("slow answer", timeout=20)
    assert "waiting for the model" not in sh.screen().split("slow answer")[-1]


def test_after_ctrl_c_the_model_is_told_and_the_partial_output_is_shown(shell):
    sh = shell({"replies": [exec_call("echo partial-9431; sleep 96.75", timeout=300), answer("understood")]})
    sh.type_line("start something long")
    sh.wait_for("sleep 96.75")
    time.sleep(0.5)  # the echo has run (a later Ctrl-C only finds more of the sleep)
    sh.send("C-c")
    sh.wait_for("■ interrupted")
    sh.wait_for("partial-9431", count=2)  # the command, then what it printed before the interrupt
    sh.wait_for_prompt(2)
    sh.type_line("go on")
    sh.wait_for("understood")
    told = json.dumps(sh.server.chat_requests()[-1]["body"]["messages"])
    # in camel's terms: the call's result says the user interrupted it, with what it printed until then
    assert "the user interrupted this call" in told and "partial-9431" in told, told
