"""Calls a hostile (or broken) model sends that cannot run are its own mistake: the model is told, in the protocol's
own words, and the run goes on to its verifier; never a sandbox error, never a silent end of the episode."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from oc_repl import deviations
from oc_repl.client.wire import build_reply
from oc_repl.events import ParseError
from oc_repl.protocols.camel.protocol import CamelProtocol
from oc_repl.rows import Deviations
from oc_repl.sandbox.local import LocalSandbox
from oc_repl.types import Step, Task
from tests.cli.test_cli import answer, base_args
from tests.client_support import sse_chunk
from tests.conftest import read_jsonl, run_cli
from tests.docker_support import IMAGE
from tests.fakeserver import call_text
from tests.protocols.camel.test_camel_tools import A, M

DOCKER = pytest.param(f"docker-image:{IMAGE}", marks=pytest.mark.docker, id="docker")


def run_write(serve, tmp_path: Path, request: Any, sandbox: str, path: str, *more: str) -> tuple[Any, Any, Path]:
    """One shell_write_content_to_file of `path`, then a final answer; the verifier checks the workdir is whole."""
    if sandbox != "local":
        request.getfixturevalue("docker_client")  # a skip (a failure under CI=true) without a daemon
    server = serve({"replies": [write_call(path), answer("Written.")]})
    transcript = tmp_path / "t.jsonl"
    args = base_args(server, tmp_path / "w", "--transcript", str(transcript), "--verify", "test -d .", *more, "write")
    if sandbox != "local":
        args[args.index("--sandbox") + 1] = sandbox
    return run_cli(args, tmp_path), server, transcript


def write_call(path: str) -> dict:
    return {"text": call_text("shell_write_content_to_file", {"content": "x\n", "file_path": path})}


def told(server: Any) -> str:
    """What the model read after its call: the last message of the second request."""
    return server.chat_requests()[1]["body"]["messages"][-1]["content"]


@pytest.mark.parametrize("sandbox", ["local", DOCKER])
@pytest.mark.parametrize("paths", ["workdir", "root"])
@pytest.mark.parametrize(
    ("path", "error"),
    [("a\0b", "embedded null byte"), ("d\0/x", "embedded null byte"), ("\ud800x", "surrogates not allowed")],
    ids=["nul", "nul-in-a-directory", "lone-surrogate"],
)
def test_a_path_no_system_call_takes_is_answered_and_the_run_goes_on(
    serve, tmp_path, request, sandbox, paths, path, error
):
    proc, server, transcript = run_write(serve, tmp_path, request, sandbox, path, "--relative-paths", paths)
    assert proc.returncode == 0, proc.stderr
    assert read_jsonl(transcript)[-1]["status"] == "verified"
    said = told(server)
    assert error in said and said.startswith("<tool_response>\n" + M.render("file.error", file_path=path, error="")[:8])
    if sandbox == "local":
        assert sorted(p.name for p in (tmp_path / "w").iterdir()) == []  # nothing written under another name


@pytest.mark.docker
@pytest.mark.parametrize("path", ["", ".", "/workspace"])
def test_a_path_naming_a_directory_is_answered_and_the_directory_stays(serve, tmp_path, request, path):
    proc, server, _ = run_write(serve, tmp_path, request, f"docker-image:{IMAGE}", path)
    assert proc.returncode == 0, proc.stderr  # the verifier ran in the workdir: it is still a directory
    assert "[Errno 21] Is a directory" in told(server)


# --- tool calls whose arguments are empty ------------------------------------------------------------------------


def empty_arguments_reply(stream: bool) -> dict:
    call = {"id": "call_1", "type": "function", "function": {"name": "shell_exec", "arguments": ""}}
    if not stream:
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
        return {"raw_body": {"choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]}}
    first = sse_chunk({"role": "assistant", "tool_calls": [{"index": 0, **call}]})
    return {"raw_stream": [first, sse_chunk(finish="tool_calls")]}


@pytest.mark.parametrize("stream", ["--stream", "--no-stream"])
def test_a_native_call_with_empty_arguments_is_told_and_counts_as_a_parse_error(serve, tmp_path, stream):
    server = serve({"replies": [empty_arguments_reply(stream == "--stream"), answer("Then I stop.")]})
    transcript = tmp_path / "t.jsonl"
    proc = run_cli(base_args(server, tmp_path / "w", stream, "--transcript", str(transcript), "look"), tmp_path)
    assert proc.returncode == 0, proc.stderr
    events = read_jsonl(transcript)
    errors = [e["item"] for e in events if e["type"] == "item.completed" and e["item"]["type"] == "parse_error"]
    assert len(errors) == 1 and events[-1]["turns"] == 2  # the model was asked again, after being told
    said = told(server)
    assert errors[0]["feedback"] in said and '"name": "shell_exec"' in said


def camel_step(tmp_path: Path, deviations: Deviations, message: dict, finish: str) -> tuple[CamelProtocol, Step, list]:
    """One camel step on a reply the server sent as `message`, in a fresh sandbox: the protocol, its step and the
    events it emitted."""
    protocol = CamelProtocol(deviations=deviations)
    protocol.start(Task(name="t", instruction="look"))
    reply = build_reply(message, finish, None, None)
    seen: list[Any] = []
    box = LocalSandbox(tmp_path / "w")
    try:
        step = protocol.step(reply, box, seen.append)
    finally:
        protocol.close()
        box.close()
    return protocol, step, seen


def test_under_exact_empty_native_arguments_are_the_harness_parse_error(tmp_path):
    """camel-ai 0.2.90 never takes "" for {}: its json.loads("") raises. The training harness answered a call it
    could not read with its parse-error result, so --exact does the same with the call's block."""
    call = {"id": "call_1", "type": "function", "function": {"name": "shell_exec", "arguments": ""}}
    message = {"role": "assistant", "content": "", "tool_calls": [call]}
    protocol, step, seen = camel_step(tmp_path, deviations.none(), message, "tool_calls")
    assert not step.done
    (error,) = [e.item for e in seen if isinstance(e.item, ParseError)]
    block = '{"name": "shell_exec", "arguments": }'
    assert error.message == str(json_error(block))
    call_message, result = protocol.request().messages[-2:]  # the harness's own call naming the block, answered
    assert json.loads(call_message["tool_calls"][0]["function"]["arguments"])["raw_content"] == block
    assert result["content"] == A.render("parse_error", error=error.message, content=block)


def json_error(text: str) -> json.JSONDecodeError:
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        return exc
    raise AssertionError(f"{text!r} parses")


def test_a_native_call_without_arguments_runs_with_none_and_the_tool_says_what_is_missing(serve, tmp_path):
    call = {"id": "call_1", "type": "function", "function": {"name": "shell_exec", "arguments": None}}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    reply = {"raw_body": {"choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]}}
    server = serve({"replies": [reply, answer("Then I stop.")]})
    transcript = tmp_path / "t.jsonl"
    proc = run_cli(base_args(server, tmp_path / "w", "--no-stream", "--transcript", str(transcript), "look"), tmp_path)
    assert proc.returncode == 0, proc.stderr
    (ran,) = [e["item"] for e in read_jsonl(transcript) if e["type"] == "item.completed"][:1]
    assert ran["type"] == "command_execution" and ran["status"] == "failed"
    missing = M.render("typeerror.missing_many", tool=M.render("qualname", tool="shell_exec"), count=2, names="")
    assert missing.split(":")[0] in told(server) and "'id' and 'command'" in told(server)
