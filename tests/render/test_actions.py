"""What a person reads is what happened: an action the sandbox refused or the person declined is marked so, with the
reason the model was told, live, in `oc-repl show` and on the bench's transcript page; a write's kind is the same when
it starts and when it ends."""

from __future__ import annotations

import json

from tests.conftest import run_cli
from tests.docker_support import answer, write_call


def _items(transcript, event_type):
    lines = [json.loads(line) for line in transcript.read_text().splitlines()]
    return [e["item"] for e in lines if e["type"] == event_type and e["item"]["type"] == "file_change"]


def test_a_refused_write_is_shown_as_failed_with_its_reason_everywhere(serve, tmp_path):
    from oc_repl.bench.html import render_transcript

    server = serve({"replies": [write_call("x", "/test.txt"), answer("done")]})
    transcript = tmp_path / "t.jsonl"
    args = ["run", "--api-base", server.url, "--sandbox", f"local:{tmp_path / 'w'}", "--yes"]
    proc = run_cli([*args, "--transcript", str(transcript), "write it"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    [completed] = _items(transcript, "item.completed")
    assert completed["status"] == "failed" and completed["reason"]
    reason_start = completed["reason"].splitlines()[0][:40]
    shown = run_cli(["show", str(transcript)], tmp_path).stdout
    page = tmp_path / "transcript.html"
    render_transcript(transcript, page)
    for text in (proc.stderr, shown, page.read_text()):
        assert "✎" not in text
        assert "/test.txt — failed, nothing written" in text
        assert reason_start.replace("'", "&#x27;").replace('"', "&quot;") in text or reason_start in text


def test_a_declined_command_is_marked_declined(tmp_path):
    from rich.console import Console

    from oc_repl.events import CommandExecution, ItemCompleted
    from oc_repl.render.human import HumanRenderer

    console = Console(record=True, width=200, highlight=False)
    item = CommandExecution(id="i", tool="shell_exec", command="rm -rf x", aggregated_output="declined by the user")
    item.status = "declined"
    HumanRenderer(console)(ItemCompleted(item=item))
    assert "shell_exec: rm -rf x — declined" in console.export_text()


def test_a_write_names_the_same_kind_when_it_starts_and_when_it_ends(serve, tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    (work / "old.txt").write_text("before")
    server = serve({"replies": [write_call("x", "new.txt"), write_call("y", "old.txt"), answer("done")]})
    transcript = tmp_path / "t.jsonl"
    args = ["run", "--api-base", server.url, "--sandbox", f"local:{work}", "--yes", "--transcript", str(transcript)]
    proc = run_cli([*args, "write them"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    started = [i["changes"][0]["kind"] for i in _items(transcript, "item.started")]
    completed = [i["changes"][0]["kind"] for i in _items(transcript, "item.completed")]
    assert started == completed == ["add", "update"]
    lines = proc.stderr.splitlines()
    assert any(line.startswith("✎ add ") and line.endswith("/new.txt") for line in lines)
    assert any(line.startswith("✎ update ") and line.endswith("/old.txt") for line in lines)
