"""The CLI end to end as a subprocess, against scripted loopback servers, on a local sandbox."""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from oc_repl.cli import LazyGroup
from oc_repl.event_read import parse_event
from tests.conftest import cli_env, default_sigint, read_jsonl, run_cli
from tests.fakeserver import call_text


def exec_call(command: str, **extra) -> dict:
    return {"text": call_text("shell_exec", {"id": "s1", "command": command, "block": True, "timeout": None, **extra})}


def answer(text: str) -> dict:
    return {"text": f"<think>\n\n</think>\n\n{text}"}


def base_args(server, work: Path, *more: str) -> list[str]:
    return ["run", "--api-base", server.url, "--sandbox", f"local:{work}", "--yes", "--retries", "1", *more]


HELLO = [
    {"text": call_text("shell_write_content_to_file", {"content": "Hello\n", "file_path": "hello.txt"})},
    answer("Created hello.txt containing Hello."),
]


@pytest.mark.parametrize("stream", ["--stream", "--no-stream"])
@pytest.mark.parametrize("flavour", ["sglang", "vllm", "noparser"])
def test_top_command_creates_file_and_verifies(serve, tmp_path, flavour, stream):
    server = serve({"flavour": flavour, "replies": HELLO})
    work = tmp_path / "work"
    proc = run_cli(
        base_args(server, work, stream, "--verify", "test -f hello.txt", "Create hello.txt containing Hello"), tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "Created hello.txt containing Hello.\n"
    assert (work / "hello.txt").read_text() == "Hello\n"
    assert "PASS" in proc.stderr and "Traceback" not in proc.stderr
    first = server.chat_requests()[0]["body"]
    assert first["tool_choice"] == "auto" and [t["function"]["name"] for t in first["tools"]] == [
        "shell_exec",
        "shell_view",
        "shell_write_to_process",
        "shell_write_content_to_file",
    ]
    assert first["messages"][1] == {
        "role": "user",
        "content": "Task name:create-hello-txt-containing\nTask instruction: Create hello.txt containing Hello",
    }
    assert first.get("stream", False) is (stream == "--stream")


def test_json_stream_is_one_event_per_line_ending_in_thread_completed(serve, tmp_path):
    server = serve({"flavour": "vllm", "replies": HELLO})
    proc = run_cli(base_args(server, tmp_path / "w", "--json", "--verify", "test -f hello.txt", "make hello"), tmp_path)
    assert proc.returncode == 0, proc.stderr
    events = [parse_event(line) for line in proc.stdout.splitlines()]
    types = [e.type for e in events]
    assert types[0] == "thread.started" and types[-1] == "thread.completed"
    assert events[-1].exit_code == 0 and events[-1].status == "verified"
    assert "verify.completed" in types and "request.sent" not in types
    commands = [
        e.item for e in events if e.type == "item.completed" and e.item.type in ("command_execution", "file_change")
    ]
    assert commands, types
    completed = [e.item.id for e in events if e.type == "item.completed"]
    assert len(completed) == len(set(completed))  # one id, one item: renderers key on them
    change = next(e.item for e in events if e.type == "item.completed" and e.item.type == "file_change")
    assert change.changes[0].path.endswith("hello.txt") and change.changes[0].kind == "add"  # codex's shape
    delta = json.loads(next(line for line in proc.stdout.splitlines() if '"item.updated"' in line))
    assert set(delta) == {"type", "ts", "item", "delta"} and set(delta["item"]) == {"id", "type"}


# The exit codes as a shell sees them, from a process of its own (the other tests run the CLI in this one).


def test_verifier_failure_after_done_exits_1(serve, tmp_path):
    server = serve({"replies": [answer("All done.")]})
    proc = run_cli(
        base_args(server, tmp_path / "w", "--verify", "test -f missing.txt", "make a file"), tmp_path, process=True
    )
    assert proc.returncode == 1, proc.stderr
    assert "FAIL" in proc.stderr and proc.stdout == "All done.\n"


def test_turn_cap_exits_3_and_verifier_still_decides(serve, tmp_path):
    replies = [exec_call(f"echo step{i}") for i in range(5)]
    server = serve({"replies": replies})
    proc = run_cli(base_args(server, tmp_path / "w", "--max-turns", "3", "count"), tmp_path, process=True)
    assert proc.returncode == 3, proc.stderr
    assert len(server.chat_requests()) == 3
    server2 = serve({"replies": replies})
    proc = run_cli(
        base_args(server2, tmp_path / "w", "--max-turns", "2", "--verify", "true", "count"), tmp_path, process=True
    )
    assert proc.returncode == 0, proc.stderr


def test_loop_detection_exits_4(serve, tmp_path):
    server = serve({"replies": [exec_call("ls")], "cycle": True})
    proc = run_cli(base_args(server, tmp_path / "w", "--json", "list"), tmp_path, process=True)
    assert proc.returncode == 4, proc.stderr
    last = json.loads(proc.stdout.splitlines()[-1])
    assert last["status"] == "loop" and last["turns"] == 3


def test_parse_error_limit_exits_4(serve, tmp_path):
    bad = {
        "text": '<think>\n\n</think>\n\n<tool_call>\n{"name": "shell_exec", "arguments": {"id": "s1",}\n</tool_call>'
    }
    server = serve({"replies": [bad], "cycle": True})
    proc = run_cli(base_args(server, tmp_path / "w", "--json", "list"), tmp_path, process=True)
    assert proc.returncode == 4, proc.stderr
    events = [parse_event(line) for line in proc.stdout.splitlines()]
    assert events[-1].status == "parse_errors" and events[-1].turns == 3
    assert sum(1 for e in events if e.type == "item.completed" and e.item.type == "parse_error") == 3
    # the model was told about each parse error before the next turn
    assert "<tool_response>" in server.chat_requests()[-1]["body"]["messages"][-1]["content"]


def test_server_down_is_a_plain_message_and_exit_5(tmp_path):
    proc = run_cli(
        [
            "run",
            "--api-base",
            "http://127.0.0.1:9/v1",
            "--sandbox",
            f"local:{tmp_path}",
            "--yes",
            "--retries",
            "0",
            "hello",
        ],
        tmp_path,
        process=True,
    )
    assert proc.returncode == 5
    assert "Traceback" not in proc.stderr
    assert "127.0.0.1:9" in proc.stderr and "--tool-call-parser" in proc.stderr


def test_server_500s_exit_5_after_bounded_retries(serve, tmp_path):
    server = serve({"replies": [{"http_error": 500}], "cycle": True})
    proc = run_cli(base_args(server, tmp_path / "w", "hello"), tmp_path, process=True)
    assert proc.returncode == 5, proc.stderr
    chat = server.chat_requests()
    assert len(chat) == 2  # one try and --retries 1
    assert "retrying" in proc.stderr and "Traceback" not in proc.stderr


def test_no_consent_without_tty_is_a_usage_error(serve, tmp_path):
    server = serve({"replies": HELLO})
    proc = run_cli(["run", "--api-base", server.url, "--sandbox", f"local:{tmp_path}", "hello"], tmp_path, process=True)
    assert proc.returncode == 2
    assert "--yes" in proc.stderr
    assert not server.chat_requests()


def test_transcript_records_exact_requests_hashes_and_no_key(serve, tmp_path):
    server = serve({"replies": HELLO})
    transcript = tmp_path / "t.jsonl"
    secret = "sk-test-0123456789abcdef"
    proc = run_cli(
        base_args(server, tmp_path / "w", "--api-key", secret, "--transcript", str(transcript), "hello"), tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert secret not in transcript.read_text()
    events = read_jsonl(transcript)
    started = events[0]
    sent = [e for e in events if e["type"] == "request.sent"]
    assert len(sent) == 2 and len([e for e in events if e["type"] == "response.received"]) == 2
    system = sent[0]["request"]["messages"][0]
    assert system["role"] == "system" and system["content"].endswith(" /no_think")
    hashes = {a["name"]: a["sha256"] for a in started["assets"]}
    assert hashlib.sha256(system["content"].encode()).hexdigest() in hashes.values()
    tools_bytes = "\n".join(json.dumps(t) for t in sent[0]["request"]["tools"]).encode()
    assert hashlib.sha256(tools_bytes).hexdigest() in hashes.values()
    # what was recorded is what the server received
    assert sent[0]["request"]["messages"] == server.chat_requests()[0]["body"]["messages"]
    assert sent[0]["request"]["temperature"] == server.chat_requests()[0]["body"]["temperature"]


def test_sigkill_mid_episode_leaves_a_readable_transcript(serve, tmp_path):
    server = serve({"replies": [exec_call("echo start; sleep 30", timeout=60), answer("done")]})
    transcript = tmp_path / "t.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "oc_repl", *base_args(server, tmp_path / "w", "--transcript", str(transcript), "wait")],
        env=cli_env(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if transcript.exists() and '"command_execution"' in transcript.read_text():
                break
            time.sleep(0.05)
        else:
            pytest.fail("the command never started")
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        proc.kill()
    lines = transcript.read_text().splitlines()
    assert transcript.read_text().endswith("\n")
    parsed = [parse_event(line) for line in lines]
    assert parsed[0].type == "thread.started" and any(e.type == "request.sent" for e in parsed)


def test_version_does_not_import_heavy_packages(tmp_path):
    code = (
        "import sys\nfrom oc_repl.cli import main\n"
        "try:\n    main(['--version'])\nexcept SystemExit:\n    pass\n"
        "heavy = {'openai', 'docker', 'rich', 'prompt_toolkit', 'pydantic', 'httpx', 'httpx2'}\n"
        "print(sorted(m for m, mod in sys.modules.items() if mod is not None and m.split('.')[0] in heavy))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert proc.stdout.splitlines() == ["oc-repl, version 0.1.0", "[]"], proc.stderr


def test_sigint_mid_command_exits_130_and_kills_the_command(serve, tmp_path):
    marker = "sleep 33.25"
    server = serve({"replies": [exec_call(f"echo start; {marker}", timeout=60), answer("done")]})
    transcript = tmp_path / "t.jsonl"
    args = base_args(server, tmp_path / "w", "--transcript", str(transcript), "wait")
    proc = subprocess.Popen(
        [sys.executable, "-m", "oc_repl", *args],
        env=cli_env(tmp_path),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=default_sigint,
    )
    try:
        deadline = time.monotonic() + 20
        while '"command_execution"' not in (transcript.read_text() if transcript.exists() else ""):
            assert time.monotonic() < deadline, "the command never started"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == 130
    finally:
        proc.kill()
    events = [parse_event(line) for line in transcript.read_text().splitlines()]
    assert events[-1].type == "thread.completed" and events[-1].status == "interrupted"
    assert not subprocess.run(["pgrep", "-f", marker], capture_output=True).stdout


def test_a_one_shot_run_imports_only_what_it_needs(serve, tmp_path):
    """The path from `oc-repl run` to its answer loads no validation library, docker SDK, shell or terminal emulator."""
    server = serve({"replies": [answer("ok")]})
    argv = [sys.executable, "-X", "importtime", "-m", "oc_repl", *base_args(server, tmp_path / "w", "hi")]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=cli_env(tmp_path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    loaded = {line.split("|")[-1].strip().split(".")[0] for line in proc.stderr.splitlines() if "import time:" in line}
    assert loaded.isdisjoint({"pydantic", "docker", "prompt_toolkit", "yaml", "pyte", "openai"}), loaded
    # nor the other subcommands, rich's live display and panels (a terminal's, or a command's output), or ctypes
    modules = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if "import time:" in line}
    later = {"ctypes", "rich.live", "rich.panel", "rich.spinner", *(f"oc_repl.cli.{n}" for n in LazyGroup.lazy)}
    assert modules.isdisjoint(later), modules & later
    # httpx's own command-line tool (~80 ms) stays unloaded: its import is only attempted, and fails at once
    cli = [line.split("|") for line in proc.stderr.splitlines() if line.rstrip().endswith(" httpx._main")]
    assert all(int(cumulative) < 1000 for _, cumulative, _ in cli), cli
