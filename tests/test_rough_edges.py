"""Issue 11's rough edges of `run`, `show` and the settings, each reproduced and pinned here."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.test_cli import HELLO, base_args
from tests.conftest import run_cli


def test_11_5_run_names_its_transcript_at_the_end_and_in_thread_completed(serve, tmp_path):
    server = serve({"replies": HELLO})
    run = run_cli(base_args(server, tmp_path / "w", "make hello"), tmp_path)
    assert run.returncode == 0, run.stderr
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("transcript: ") and "oc-repl show " in last
    path = Path(last.split()[1])
    completed = json.loads(path.read_text().splitlines()[-1])
    assert completed["type"] == "thread.completed" and completed["transcript"] == str(path)


def test_11_5_the_header_does_not_wrap_off_a_terminal(serve, tmp_path):
    server = serve({"replies": HELLO})
    deep = tmp_path / ("a-rather-long-directory-name-" * 4) / "w"
    run = run_cli(base_args(server, deep, "make hello"), tmp_path)
    header = next(line for line in run.stderr.splitlines() if line.startswith("oc-repl · "))
    assert str(deep) in header and "cwd " in header


def test_11_5_show_refuses_a_file_that_is_no_transcript_and_shows_the_task(serve, tmp_path):
    notes = tmp_path / "README.md"
    notes.write_text("# a readme\n\nnot events\n")
    bad = run_cli(["show", str(notes)], tmp_path)
    assert bad.returncode == 2 and bad.stderr.count("\n") <= 3 and "not an oc-repl transcript" in bad.stderr
    server = serve({"replies": HELLO})
    transcript = tmp_path / "t.jsonl"
    run_cli(base_args(server, tmp_path / "w", "--transcript", str(transcript), "make hello please"), tmp_path)
    shown = run_cli(["show", str(transcript)], tmp_path)
    assert shown.returncode == 0 and "make hello please" in shown.stderr


def test_11_5_a_missing_config_file_and_an_empty_verify_file_are_usage_errors(serve, tmp_path):
    server = serve({"replies": HELLO})
    missing = run_cli(base_args(server, tmp_path / "w", "--config", str(tmp_path / "no.toml"), "hi"), tmp_path)
    assert missing.returncode == 2 and "no.toml" in missing.stderr
    empty = tmp_path / "check.sh"
    empty.write_text("  \n")
    run = run_cli(base_args(server, tmp_path / "w", "--verify-file", str(empty), "hi"), tmp_path)
    assert run.returncode == 2 and "empty" in run.stderr
    assert server.chat_requests() == []


def test_11_5_a_bad_sandbox_spec_is_refused_at_start(tmp_path):
    run = run_cli(["--sandbox", "nope", "run", "hi"], tmp_path)
    assert run.returncode == 2 and "scheme:target" in run.stderr


def test_11_5_a_model_list_that_is_an_html_page_is_a_server_error(serve, tmp_path):
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
