"""camel's feedback on calls it cannot read: each names what was wrong, as the model needs to hear it."""

from __future__ import annotations

import json

import pytest

from tests.cli.test_cli import answer, base_args
from tests.conftest import run_cli


@pytest.mark.parametrize(
    ("arguments", "told"),
    [
        ([1, 2], "JSON object"),
        ("ls", "JSON object"),
        ("", "JSON object"),
    ],
)
def test_camel_feedback_names_what_was_wrong_with_a_single_call(serve, tmp_path, arguments, told):
    text = '<tool_call>\n{"name": "shell_exec", "arguments": ' + json.dumps(arguments) + "}\n</tool_call>"
    server = serve({"flavour": "noparser", "replies": [{"text": text}, answer("ok")]})
    run = run_cli(base_args(server, tmp_path / "w", "go"), tmp_path)
    assert run.returncode == 0, run.stderr
    feedback = server.chat_requests()[1]["body"]["messages"][-1]["content"]
    assert told in feedback and "not run, because another" not in feedback


def test_a_nameless_or_unterminated_call_is_named_as_such(serve, tmp_path):
    nameless = '<tool_call>\n{"name": null, "arguments": {"id": "a", "command": "ls"}}\n</tool_call>'
    unterminated = '<tool_call>\n{"name": "shell_exec", "arguments": {"id": "a", "command": "ls"}}'
    server = serve({"flavour": "noparser", "replies": [{"text": nameless}, {"text": unterminated}, answer("ok")]})
    run = run_cli(base_args(server, tmp_path / "w", "go"), tmp_path)
    assert run.returncode == 0, run.stderr
    first = server.chat_requests()[1]["body"]["messages"][-1]["content"]
    second = server.chat_requests()[2]["body"]["messages"][-1]["content"]
    assert "no tool name" in first and "no closing </tool_call>" in second
    assert "not run, because another" not in first + second
