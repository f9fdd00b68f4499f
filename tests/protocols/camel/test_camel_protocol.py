"""camel-terminal-toolkit as a protocol: history modes, request options, parse errors, events and assets."""

from __future__ import annotations

import hashlib
import json

import pytest

from oc_repl.errors import ParseErrorLimit
from oc_repl.events import CommandExecution, FileChange, ItemCompleted, ItemStarted, ParseError
from oc_repl.protocols import create, data_dir
from oc_repl.protocols.camel.protocol import CamelProtocol, serialise_tools, tool_responses
from oc_repl.sandbox.local import LocalSandbox
from oc_repl.types import Reply, Task, ToolCall
from tests.protocols.camel.test_camel_tools import A, M, N, call, own_directories_fixture, sandbox_fixture  # noqa: F401 (fixtures)

# --- argument errors ----------------------------------------------------------------------------------------------


def _type_error(tool: str, message: str) -> str:
    return A.render("tool_error", name=tool, type="TypeError", message=message)


@pytest.mark.parametrize(
    ("name", "arguments", "message"),
    [
        ("x", {}, A.render("unknown_tool", name="x")),
        (
            "shell_exec",
            {"id": "s"},
            _type_error("shell_exec", M.render("typeerror.missing_one", tool="shell_exec", names="'command'")),
        ),
        (
            "shell_write_content_to_file",
            {},
            _type_error(
                "shell_write_content_to_file",
                M.render(
                    "typeerror.missing_many",
                    tool="shell_write_content_to_file",
                    count=2,
                    names="'content' and 'file_path'",
                ),
            ),
        ),
        (
            "shell_view",
            {},
            _type_error("shell_view", M.render("typeerror.missing_one", tool="shell_view", names="'id'")),
        ),
        (
            "shell_view",
            {"id": "s", "x": 1},
            _type_error("shell_view", M.render("typeerror.unexpected", tool="shell_view", name="x")),
        ),
        (
            "shell_exec",
            {"id": "s", "command": "ls", "block": "yes"},
            _type_error(
                "shell_exec",
                N.render("wrong_type", tool="shell_exec", name="block", expected="boolean or null", got="string"),
            ),
        ),
        (
            "shell_exec",
            {"id": 1, "command": "ls"},
            _type_error(
                "shell_exec", N.render("wrong_type", tool="shell_exec", name="id", expected="string", got="number")
            ),
        ),
    ],
)
def test_bad_calls_become_tool_errors(sandbox: LocalSandbox, name: str, arguments: dict, message: str):
    protocol = started(CamelProtocol())
    events = Recorder()
    protocol.step(Reply(tool_calls=[call(name, "c", **arguments)]), sandbox, events)
    assert protocol.request().messages[-1]["content"] == f"<tool_response>\n{message}\n</tool_response>"
    assert events[-1].item.status == "failed"


# --- the protocol -------------------------------------------------------------------------------------------------


class Recorder(list):
    def __call__(self, event) -> None:
        self.append(event)


def parse_errors(events: list) -> list[ParseError]:
    """The replies the protocol could not read, as it told the loop's listeners."""
    return [e.item for e in events if isinstance(e, ItemCompleted) and isinstance(e.item, ParseError)]


def started(protocol: CamelProtocol) -> CamelProtocol:
    protocol.start(Task(name="demo", instruction="Say hi."))
    return protocol


def two_calls() -> list[ToolCall]:
    return [
        call("shell_exec", "c1", id="s", command="printf one", block=True, timeout=None),
        call("shell_exec", "c2", id="s", command="printf two", block=True, timeout=None),
    ]


SYSTEM = (data_dir("camel-terminal-toolkit") / "system.txt").read_text(encoding="utf-8")
TASK = {"role": "user", "content": "Task name:demo\nTask instruction: Say hi."}


def test_training_history_is_one_user_message_of_tool_responses(sandbox: LocalSandbox):
    protocol = started(CamelProtocol())
    assert protocol.request().messages == [{"role": "system", "content": SYSTEM}, TASK]
    protocol.step(Reply(content="thinking out loud", tool_calls=two_calls()), sandbox, Recorder())
    messages = protocol.request().messages
    assert messages[:2] == [{"role": "system", "content": SYSTEM}, TASK]
    assert messages[2] == {
        "role": "user",
        "content": "<tool_response>\none\n</tool_response>\n<tool_response>\ntwo\n</tool_response>",
    }
    assert len(messages) == 3
    protocol.step(Reply(tool_calls=[call("shell_exec", "c3", id="s", command="printf three")]), sandbox, Recorder())
    assert protocol.request().messages[2]["content"].endswith("<tool_response>\nthree\n</tool_response>")
    assert len(protocol.request().messages) == 3


def test_camel_0_2_85_history_is_one_call_per_assistant_message(sandbox: LocalSandbox):
    protocol = started(CamelProtocol(history="camel-0.2.85"))
    protocol.step(Reply(content="ignored text", tool_calls=two_calls()), sandbox, Recorder())
    args = json.dumps({"id": "s", "command": "printf one", "block": True, "timeout": None})
    assert protocol.request().messages[2:] == [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "shell_exec", "arguments": args}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "one"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "shell_exec", "arguments": args.replace("one", "two")},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c2", "content": "two"},
    ]


def test_full_history_keeps_the_assistant_turn(sandbox: LocalSandbox):
    protocol = started(CamelProtocol(history="full"))
    protocol.step(Reply(content="Let me look.", tool_calls=two_calls()), sandbox, Recorder())
    messages = protocol.request().messages[2:]
    assert messages[0]["role"] == "assistant" and messages[0]["content"] == "Let me look."
    assert [c["id"] for c in messages[0]["tool_calls"]] == ["c1", "c2"]
    assert messages[1:] == [
        {"role": "tool", "tool_call_id": "c1", "content": "one"},
        {"role": "tool", "tool_call_id": "c2", "content": "two"},
    ]
    protocol.step(Reply(content="oops", malformed_calls=['{"name": "shell_exec", ']), sandbox, Recorder())
    tail = protocol.request().messages[-2:]
    assert tail[0] == {"role": "assistant", "content": "oops"}
    assert tail[1]["role"] == "user" and tail[1]["content"].startswith("<tool_response>\n[TOOL_ERROR]")


def test_request_options_and_done(sandbox: LocalSandbox):
    protocol = started(create("camel-terminal-toolkit"))
    request = protocol.request()
    assert request.options["tool_choice"] == "auto"
    assert [t["function"]["name"] for t in request.options["tools"]] == [
        "shell_exec",
        "shell_view",
        "shell_write_to_process",
        "shell_write_content_to_file",
    ]
    events = Recorder()
    step = protocol.step(Reply(content="All done."), sandbox, events)
    assert step.done and step.final_answer == "All done." and not parse_errors(events)
    protocol.continue_with(Task(name="more", instruction="And again."))
    assert protocol.request().messages[-2:] == [
        {"role": "assistant", "content": "All done."},
        {"role": "user", "content": "Task name:more\nTask instruction: And again."},
    ]


def test_parse_errors_are_fed_back_and_the_third_stops(sandbox: LocalSandbox):
    protocol = started(CamelProtocol())
    events = Recorder()
    body = '{"name": "shell_exec", "arguments": {"id": }}'
    step = protocol.step(Reply(malformed_calls=[f"<tool_call>\n{body}\n</tool_call>"]), sandbox, events)
    assert parse_errors(events) and not step.done
    feedback = protocol.request().messages[-1]["content"]
    error = "Expecting value: line 1 column 44 (char 43)"
    assert feedback == f"<tool_response>\n{A.render('parse_error', error=error, content=body)}\n</tool_response>"
    assert isinstance(events[0], ItemCompleted) and isinstance(events[0].item, ParseError)
    marker = sandbox.root / "ran"
    truncated = Reply(
        truncated=True, cut_off=True, tool_calls=[call("shell_exec", "c", id="s", command=f"touch {marker}")]
    )
    cut = Recorder()
    assert not protocol.step(truncated, sandbox, cut).done and parse_errors(cut)
    assert not marker.exists()  # nothing of a cut reply runs
    assert protocol.request().messages[-1]["content"].endswith(f"{N.render('cut_off')}\n</tool_response>")
    with pytest.raises(ParseErrorLimit):
        protocol.step(Reply(malformed_calls=["{bad"]), sandbox, Recorder())


def test_unknown_tool_is_answered_not_dropped(sandbox: LocalSandbox):
    protocol = started(CamelProtocol())
    events = Recorder()
    step = protocol.step(Reply(tool_calls=[call("shell_kill_process", "k", id="s")]), sandbox, events)
    assert not step.done
    assert protocol.request().messages[-1]["content"] == (
        "<tool_response>\n[TOOL_ERROR] unknown tool: shell_kill_process\n</tool_response>"
    )
    assert events[-1].item.status == "failed"


def test_events_and_fingerprints(sandbox: LocalSandbox):
    protocol = started(CamelProtocol())
    events = Recorder()
    calls = [
        call("shell_exec", "c1", id="s", command="printf one"),
        call("shell_write_content_to_file", "c2", content="x", file_path="f.txt"),
    ]
    first = protocol.step(Reply(tool_calls=calls), sandbox, events)
    kinds = [(type(e).__name__, type(e.item).__name__, e.item.status) for e in events]
    assert kinds == [
        ("ItemStarted", "CommandExecution", "in_progress"),
        ("ItemCompleted", "CommandExecution", "completed"),
        ("ItemStarted", "FileChange", "in_progress"),
        ("ItemCompleted", "FileChange", "completed"),
    ]
    assert isinstance(events[0], ItemStarted) and events[0].item.command == "printf one"
    done = events[1].item
    assert isinstance(done, CommandExecution) and done.aggregated_output == "one" and done.exit_code == 0
    change = events[3].item
    assert (
        isinstance(change, FileChange)
        and change.changes[0].kind == "add"
        and change.changes[0].path == f"{sandbox.root}/f.txt"
    )
    again = protocol.step(Reply(tool_calls=calls), sandbox, Recorder())
    other = protocol.step(Reply(tool_calls=calls[:1]), sandbox, Recorder())
    assert first.fingerprint == again.fingerprint != other.fingerprint


def test_assets_are_the_exact_bytes_sent():
    protocol = CamelProtocol()
    folder = data_dir("camel-terminal-toolkit")
    assets = {asset.name: asset for asset in protocol.assets()}
    assert list(assets) == ["system.txt", "tools.json", "toolkit.toml", "agent.toml", "notices.toml"]
    tools = assets["tools.json"]
    assert tools.sha256 == hashlib.sha256(serialise_tools(protocol.request().options["tools"])).hexdigest()
    manifest = (folder / "manifest.toml").read_text()
    assert 'kind = "camel"' in manifest
    for name, asset in assets.items():
        assert asset.source == "built-in"
        assert asset.sha256 == hashlib.sha256((folder / name).read_bytes()).hexdigest()
        assert f'sha256 = "{asset.sha256}"' in manifest


def test_system_prompt_shape():
    assert SYSTEM.endswith(" /no_think")
    assert 5300 < len(SYSTEM) < 6300
    assert "Linux (in Docker)" in SYSTEM and "x86_64" in SYSTEM and "Docker container" in SYSTEM
    assert "<operating_environment>" in SYSTEM and "</operating_environment>" not in SYSTEM
    for tag in ("role", "mandatory_instructions", "capabilities", "philosophy", "terminal_tips"):
        assert f"<{tag}>" in SYSTEM and f"</{tag}>" in SYSTEM
    for needle in ("shell_write_content_to_file", "shell_kill_process", "pwd", "ls -la", "600 tokens", "block=False"):
        assert needle in SYSTEM


def test_tool_schemas_are_strict():
    tools = CamelProtocol().request().options["tools"]
    expected = {
        "shell_exec": {
            "id": "string",
            "command": "string",
            "block": ["boolean", "null"],
            "timeout": ["number", "null"],
        },
        "shell_view": {"id": "string"},
        "shell_write_to_process": {"id": "string", "command": "string"},
        "shell_write_content_to_file": {"content": "string", "file_path": "string"},
    }
    assert [t["function"]["name"] for t in tools] == list(expected)
    for tool in tools:
        assert tool["type"] == "function"
        function = tool["function"]
        assert function["strict"] is True and function["description"]
        params = function["parameters"]
        assert params["type"] == "object" and params["additionalProperties"] is False
        assert {k: v["type"] for k, v in params["properties"].items()} == expected[function["name"]]
        assert params["required"] == list(expected[function["name"]])
        assert all(v["description"] for v in params["properties"].values())


def test_a_reply_with_several_bad_blocks_is_one_strike_and_held_back_calls_are_named(sandbox: LocalSandbox):
    protocol = started(CamelProtocol())
    held_back = '<tool_call>\n{"name": "shell_exec", "arguments": {"id": "a", "command": "ls"}}\n</tool_call>'
    broken = '<tool_call>\n{"name": "shell_exec", "arguments": {"id": \n</tool_call>'
    for _ in range(2):
        protocol.step(Reply(truncated=True, malformed_calls=[held_back, broken]), sandbox, Recorder())
    feedback = protocol.request().messages[-1]["content"]
    error = "Expecting value: line 1 column 43 (char 42)"  # of the JSON inside: the tags are not the error
    content = '{"name": "shell_exec", "arguments": {"id":'
    answers = [N.render("held_back", name="shell_exec"), A.render("parse_error", error=error, content=content)]
    assert feedback.endswith(tool_responses(answers))
    with pytest.raises(ParseErrorLimit):
        protocol.step(Reply(malformed_calls=[broken]), sandbox, Recorder())
