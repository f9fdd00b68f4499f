"""A run as a whole from the command line: odd input ends in a clear error or a recorded answer, never an internal
error; the exit code and the record are right; cleanup survives signals; what `run` and `show` say at the end."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from oc_repl.config import validate
from oc_repl.event_read import parse_event
from oc_repl.plan import plan
from oc_repl.session import Session
from tests.cli.test_cli import HELLO, answer, base_args, exec_call
from tests.conftest import cli_env, default_sigint, run_cli
from tests.fakeserver import call_text


def events_of(path: Path) -> list:
    return [parse_event(line) for line in path.read_text().splitlines()]


def call(name: str, **arguments) -> dict:
    return {"text": call_text(name, arguments)}


def test_a_brace_in_a_prompt_override_is_one_usage_error_before_any_model_call(serve, tmp_path):
    env = cli_env(tmp_path)
    override = Path(env["XDG_CONFIG_HOME"]) / "oc-repl" / "protocols" / "terminus-json"
    override.mkdir(parents=True)
    (override / "prompt.txt").write_text('Task: {instruction}\n{terminal_state}\nreply as {"analysis": ...}\n')
    server = serve({"replies": [answer("never asked")]})
    run = run_cli([*base_args(server, tmp_path / "w"), "--protocol", "terminus-json", "hi"], tmp_path, env=env)
    assert run.returncode == 2, run.stderr
    assert "prompt.txt" in run.stderr and "Traceback" not in run.stderr
    assert server.chat_requests() == []
    show = run_cli(["protocols", "show", "terminus-json"], tmp_path, env=env)
    assert show.returncode == 2 and "prompt.txt" in show.stderr


def test_ctrl_c_at_the_consent_prompt_is_130_and_ctrl_d_is_2(serve, tmp_path):
    server = serve({"replies": [answer("never asked")]})
    args = [sys.executable, "-m", "oc_repl", "run", "--api-base", server.url, "--sandbox", f"local:{tmp_path / 'w'}"]
    for key, code in ((b"\x03", 130), (b"\x04", 2)):
        leader, follower = os.openpty()
        proc = subprocess.Popen(
            [*args, "hi"], stdin=follower, stdout=follower, stderr=follower, env=cli_env(tmp_path),
            preexec_fn=lambda: (os.setsid(), default_sigint()),
        )  # fmt: skip
        os.close(follower)
        seen = b""
        deadline = time.monotonic() + 30
        while b"[y/N]" not in seen:
            assert time.monotonic() < deadline, seen
            seen += os.read(leader, 1024)
        # as a terminal does: ^C becomes SIGINT for the foreground process, ^D the end of input
        if key == b"\x03":
            proc.send_signal(signal.SIGINT)
        else:
            os.write(leader, key)
        assert proc.wait(30) == code
        os.close(leader)
    assert server.chat_requests() == []


def test_an_unwritable_transcript_is_a_usage_error(serve, tmp_path):
    server = serve({"replies": [answer("never asked")]})
    blocker = tmp_path / "file"
    blocker.write_text("")
    run = run_cli(base_args(server, tmp_path / "w", "--transcript", str(blocker / "t.jsonl"), "hi"), tmp_path)
    assert run.returncode == 2 and "transcript" in run.stderr and "Traceback" not in run.stderr
    assert server.chat_requests() == []


def test_an_internal_error_keeps_the_turns_that_ran(serve, tmp_path, monkeypatch):
    from oc_repl.protocols.camel.protocol import CamelProtocol

    original = CamelProtocol.step
    calls = []

    def step(self, *args, **kwargs):  # a bug that shows on the second turn
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("a bug")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(CamelProtocol, "step", step)
    server = serve({"replies": [exec_call("echo one"), exec_call("echo two")]})
    settings = validate({"api_base": server.url, "sandbox": f"local:{tmp_path / 'w'}", "yes": True, "retries": 0})
    events: list = []
    result = Session(plan(settings, "go"), events.append).run(close_after=True)
    assert (result.status, result.exit_code, result.turns) == ("internal_error", 70, 2)
    assert events[-1].type == "thread.completed" and events[-1].turns == 2
    assert any(e.type == "error" and "RuntimeError" in e.message for e in events)
    assert any(e.type == "turn.failed" and e.turn == 2 for e in events)


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM])
def test_sighup_and_sigterm_clean_up_like_ctrl_c(serve, tmp_path, sig):
    marker = f"sleep 61.{sig}"
    server = serve(
        {"replies": [call("shell_exec", id="bg", command=marker, block=False, timeout=None), exec_call("sleep 30")]}
    )
    transcript = tmp_path / "t.jsonl"
    args = [sys.executable, "-m", "oc_repl", *base_args(server, tmp_path / "w", "--transcript", str(transcript), "go")]
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=cli_env(tmp_path), preexec_fn=default_sigint)  # fmt: skip
    deadline = time.monotonic() + 30
    while transcript.read_text().count('"command_execution"') < 3 if transcript.exists() else True:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(sig)
    assert proc.wait(30) == 130
    assert events_of(transcript)[-1].status == "interrupted"
    assert not subprocess.run(["pgrep", "-f", marker], capture_output=True).stdout


@pytest.mark.usefixtures("ctrl_c_interrupts")
def test_a_second_interrupt_during_cleanup_does_not_cut_it_short(serve, tmp_path, monkeypatch):
    server = serve({"replies": [exec_call("sleep 30")]})
    settings = validate({"api_base": server.url, "sandbox": f"local:{tmp_path / 'w'}", "yes": True, "retries": 0})
    events: list = []
    session = Session(plan(settings, "go"), events.append)
    closed = []
    original = session.close

    def slow_close(leave_running: bool = False) -> str:  # a second Ctrl-C arrives while cleanup is under way
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.3)
        closed.append(original(leave_running))
        return closed[-1]

    monkeypatch.setattr(session, "close", slow_close)
    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
    result = session.run(close_after=True)
    assert closed == [""] and result.status == "interrupted"
    assert events[-1].type == "thread.completed" and events[-1].exit_code == 130


def test_the_agents_time_is_bounded_by_timeout(serve, tmp_path):
    marker = "sleep 45.5"
    server = serve({"replies": [exec_call(marker, timeout=120), answer("never")]})
    transcript = tmp_path / "t.jsonl"
    started = time.monotonic()
    run = run_cli(base_args(server, tmp_path / "w", "--timeout", "2", "--transcript", str(transcript), "go"), tmp_path)
    assert run.returncode == 7, run.stderr
    assert time.monotonic() - started < 30
    assert events_of(transcript)[-1].status == "agent_timeout"
    assert not subprocess.run(["pgrep", "-f", marker], capture_output=True).stdout


@pytest.mark.parametrize("protocol", ["camel-terminal-toolkit", "terminus-json", "terminus-json-pty"])
def test_a_lone_surrogate_from_the_model_runs_and_is_recorded(serve, tmp_path, protocol, monkeypatch):
    env = cli_env(tmp_path)
    if protocol == "terminus-json-pty":
        protocol, env["OC_REPL_TERMINAL"] = "terminus-json", "pty"
    if protocol == "camel-terminal-toolkit":
        replies = [call("shell_exec", id="s", command="echo \ud800 done", block=True, timeout=None), answer("ok")]
    else:
        done = {"analysis": "a", "plan": "p", "commands": [], "task_complete": True}
        keys = {"analysis": "a", "plan": "p", "commands": [{"keystrokes": "echo \ud800 done\n", "duration": 0.5}]}
        replies = [{"text": json.dumps(keys)}, {"text": json.dumps(done)}, {"text": json.dumps(done)}]
    server = serve({"replies": replies})
    transcript = tmp_path / "t.jsonl"
    args = base_args(server, tmp_path / "w", "--protocol", protocol, "--transcript", str(transcript), "go")
    run = run_cli(args, tmp_path, env=env)
    assert run.returncode == 0, run.stderr
    events = events_of(transcript)
    assert events[-1].type == "thread.completed" and events[-1].status == "done"
    outputs = [
        e.item.aggregated_output for e in events if e.type == "item.completed" and e.item.type == "command_execution"
    ]
    assert any("done" in output for output in outputs)


def test_run_names_its_transcript_at_the_end_and_in_thread_completed(serve, tmp_path):
    server = serve({"replies": HELLO})
    run = run_cli(base_args(server, tmp_path / "w", "make hello"), tmp_path)
    assert run.returncode == 0, run.stderr
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("transcript: ") and "oc-repl show " in last
    path = Path(last.split()[1])
    completed = json.loads(path.read_text().splitlines()[-1])
    assert completed["type"] == "thread.completed" and completed["transcript"] == str(path)


def test_the_header_does_not_wrap_off_a_terminal(serve, tmp_path):
    server = serve({"replies": HELLO})
    deep = tmp_path / ("a-rather-long-directory-name-" * 4) / "w"
    run = run_cli(base_args(server, deep, "make hello"), tmp_path)
    header = next(line for line in run.stderr.splitlines() if line.startswith("oc-repl · "))
    assert str(deep) in header and "cwd " in header


def test_show_refuses_a_file_that_is_no_transcript_and_shows_the_task(serve, tmp_path):
    notes = tmp_path / "README.md"
    notes.write_text("# a readme\n\nnot events\n")
    bad = run_cli(["show", str(notes)], tmp_path)
    assert bad.returncode == 2 and bad.stderr.count("\n") <= 3 and "not an oc-repl transcript" in bad.stderr
    server = serve({"replies": HELLO})
    transcript = tmp_path / "t.jsonl"
    run_cli(base_args(server, tmp_path / "w", "--transcript", str(transcript), "make hello please"), tmp_path)
    shown = run_cli(["show", str(transcript)], tmp_path)
    assert shown.returncode == 0 and "make hello please" in shown.stdout


def test_a_missing_config_file_and_an_empty_verify_file_are_usage_errors(serve, tmp_path):
    server = serve({"replies": HELLO})
    missing = run_cli(base_args(server, tmp_path / "w", "--config", str(tmp_path / "no.toml"), "hi"), tmp_path)
    assert missing.returncode == 2 and "no.toml" in missing.stderr
    empty = tmp_path / "check.sh"
    empty.write_text("  \n")
    run = run_cli(base_args(server, tmp_path / "w", "--verify-file", str(empty), "hi"), tmp_path)
    assert run.returncode == 2 and "empty" in run.stderr
    assert server.chat_requests() == []


def test_a_bad_sandbox_spec_is_refused_at_start(tmp_path):
    run = run_cli(["--sandbox", "nope", "run", "hi"], tmp_path)
    assert run.returncode == 2 and "scheme:target" in run.stderr


def test_a_model_list_that_is_an_html_page_is_a_server_error(serve, tmp_path):
    """A proxy's error page where /v1/models should be: exit 5 naming what came back, not a crash (exit 70)."""
    page = b"<html><head><title>502 Bad Gateway</title></head><body><h1>502 Bad Gateway</h1></body></html>"
    server = serve({"models_body": page, "replies": HELLO})
    args = [a for a in base_args(server, tmp_path / "w", "make hello")]
    if "--model" in args:  # the model is left for the server's list to name
        at = args.index("--model")
        del args[at : at + 2]
    run = run_cli(args, tmp_path)
    assert run.returncode == 5, run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    assert "the model list is not JSON" in run.stderr and "Pass --model NAME" in run.stderr, run.stderr
    assert server.chat_requests() == []


def test_thread_completed_counts_the_sandbox_calls_and_their_time(serve, tmp_path):
    server = serve({"replies": [exec_call("echo one"), exec_call("echo two"), answer("done")]})
    transcript = tmp_path / "t.jsonl"
    run = run_cli(base_args(server, tmp_path / "w", "--transcript", str(transcript), "go"), tmp_path)
    assert run.returncode == 0, run.stderr
    completed = events_of(transcript)[-1]
    # each command started is a call (a local command's start: its run is waited for outside the call)
    assert completed.type == "thread.completed" and completed.sandbox_calls >= 2
    assert 0 < completed.sandbox_seconds < 30


def _events(proc: subprocess.CompletedProcess) -> list[dict]:
    return [json.loads(line) for line in proc.stdout.splitlines()]


def test_an_agent_timeout_spent_waiting_on_the_server_is_the_servers_not_the_models(serve, tmp_path):
    # the server queues the second request longer than the agent has: the model used little of its time itself
    server = serve({"replies": [exec_call("echo quick"), {**answer("done"), "delay": 30}]})
    proc = run_cli(base_args(server, tmp_path / "w", "--json", "--timeout", "4", "--model", "m", "go"), tmp_path)
    assert proc.returncode == 5, proc.stderr
    events = _events(proc)
    assert events[-1]["status"] == "server_timeout"
    (said,) = [e for e in events if e["type"] == "error" and "waiting on the model server" in e["message"]]
    assert "--idle-timeout" in said["hint"]
    control = serve({"replies": [exec_call("sleep 30"), answer("done")]})  # the same budget spent by the command
    proc = run_cli(base_args(control, tmp_path / "w2", "--json", "--timeout", "4", "--model", "m", "go"), tmp_path)
    assert proc.returncode == 7 and _events(proc)[-1]["status"] == "agent_timeout"
