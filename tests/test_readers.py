"""The readers of files anyone may have written (`show`, `export`, `bench report` as text and HTML) against crafted
transcripts, result.json and bench.json files: a bad line is a clear error naming the file and line (exit 2), never a
traceback; everything is escaped; links stay inside the bench directory and nothing is written outside it."""

from __future__ import annotations

import json
import re
from dataclasses import asdict
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from oc_repl.bench.results import TRANSCRIPT, trial_dir, write_result
from oc_repl.events import ThreadCompleted, ThreadStarted, TurnStarted, to_json
from tests.bench.test_bench_stats import result, write_bench
from tests.conftest import run_cli

GOOD = to_json(TurnStarted(turn=1, max_turns=2)).encode()
DEEP = b'{"type":"error","kind":"k","message":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
# A line of each kind that no reader may crash on or quietly accept: (bytes, what the error says)
BAD_LINES = {
    "deeply nested": (DEEP, "nested more than"),
    "a huge number": (b'{"type":"turn.started","turn":1' + b"0" * 400 + b',"max_turns":2}', "out of range"),
    "a wrong type": (
        b'{"type":"item.completed","item":{"type":"command_execution","id":"1","command":["rm"]}}',
        "event",
    ),
    "not an object": (b"[1, 2, 3]", "event"),
    "a non-UTF-8 byte": (b'{"type":"error","kind":"k","message":"\xff"}', "not UTF-8"),
}


def transcript_with(tmp_path: Path, bad: bytes) -> Path:
    path = tmp_path / "t.jsonl"
    started = to_json(ThreadStarted(thread_id="t", model="m", protocol="p", sandbox="s", api_base="a", task="x"))
    path.write_bytes(b"\n".join([started.encode(), GOOD, bad, GOOD]) + b"\n")
    return path


@pytest.mark.parametrize("kind", BAD_LINES)
def test_show_shows_the_good_lines_and_ends_a_bad_one_with_a_clear_error(tmp_path, kind):
    bad, told = BAD_LINES[kind]
    path = transcript_with(tmp_path, bad)
    proc = run_cli(["show", str(path)], tmp_path, process=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stdout.count("turn 1/2") == 2
    (named,) = [line for line in proc.stderr.splitlines() if f"{path}:3:" in line]
    assert told in named and len(named) < 400


def test_show_takes_a_cut_last_line_as_what_a_killed_run_leaves(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(GOOD + b"\n" + GOOD[:20])
    proc = run_cli(["show", str(path)], tmp_path)
    assert proc.returncode == 0 and f"{path}:2:" in proc.stderr and "stopped mid-line" in proc.stderr


@pytest.mark.parametrize("kind", [*BAD_LINES, "a reply of no known shape"])
def test_export_refuses_a_bad_line_and_writes_nothing(tmp_path, kind):
    bad, told = BAD_LINES.get(kind, (b'{"type":"response.received","turn":1,"raw":{"choices":"text"}}', "choices"))
    path = transcript_with(tmp_path, b'{"type":"request.sent","turn":1,"request":{"messages":[]}}\n' + bad)
    target = tmp_path / "out" / "episodes.jsonl"
    proc = run_cli(["export", str(path), "-o", str(target)], tmp_path, process=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert f"{path}:4:" in proc.stderr and told in proc.stderr
    assert not target.exists()


def bench_with(tmp_path: Path, *records: dict, transcripts: bool = True) -> Path:
    """A bench directory of good records, a transcript beside each, and `records` written as result.json where
    their `at` (task, protocol, attempt) puts them."""
    out = tmp_path / "bench"
    good = [result("a", "p", 1, True), result("b", "p", 1, False)]
    write_bench(out, good)
    for record in records:
        directory = trial_dir(out, *record.pop("at"))
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "result.json").write_text(json.dumps({**asdict(good[0]), **record}))
    if transcripts:
        line = to_json(ThreadCompleted(status="done", exit_code=0)) + "\n"
        for path in (out / "trials").glob("*/*/*/result.json"):
            (path.parent / TRANSCRIPT).write_text(line)
    return out


def report(out: Path, tmp_path: Path, *more: str) -> tuple[object, str]:
    proc = run_cli(["bench", "report", str(out), *more], tmp_path, process=True, timeout=120)
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return proc, " ".join(proc.stderr.split())


@pytest.mark.parametrize(
    ("record", "told"),
    [
        ({"at": ("c", "p", 1), "task": "c", "attempt": "1"}, "attempt: expected int"),
        ({"at": ("c", "p", 1), "task": "c", "turns": 10**400}, "out of range"),
        ({"at": ("c", "p", 1), "task": "c", "tokens_in": [1]}, "tokens_in: expected int"),
        ({"at": ("c", "p", 1), "task": "c", "outcome": "pwned"}, "outcome"),
        ({"at": ("c", "p", 1), "task": "../../outside"}, "outside its own trial directory"),
        ({"at": ("c", "p", 1), "task": "c", "model": {"deep": json.loads("[" * 150 + "]" * 150)}}, "model: expected"),
    ],
)
def test_bench_report_ends_a_bad_record_with_a_clear_error(tmp_path, record, told):
    out = bench_with(tmp_path, record)
    (tmp_path / "outside" / "p" / "1").mkdir(parents=True)
    (tmp_path / "outside" / "p" / "1" / TRANSCRIPT).write_text("")
    for extra in ([], ["--json"], ["--html", str(tmp_path / "r.html")]):
        proc, said = report(out, tmp_path, *extra)
        assert proc.returncode == 2 and told in said and "c/p/1/result.json" in said, said
    assert not (tmp_path / "outside" / "p" / "1" / "transcript.html").exists()
    assert not (tmp_path / "r.html").exists()


def test_bench_report_names_a_deeply_nested_or_non_utf8_record(tmp_path):
    out = bench_with(tmp_path)
    path = trial_dir(out, "a", "p", 1) / "result.json"
    for data, told in ((b"[" * 100_000 + b"]" * 100_000, "nested more than"), (b"\xff\xfe", "not UTF-8")):
        path.write_bytes(data)
        proc, said = report(out, tmp_path)
        assert proc.returncode == 2 and told in said and "a/p/1/result.json" in said, said


def test_bench_report_names_a_plan_that_is_not_one(tmp_path):
    out = bench_with(tmp_path)
    (out / "bench.json").write_text(json.dumps({"tasks": [], "protocols": ["p"], "k": "three"}))
    proc, said = report(out, tmp_path)
    assert proc.returncode == 2 and "bench.json: not a bench plan: k" in said


def test_names_from_the_bench_directory_are_text_not_markup(tmp_path):
    out = bench_with(tmp_path, {"at": ("c", "[bold red]q", 1), "task": "c", "protocol": "[bold red]q"})
    proc, _ = report(out, tmp_path)
    assert proc.returncode == 0 and "[bold red]q" in proc.stdout


def hrefs(page: str) -> list[str]:
    return re.findall(r'<a class="chip"[^>]*href="([^"]*)"', page)


def test_html_links_stay_inside_the_bench_directory(tmp_path):
    evil = {"at": ("javascript:alert(1)", "p", 1), "task": "javascript:alert(1)"}
    tag = {"at": ("<img src=x onerror=alert(2)>", "p", 1), "task": "<img src=x onerror=alert(2)>"}
    escape = {"at": ("d", "p", 1), "task": "d", "transcript": "../../../../../outside.jsonl"}
    out = bench_with(tmp_path, evil, tag, escape)
    (tmp_path / "outside.jsonl").write_text(to_json(ThreadCompleted(status="done", exit_code=0)) + "\n")
    linked = trial_dir(out, "e", "p", 1)
    linked.mkdir(parents=True)
    write_result(linked, result("e", "p", 1, True))
    (linked / TRANSCRIPT).symlink_to(tmp_path / "outside.jsonl")
    for target in (out / "trials" / "report.html", tmp_path / "elsewhere" / "report.html"):
        proc, said = report(out, tmp_path, "--html", str(target))
        assert proc.returncode == 0, said
        page = target.read_text()
        links = hrefs(page)
        assert len(links) == 4  # a, b, and the two crafted names; not the trials whose transcript is elsewhere
        for link in links:
            assert urlparse(link).scheme == "" and not link.startswith("/")
            resolved = (target.parent / unquote(link)).resolve()
            assert resolved.is_relative_to(out.resolve()) and resolved.is_file()
        assert "<img src=x" not in page and "&lt;img src=x onerror=alert(2)&gt;" in page
    assert not (trial_dir(out, "d", "p", 1) / "transcript.html").exists()
    assert not (linked / "transcript.html").exists() and not (tmp_path / "transcript.html").exists()
