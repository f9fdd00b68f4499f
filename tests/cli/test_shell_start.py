"""The shell says what it did and what it found: a switch prints itself and clears the bar, a verifier that stays is
named, a server that does not answer is a warning at once (and `/api-base` moves to another), `oc-repl "TASK"` opens
the shell with that task, every wait for the model shows its seconds, and questions name absolute paths."""

from __future__ import annotations

import re
import shutil
import socket
import time

import pytest

from tests.cli.test_repl_tmux import TmuxShell, answer, exec_call
from tests.conftest import run_cli

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


def bar(sh: TmuxShell, shows: str, timeout: float = 15.0) -> str:
    """The bottom bar, once it shows `shows`: prompt_toolkit draws it after the prompt, and a screen captured in
    between has the prompt without it."""
    deadline = time.monotonic() + timeout
    while True:
        bars = [line for line in sh.screen().splitlines() if "· turn " in line]
        if bars and shows in bars[-1]:
            return bars[-1]
        if time.monotonic() > deadline:
            raise AssertionError(f"the bar did not show {shows!r}:\n{sh.screen()}")
        time.sleep(0.05)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_switch_says_what_it_did_and_clears_the_bar(shell):
    sh = shell({"replies": [exec_call("echo hi"), answer("first done")]}, "--verify", "test -d .")
    sh.type_line("a task")
    sh.wait_for("first done")
    sh.wait_for_prompt(2)
    assert "tokens -" not in bar(sh, "verify PASS")
    sh.type_line("/protocol terminus-json")
    sh.wait_for("protocol terminus-json: a new conversation")
    sh.wait_for("the verifier stays: test -d . (/verify CMD sets another)")
    sh.wait_for_prompt(3)
    bar(sh, "turn 0/12 · tokens - · verify -")
    sh.type_line(f"/sandbox local:{sh.work / 'other'}")
    sh.wait_for(f"sandbox local:{sh.work / 'other'}: a new conversation")
    sh.wait_for("the verifier stays", count=2)


def test_a_server_that_does_not_answer_is_a_warning_at_start_and_api_base_moves_on(tmp_path, serve):
    server = serve({"replies": [answer("from the live one")]})
    sh = TmuxShell(tmp_path, f"http://127.0.0.1:{closed_port()}/v1", "--yes")
    try:
        screen = sh.wait_for("warning: no model server answers at http://127.0.0.1:")
        assert "/api-base URL" in screen
        sh.type_line(f"/api-base {server.url}")
        sh.wait_for(f"server {server.url}; the conversation goes on")
        sh.type_line("hello")
        sh.wait_for("from the live one")
    finally:
        sh.close()


def test_a_task_on_the_command_line_opens_the_shell_with_it(tmp_path, serve):
    server = serve({"replies": [answer("hi there, first thing")]})
    sh = TmuxShell(tmp_path, server.url, "--yes", "say hi")
    try:
        sh.wait_for("hi there, first thing")
        sh.wait_for("■ done · exit 0")
        assert sh.display("#{pane_dead}") == "0"  # still the shell, at its prompt
    finally:
        sh.close()


def test_a_retried_request_shows_the_spinner_again(shell):
    sh = shell({"replies": [{"http_error": 503, "text": ""}, {**answer("after the retry"), "delay": 3}]})
    sh.type_line("go")
    sh.wait_for("retrying")
    after_retry = sh.wait_for("waiting for the model").split("retrying")[-1]
    assert re.search(r"waiting for the model · \d+s", after_retry)  # the seconds waited, counted again
    sh.wait_for("after the retry", timeout=20)


def test_the_consent_question_names_the_directory_absolutely(tmp_path, monkeypatch):
    from oc_repl.errors import UsageError
    from oc_repl.plan import Sandboxes

    monkeypatch.chdir(tmp_path)
    asked: list[str] = []
    with pytest.raises(UsageError):
        Sandboxes("local:.", {}).open(lambda question: asked.append(question) or False)
    assert f"in {tmp_path}, confined" in asked[0] and " in ., " not in asked[0]


def test_a_refused_consent_names_the_directory_absolutely(tmp_path):
    proc = run_cli(["run", "--api-base", "http://127.0.0.1:9/v1", "--sandbox", "local:.", "hi"], tmp_path)
    assert proc.returncode == 2
    assert f"refusing to run model-chosen commands on this host (in {tmp_path}) without consent" in proc.stderr
