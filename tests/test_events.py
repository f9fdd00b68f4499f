"""The event contract: schema `oc-repl/1`, its JSON Schema file, and transcripts that follow it."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema

import oc_repl
from oc_repl import event_read
from oc_repl import events as ev
from tests.cli.test_cli import HELLO, base_args
from tests.conftest import run_cli

SCHEMA_FILE = Path(oc_repl.__file__).parent / "events.schema.json"


def test_the_schema_file_is_the_schema_the_code_defines():
    assert json.loads(SCHEMA_FILE.read_text()) == event_read.json_schema(), "regenerate: python -m oc_repl.event_read"


def test_a_real_transcript_validates_against_the_schema_file(serve, tmp_path):
    server = serve({"replies": HELLO})
    transcript = tmp_path / "t.jsonl"
    run = run_cli(
        base_args(server, tmp_path / "w", "--transcript", str(transcript), "--verify", "true", "go"), tmp_path
    )
    assert run.returncode == 0, run.stderr
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text()))
    lines = [json.loads(line) for line in transcript.read_text().splitlines()]
    for line in lines:
        validator.validate(line)
    assert lines[0]["type"] == "thread.started" and lines[0]["schema"] == ev.SCHEMA
    assert {line["type"] for line in lines} >= {"turn.started", "item.completed", "turn.completed", "verify.completed"}
    assert all(isinstance(line["ts"], float) for line in lines)


def test_codex_shapes_of_the_shared_events():
    """Where oc-repl and `codex exec --json` share an event, Codex's own fields are there with Codex's meaning."""
    failed = ev.to_dict(ev.TurnFailed(turn=2, error=ev.ErrorInfo(message="boom")))
    assert failed["type"] == "turn.failed" and failed["error"] == {"message": "boom"}
    done = ev.to_dict(ev.TurnCompleted(turn=1, usage=ev.UsageInfo(input_tokens=3, output_tokens=4)))
    assert done["usage"] == {"input_tokens": 3, "cached_input_tokens": 0, "output_tokens": 4}
    item = ev.to_dict(ev.ItemCompleted(item=ev.CommandExecution(id="i", command="ls", status="declined")))["item"]
    assert {"id", "type", "command", "aggregated_output", "exit_code", "status"} <= set(item)


def test_characters_that_break_lines_for_splitlines_stay_inside_one_line():
    text = "a\x85b\u2028c\u2029d\x1ce\x0bf"  # what a model may write; str.splitlines breaks at each of them
    line = ev.to_json(ev.ItemCompleted(item=ev.AgentMessage(id="x", text=text)))
    assert line.splitlines() == [line]
    assert event_read.parse_event(line).item.text == text


def test_a_lone_surrogate_still_makes_one_valid_line():
    line = ev.to_json(ev.ItemCompleted(item=ev.AgentMessage(id="x", text="echo \ud800 é")))
    line.encode("utf-8")  # writable as UTF-8
    assert event_read.parse_event(line).item.text == "echo \ud800 é"
