"""Issue 10's regression tests for the run as a whole: odd input never ends in an internal error, the outcome and its
exit code are right, cleanup survives signals, and a well-behaved agent is not stopped. Each test names its item."""

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
from oc_repl.errors import UsageError
from oc_repl.events import parse_event
from oc_repl.plan import plan
from oc_repl.session import Session
from tests.cli.test_cli import answer, base_args, exec_call
from tests.conftest import cli_env, default_sigint, run_cli
from tests.fakeserver import call_text


def events_of(path: Path) -> list:
    return [parse_event(line) for line in path.read_text().splitlines()]


def call(name: str, **arguments) -> dict:
    return {"text": call_text(name, arguments)}


# --- bad data ---------------------------------------------------------------------------------------------------


def test_10_4_a_brace_in_a_prompt_override_is_one_usage_error_before_any_model_call(serve, tmp_path):
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


@pytest.mark.parametrize(
    ("yaml", "why"),
    [
        ("- just\n- a list\n", "mapping"),
        ("instruction: x\nmax_agent_timeout_sec: soon\n", "max_agent_timeout_sec"),
        ("instruction: x\nmax_test_timeout_sec: -1\n", "max_test_timeout_sec"),
    ],
)
def test_10_5_a_malformed_task_yaml_is_a_usage_error(tmp_path, yaml, why):
    from oc_repl.tasks.terminal_bench import load_task_dir

    task = tmp_path / "task"
    (task / "tests").mkdir(parents=True)
    (task / "run-tests.sh").write_text("true\n")
    (task / "task.yaml").write_text(yaml)
    with pytest.raises(UsageError, match=why):
        load_task_dir(task)


@pytest.mark.parametrize(
    ("arguments", "told"),
    [
        ([1, 2], "JSON object"),
        ("ls", "JSON object"),
        ("", "JSON object"),
    ],
)
def test_10_5e_camel_feedback_names_what_was_wrong_with_a_single_call(serve, tmp_path, arguments, told):
    text = '<tool_call>\n{"name": "shell_exec", "arguments": ' + json.dumps(arguments) + "}\n</tool_call>"
    server = serve({"flavour": "noparser", "replies": [{"text": text}, answer("ok")]})
    run = run_cli(base_args(server, tmp_path / "w", "go"), tmp_path)
    assert run.returncode == 0, run.stderr
    feedback = server.chat_requests()[1]["body"]["messages"][-1]["content"]
    assert told in feedback and "not run, because another" not in feedback


def test_10_5e_a_nameless_or_unterminated_call_is_named_as_such(serve, tmp_path):
    nameless = '<tool_call>\n{"name": null, "arguments": {"id": "a", "command": "ls"}}\n</tool_call>'
    unterminated = '<tool_call>\n{"name": "shell_exec", "arguments": {"id": "a", "command": "ls"}}'
    server = serve({"flavour": "noparser", "replies": [{"text": nameless}, {"text": unterminated}, answer("ok")]})
    run = run_cli(base_args(server, tmp_path / "w", "go"), tmp_path)
    assert run.returncode == 0, run.stderr
    first = server.chat_requests()[1]["body"]["messages"][-1]["content"]
    second = server.chat_requests()[2]["body"]["messages"][-1]["content"]
    assert "no tool name" in first and "no closing </tool_call>" in second
    assert "not run, because another" not in first + second


# --- exit codes and records -------------------------------------------------------------------------------------


def test_10_6_ctrl_c_at_the_consent_prompt_is_130_and_ctrl_d_is_2(serve, tmp_path):
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


def test_10_7_a_closed_pipe_on_json_output_stops_neither_the_run_nor_the_transcript(serve, tmp_path):
    server = serve({"replies": [exec_call("echo one"), exec_call("echo two"), answer("done")]})
    transcript = tmp_path / "t.jsonl"
    args = [
        sys.executable,
        "-m",
        "oc_repl",
        *base_args(server, tmp_path / "w", "--json", "--transcript", str(transcript), "go"),
    ]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env(tmp_path))
    assert proc.stdout is not None
    proc.stdout.readline()  # `| head -n 1`: one line, then the reader is gone
    proc.stdout.close()
    assert proc.wait(60) == 0, proc.stderr.read() if proc.stderr else ""
    events = events_of(transcript)
    assert events[-1].type == "thread.completed" and events[-1].status == "done" and events[-1].turns == 3


def test_10_8_an_unwritable_transcript_is_a_usage_error(serve, tmp_path):
    server = serve({"replies": [answer("never asked")]})
    blocker = tmp_path / "file"
    blocker.write_text("")
    run = run_cli(base_args(server, tmp_path / "w", "--transcript", str(blocker / "t.jsonl"), "hi"), tmp_path)
    assert run.returncode == 2 and "transcript" in run.stderr and "Traceback" not in run.stderr
    assert server.chat_requests() == []


def test_10_9_an_internal_error_keeps_the_turns_that_ran(serve, tmp_path, monkeypatch):
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


# --- signals and cleanup ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM])
def test_10_10_sighup_and_sigterm_clean_up_like_ctrl_c(serve, tmp_path, sig):
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
def test_10_11_a_second_interrupt_during_cleanup_does_not_cut_it_short(serve, tmp_path, monkeypatch):
    server = serve({"replies": [exec_call("sleep 30")]})
    settings = validate({"api_base": server.url, "sandbox": f"local:{tmp_path / 'w'}", "yes": True, "retries": 0})
    events: list = []
    session = Session(plan(settings, "go"), events.append)
    closed = []
    original = session.close

    def slow_close() -> str:  # a second Ctrl-C arrives while cleanup is under way
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.3)
        closed.append(original())
        return closed[-1]

    monkeypatch.setattr(session, "close", slow_close)
    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
    result = session.run(close_after=True)
    assert closed == [""] and result.status == "interrupted"
    assert events[-1].type == "thread.completed" and events[-1].exit_code == 130


# --- a well-behaved agent is not stopped ------------------------------------------------------------------------


def test_10_17_polling_a_silent_background_job_is_not_a_loop(serve, tmp_path):
    views = [call("shell_view", id="job") for _ in range(5)]
    start = call("shell_exec", id="job", command="sleep 4; echo finished", block=False, timeout=None)
    server = serve({"replies": [start, *views, exec_call("sleep 4"), call("shell_view", id="job"), answer("done")]})
    run = run_cli(base_args(server, tmp_path / "w", "--max-turns", "12", "go"), tmp_path)
    assert run.returncode == 0, run.stderr


def test_10_17_the_same_finished_look_is_still_a_loop(serve, tmp_path):
    views = [call("shell_view", id="job") for _ in range(5)]
    start = call("shell_exec", id="job", command="true", block=False, timeout=None)
    server = serve({"replies": [start, exec_call("sleep 0.5"), *views, answer("done")]})
    run = run_cli(base_args(server, tmp_path / "w", "go"), tmp_path)
    assert run.returncode == 4, run.stderr


def test_10_20_the_agents_time_is_bounded_by_timeout(serve, tmp_path):
    marker = "sleep 45.5"
    server = serve({"replies": [exec_call(marker, timeout=120), answer("never")]})
    transcript = tmp_path / "t.jsonl"
    started = time.monotonic()
    run = run_cli(base_args(server, tmp_path / "w", "--timeout", "2", "--transcript", str(transcript), "go"), tmp_path)
    assert run.returncode == 7, run.stderr
    assert time.monotonic() - started < 30
    assert events_of(transcript)[-1].status == "agent_timeout"
    assert not subprocess.run(["pgrep", "-f", marker], capture_output=True).stdout


@pytest.mark.timeout(30)  # before the fix, ten thousand open tags took tens of seconds to parse
def test_10_5a_deep_nesting_and_runs_of_open_tags_parse_at_once():
    from oc_repl.protocols.templates import Templates
    from oc_repl.protocols.terminus import parse as tp

    json_m = Templates.load("terminus-json", "messages.toml", tp.JSON_SPEC)
    xml_m = Templates.load("terminus-xml", "messages.toml", tp.XML_SPEC)
    for text in ('{"analysis": ' + "[" * 1000 + "}", "[" * 10000, '{"a": ' * 5000, "{" * 10000):
        assert tp.parse_json(text, json_m).error
    for opener in ("<analysis>", "<task_complete>", "<keystrokes duration='1'>"):
        assert tp.parse_xml("<response><commands>" + opener * 10000 + "</response>", xml_m) is not None


def test_10_5a_the_plain_scans_find_what_upstreams_expressions_find():
    import random
    import re

    from oc_repl.protocols.terminus.xml_replies import _first_block, _keystrokes

    rng = random.Random(7)
    pieces = ["<keystrokes", ">", "</keystrokes>", "a", " duration='1'", "<plan>", "</plan>", "\n", "<"]
    for _ in range(5000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        assert _keystrokes(text) == re.findall(r"<keystrokes([^>]*)>(.*?)</keystrokes>", text, re.DOTALL)
        found = re.search("<plan>(.*?)</plan>", text, re.DOTALL)
        assert _first_block(text, "<plan>", "</plan>") == (found.group(1) if found else None)


@pytest.mark.parametrize("protocol", ["camel-terminal-toolkit", "terminus-json", "terminus-json-pty"])
def test_10_2_a_lone_surrogate_from_the_model_runs_and_is_recorded(serve, tmp_path, protocol, monkeypatch):
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
