from __future__ import annotations

from pathlib import Path

import pytest

from oc_repl.config import validate
from oc_repl.errors import UsageError
from oc_repl.events import TurnStarted, to_json
from oc_repl.sources import load_file
from oc_repl.tasks.verify import parse_pytest_summary
from oc_repl.transcript import TranscriptWriter, read_events

PYTEST_RA = """\
tests/test_outputs.py::test_a PASSED
============================= short test summary info ==============================
PASSED tests/test_outputs.py::test_a
FAILED tests/test_outputs.py::test_b - AssertionError: assert 1 == 2
SKIPPED [1] tests/test_outputs.py:9: no network
XFAIL tests/test_outputs.py::test_d - known
ERROR tests/test_outputs.py::test_e
========================= 1 failed, 1 passed, 1 skipped, 1 xfailed, 1 error in 0.12s ==============
"""


def test_pytest_summary_counts_passed_skipped_xfail_as_passed():
    summary = parse_pytest_summary(PYTEST_RA)
    assert summary is not None
    assert (summary.passed, summary.total) == (3, 5)
    assert summary.failed == ["tests/test_outputs.py::test_b", "tests/test_outputs.py::test_e"]


def test_no_summary_section_is_none():
    assert parse_pytest_summary("1 passed in 0.01s\n") is None


def test_config_file_profiles_and_unknown_keys(tmp_path: Path):
    cfg = tmp_path / "config.toml"
    cfg.write_text('api_base = "http://a/v1"\nmax_turns = 5\n[profiles.vllm]\napi-base = "http://b/v1"\n')
    assert load_file(cfg, None) == {"api_base": "http://a/v1", "max_turns": 5}
    assert load_file(cfg, "vllm")["api_base"] == "http://b/v1"
    with pytest.raises(UsageError, match="no profile 'nope'"):
        load_file(cfg, "nope")
    cfg.write_text("max_turn = 5\n")
    with pytest.raises(UsageError, match="unknown keys.*max_turn"):
        load_file(cfg, None)


def test_settings_validation_and_sampling_presets():
    s = validate({"sampling": "training", "temperature": 0.2})
    assert s.sampling_options() == {"temperature": 0.2, "top_p": 1.0, "top_k": -1, "max_tokens": 8192}
    with pytest.raises(UsageError, match="max_turns"):
        validate({"max_turns": 0})


def test_flag_beats_env_beats_file(tmp_path: Path):
    from tests.conftest import cli_env, run_cli

    (tmp_path / "config" / "oc-repl").mkdir(parents=True)
    (tmp_path / "config" / "oc-repl" / "config.toml").write_text('api_base = "http://127.0.0.1:7/v1"\n')
    env = cli_env(tmp_path)
    args = ["run", "--sandbox", f"local:{tmp_path}", "--yes", "--retries", "0", "x"]
    assert "127.0.0.1:7" in run_cli(args, tmp_path, env=env).stderr
    env["OPENAI_BASE_URL"] = "http://127.0.0.1:8/v1"
    assert "127.0.0.1:8" in run_cli(args, tmp_path, env=env).stderr
    assert "127.0.0.1:6" in run_cli([*args[:-1], "--api-base", "http://127.0.0.1:6/v1", "x"], tmp_path, env=env).stderr
    # a flag typed before the subcommand is still a flag: it beats the environment
    assert "127.0.0.1:5" in run_cli(["--api-base", "http://127.0.0.1:5/v1", *args], tmp_path, env=env).stderr


def test_transcript_skips_a_cut_last_line(tmp_path: Path):
    path = tmp_path / "t.jsonl"
    writer = TranscriptWriter(path)
    writer(TurnStarted(turn=1, max_turns=2))
    writer.close()
    with path.open("a") as f:
        f.write('{"type":"turn.sta')
    assert [e.type for e in read_events(path)] == ["turn.started"]


def test_show_shows_every_good_line_and_names_each_bad_one(tmp_path: Path):
    from tests.conftest import run_cli

    path = tmp_path / "t.jsonl"
    good = to_json(TurnStarted(turn=1, max_turns=2))
    path.write_bytes(good.encode() + b'\n{"type":"bogus"}\n\xff\xfe\n' + good.encode() + b"\n")
    proc = run_cli(["show", str(path)], tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stdout.count("turn 1/2") == 2 and "turn 1/2" not in proc.stderr  # the rendering on stdout
    assert f"{path}:2: not an oc-repl event" in proc.stderr and f"{path}:3: not UTF-8" in proc.stderr
