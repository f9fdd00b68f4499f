"""Per-action approval (the shell's `/approval ask`): every model-chosen action is asked about, in every protocol."""

from __future__ import annotations

import json
import shutil

import pytest

from oc_repl.config import validate
from oc_repl.plan import plan
from oc_repl.session import Session
from tests.fakeserver import call_text


def session_for(
    server, tmp_path, protocol: str, answers: list[str | None], asked: list[str], events: list | None = None
) -> Session:
    settings = validate(
        {"api_base": server.url, "sandbox": f"local:{tmp_path / 'w'}", "yes": True, "protocol": protocol, "retries": 0}
    )

    def ask(action: str) -> str | None:
        asked.append(action)
        return answers.pop(0) if answers else None

    return Session(plan(settings), (events.append if events is not None else lambda event: None), approve=ask)


def completed_items(events: list) -> list:
    return [e.item for e in events if e.type == "item.completed"]


def test_camel_commands_inputs_and_writes_are_asked_and_refusals_reach_the_model(serve, tmp_path):
    calls = [
        ("shell_exec", {"id": "py", "command": "python3 -i", "block": False, "timeout": None}),
        ("shell_write_to_process", {"id": "py", "command": "open('typed.txt', 'w').write('x')"}),
        ("shell_write_content_to_file", {"content": "x", "file_path": "written.txt"}),
        ("shell_exec", {"id": "s", "command": "touch refused.txt", "block": True, "timeout": None}),
    ]
    replies = [{"text": call_text(name, args)} for name, args in calls] + [{"text": "done"}]
    server = serve({"replies": replies})
    asked: list[str] = []
    session = session_for(server, tmp_path, "camel-terminal-toolkit", ["python3 -i", None, None, None], asked)
    try:
        result = session.run("do things")
    finally:
        session.close()
    assert result.status == "done"
    assert asked[0] == "python3 -i" and "open('typed.txt'" in asked[1] and "written.txt" in asked[2]
    assert asked[3] == "touch refused.txt"
    work = tmp_path / "w"
    assert not (work / "typed.txt").exists() and not (work / "written.txt").exists()
    assert not (work / "refused.txt").exists()
    last = server.chat_requests()[-1]["body"]["messages"][-1]["content"]
    assert last.count("declined") >= 3


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_terminus_keystrokes_are_asked_before_they_are_typed(serve, tmp_path):
    def reply(keys: list[str], complete: bool = False) -> dict:
        commands = [{"keystrokes": k, "duration": 0.3} for k in keys]
        return {"text": json.dumps({"analysis": "a", "plan": "p", "commands": commands, "task_complete": complete})}

    server = serve(
        {"replies": [reply(["touch refused.txt\n", "touch edited.txt\n"]), reply([], True), reply([], True)]}
    )
    asked: list[str] = []
    session = session_for(server, tmp_path, "terminus-json", [None, "touch instead.txt\n"], asked)
    try:
        result = session.run("make files")
    finally:
        session.close()
    assert result.status == "done"
    assert asked == ["touch refused.txt\n", "touch edited.txt\n"]
    work = tmp_path / "w"
    assert not (work / "refused.txt").exists() and not (work / "edited.txt").exists()
    assert (work / "instead.txt").exists()


def test_refusals_are_declined_and_edits_are_recorded_as_run(serve, tmp_path):
    calls = [
        ("shell_exec", {"id": "a", "command": "touch first.txt", "block": True, "timeout": None}),
        ("shell_exec", {"id": "b", "command": "touch second.txt", "block": True, "timeout": None}),
        ("shell_write_content_to_file", {"content": "x", "file_path": "third.txt"}),
    ]
    server = serve({"replies": [{"text": call_text(name, args)} for name, args in calls] + [{"text": "done"}]})
    asked: list[str] = []
    events: list = []
    session = session_for(server, tmp_path, "camel-terminal-toolkit", [None, "touch edited.txt", None], asked, events)
    try:
        session.run("do things")
    finally:
        session.close()
    items = completed_items(events)
    commands = [i for i in items if i.type == "command_execution"]
    assert [(i.command, i.status) for i in commands] == [
        ("touch first.txt", "declined"),
        ("touch edited.txt", "completed"),
    ]
    assert [i.status for i in items if i.type == "file_change"] == ["declined"]
    work = tmp_path / "w"
    assert (work / "edited.txt").exists() and not (work / "second.txt").exists()


def test_only_the_models_actions_are_asked_about(serve, tmp_path, monkeypatch):
    """The pty terminal starts its own shell in the sandbox: that is plumbing, never put to the person watching."""
    monkeypatch.setenv("OC_REPL_TERMINAL", "pty")
    reply = {"text": json.dumps({"analysis": "a", "plan": "p", "commands": [], "task_complete": True})}
    server = serve({"replies": [reply, reply]})
    asked: list[str] = []
    session = session_for(server, tmp_path, "terminus-json", [], asked)
    try:
        result = session.run("nothing to do")
    finally:
        session.close()
    assert result.status == "done" and asked == []


def test_an_edited_input_to_a_session_is_sent_and_recorded_as_edited(serve, tmp_path):
    calls = [
        ("shell_exec", {"id": "py", "command": "python3 -i", "block": False, "timeout": None}),
        ("shell_write_to_process", {"id": "py", "command": "print('from the model')"}),
    ]
    server = serve({"replies": [{"text": call_text(name, args)} for name, args in calls] + [{"text": "done"}]})
    events: list = []
    answers = ["python3 -i", "[input to session py] print('edited' + 'by hand')"]
    session = session_for(server, tmp_path, "camel-terminal-toolkit", answers, [], events)
    try:
        session.run("talk to python")
    finally:
        session.close()
    (sent,) = [
        i for i in completed_items(events) if i.type == "command_execution" and i.tool == "shell_write_to_process"
    ]
    assert sent.command == "print('edited' + 'by hand')" and "editedby hand" in sent.aggregated_output
