"""`oc-repl bench` end to end on a real dockerd, against the loopback server playing each task's correct or wrong
episode per protocol: the table says what the scripts imply, and a bench killed mid-way finishes only what is
missing when run again."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.bench_scripts import (
    CAMEL,
    PLAN,
    TERMINUS,
    bench_script,
    episode,
    is_probe,
    resolved_per_trial,
    route,
    scripted,
)
from tests.conftest import ROOT, cli_env, run_cli
from tests.docker_support import REWARD_WRITER, docker_session
from tests.fakeserver import conversation_turn


@pytest.fixture(scope="module")
def docker_client() -> Iterator[Any]:
    yield from docker_session()


pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("docker_client")]


def results(out: Path) -> dict[tuple[str, str, int], dict]:
    found = {}
    for path in (out / "trials").glob("*/*/*/result.json"):
        data = json.loads(path.read_text())
        found[(data["task"], data.get("arm") or data["protocol"], data["attempt"])] = data
    return found


def table_rows(text: str) -> dict[str, list[str]]:
    """The rows of the first table printed (the per-protocol one)."""
    rows = {}
    for line in text.split("└")[0].splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if line.startswith("│ ") and cells:
            rows[cells[0]] = cells[1:]
    return rows


@pytest.mark.timeout(900)
def test_bench_numbers_are_what_the_scripts_imply(serve, tmp_path):
    server = serve(bench_script(PLAN))
    out = tmp_path / "out"
    command = ["bench", "examples/tasks", "-k", "3", "--protocol", f"{CAMEL},{TERMINUS}", "-j", "4"]
    proc = run_cli(
        [*command, "--api-base", server.url, "--retries", "0", "--out", str(out)], tmp_path, cwd=ROOT, timeout=800
    )
    assert proc.returncode == 0, proc.stderr

    # every trial: its record says what its episode did
    found = results(out)
    assert len(found) == 30
    for (task, protocol), plays in PLAN.items():
        cell = [found[(task, protocol, n)] for n in (1, 2, 3)]
        assert sorted(r["resolved"] for r in cell) == sorted(resolved_per_trial(plays, 3)), (task, protocol)
        for r in cell:
            assert r["failure_mode"] == ("resolved" if r["resolved"] else "unresolved")
            assert r["turns"] == (2 if protocol == CAMEL else 3) and r["parse_errors"] == 0
            assert r["tokens_in"] > 0 and r["tokens_out"] > 0 and r["wall_time_s"] > 0
            assert r["model"] == "qwen3-8b-oc" and r["server"] == server.url and r["exit_code"] in (0, 1)
            assert r["assets"] and all(len(a["sha256"]) == 64 for a in r["assets"])
            if task in ("count-words", "fix-json-config"):  # Harbor: the reward decides
                assert r["task_format"] == "harbor" and r["reward"] == (1.0 if r["resolved"] else 0.0)
            else:
                assert r["tests_total"] > 0 and (r["tests_passed"] == r["tests_total"]) == r["resolved"]
            if protocol == CAMEL:
                assert (r["tool_calls_native"], r["tool_calls_salvaged"]) == (1, 0)

    # the table, computed by hand from PLAN:
    #   camel:    write-greeting 3/3, fix-permissions 3/3, count-words 1/3, repair-module 0/3, fix-json-config 0/3
    #   terminus: write-greeting 3/3, repair-module 3/3, fix-json-config 3/3, the other two 0/3
    rows = table_rows(proc.stdout)
    assert rows[CAMEL][:6] == ["5", "15", "7", "0.467", "0.600", "2.0"]  # pass@1 = 7/15; pass@3 = 3/5
    assert rows[TERMINUS][:6] == ["5", "15", "9", "0.600", "0.600", "3.0"]
    data = json.loads(run_cli(["bench", "report", "--json", str(out)], tmp_path).stdout)
    camel, terminus = data["arms"]
    assert camel["pass_at"]["2"] == pytest.approx((1 + 1 + 2 / 3) / 5)  # count-words: 1 - C(2,2)/C(3,2)
    assert terminus["pass_at"] == pytest.approx({"1": 0.6, "2": 0.6, "3": 0.6})
    (comparison,) = data["comparisons"]
    assert comparison["difference"] == pytest.approx((0 - 1 + 1 - 1 / 3 + 1) / 5)
    assert comparison["gained"] == ["fix-json-config", "repair-module"]
    assert comparison["lost"] == ["count-words", "fix-permissions"]
    assert comparison["ci_low"] <= comparison["difference"] <= comparison["ci_high"]

    # every trial's episode exports, with its record
    exported = run_cli(["export", str(out), "--format", "openai-chat"], tmp_path)
    episodes = [json.loads(line) for line in exported.stdout.splitlines()]
    assert len(episodes) == 30
    assert sum(e["metadata"]["bench"]["resolved"] for e in episodes) == 16
    report = tmp_path / "report.html"
    assert run_cli(["bench", "report", str(out), "--html", str(report)], tmp_path).returncode == 0
    assert (
        'id="pass-at-k"' in report.read_text()
        and (out / "trials/count-words/terminus-json/1/transcript.html").is_file()
    )


# Four cells, no mixed ones: what a trial does must not depend on the order trials start in, before or after the kill.
RESUME_PLAN = {
    ("write-greeting", CAMEL): "good",
    ("write-greeting", TERMINUS): "bad",
    ("count-words", CAMEL): "bad",
    ("count-words", TERMINUS): "good",
}


def bench_processes(out: Path) -> list[str]:
    """The processes with a file of the bench directory open (a trial's transcript, its stderr.txt): a trial's
    command line does not name the directory (its settings come on stdin)."""
    found = set()
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        with contextlib.suppress(OSError):  # a process or a file descriptor gone meanwhile
            for fd in fd_dir.iterdir():
                if os.readlink(fd).startswith(f"{out}/"):
                    found.add(fd_dir.parent.name)
    return sorted(found - {str(os.getpid())})


def conversations(server: Any) -> int:
    return sum(conversation_turn(r["body"]) == 0 and not is_probe(r) for r in server.chat_requests())


@pytest.mark.timeout(600)
@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["kill", "term"])
def test_bench_killed_mid_way_finishes_only_the_missing_trials(serve, tmp_path, stop):
    server = serve(bench_script(RESUME_PLAN))
    out = tmp_path / "out"
    tasks = [str(ROOT / "examples/tasks/write-greeting"), str(ROOT / "examples/tasks/count-words")]
    args = ["bench", *tasks, "-k", "2", "--protocol", f"{CAMEL},{TERMINUS}", "-j", "2", "--out", str(out)]
    args += ["--api-base", server.url, "--retries", "0"]
    log = tmp_path / "bench-stderr.txt"
    with log.open("wb") as stderr:
        bench = subprocess.Popen(
            [sys.executable, "-m", "oc_repl", *args],
            env=cli_env(tmp_path),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            cwd=tmp_path,
        )
    try:
        deadline = time.monotonic() + 300
        while len(results(out)) < 2:
            assert bench.poll() is None, "the bench ended before it could be killed"
            assert time.monotonic() < deadline, "no trial finished"
            time.sleep(0.05)
        # SIGKILL: the bench does nothing more, its running trials die with it; SIGTERM: it stops them and waits
        bench.send_signal(stop)
        assert bench.wait(90) == (130 if stop == signal.SIGTERM else -signal.SIGKILL), log.read_text()
    finally:
        bench.kill()
    deadline = time.monotonic() + 60
    while bench_processes(out):
        assert time.monotonic() < deadline, "trials outlived the killed bench"
        time.sleep(0.1)
    kept = {key: (out / "trials" / key[0] / key[1] / str(key[2]) / "result.json").read_bytes() for key in results(out)}
    for cut in [d for d in out.glob("trials/*/*/*") if not (d / "result.json").exists()]:
        lines = (cut / "transcript.jsonl").read_text().splitlines() if (cut / "transcript.jsonl").exists() else []
        if lines and '"thread.started"' in lines[0]:  # it had begun, and it ended cleanly
            ends = [e["status"] for e in map(json.loads, lines) if e["type"] == "thread.completed"]
            # SIGTERM: the bench stops it. SIGKILL: it is told when the bench is gone, or (a trial still starting
            # then) it may run to its own end, unrecorded, so it runs again; one whose writes to the dead bench's pipes
            # fail as it ends may end unsaid. Either way no transcript ends twice.
            assert ends == ["interrupted"] if stop == signal.SIGTERM else len(ends) <= 1, ends
    assert 2 <= len(kept) < 8
    started_before = conversations(server)

    proc = run_cli(args, tmp_path, timeout=400)
    assert proc.returncode == 0, proc.stderr
    assert f"{len(kept)} of 8 trials already finished" in proc.stderr
    assert conversations(server) - started_before == 8 - len(kept)  # only the missing trials ran
    after = results(out)
    assert len(after) == 8
    for key, data in kept.items():
        assert (out / "trials" / key[0] / key[1] / str(key[2]) / "result.json").read_bytes() == data
    for (task, protocol), plays in RESUME_PLAN.items():
        assert [after[(task, protocol, n)]["resolved"] for n in (1, 2)] == [plays == "good"] * 2
    rows = table_rows(proc.stdout)
    assert rows[CAMEL][:3] == ["2", "4", "2"] and rows[TERMINUS][:3] == ["2", "4", "2"]


def test_bench_a_task_whose_image_cannot_be_built_is_build_error_and_tried_again(serve, tmp_path):
    task = tmp_path / "unbuildable"
    shutil.copytree(ROOT / "examples" / "tasks" / "count-words", task)
    (task / "environment" / "Dockerfile").write_text("FROM oc-repl-no-such-base:never\n")
    server = serve(scripted(route(task, CAMEL, "good")))
    out = tmp_path / "out"
    args = ["bench", str(task), "-k", "2", "--out", str(out), "--api-base", server.url, "--retries", "0"]
    proc = run_cli(args, tmp_path, timeout=120)
    assert proc.returncode == 6, proc.stderr  # every trial failed on infrastructure: the bench says so in its exit
    assert "every trial failed on infrastructure: build_error ×2" in proc.stderr
    records = results(out)
    assert [r["failure_mode"] for r in records.values()] == ["build_error"] * 2
    assert "oc-repl-no-such-base:never" in records[("unbuildable", CAMEL, 1)]["error"]
    assert [r for r in server.chat_requests() if not is_probe(r)] == []
    (task / "environment" / "Dockerfile").write_text(
        (ROOT / "examples/tasks/count-words/environment/Dockerfile").read_text()
    )
    proc = run_cli(args, tmp_path, timeout=300)  # fixed: the trials that never ran run now
    assert proc.returncode == 0, proc.stderr
    assert [r["failure_mode"] for r in results(out).values()] == ["resolved"] * 2


def test_a_tampered_trial_is_its_own_failure_mode_in_the_table_the_html_and_its_record(serve, tmp_path):
    tasks = tmp_path / "tasks"
    for name in ("write-greeting", "count-words"):
        shutil.copytree(ROOT / "examples" / "tasks" / name, tasks / name)
    hostile = route(tasks / "count-words", CAMEL, "good")
    hostile["replies"] = episode(CAMEL, REWARD_WRITER)
    server = serve(scripted(route(tasks / "write-greeting", CAMEL, "good"), hostile))
    out = tmp_path / "out"
    args = ["bench", str(tasks), "-k", "1", "--out", str(out), "--api-base", server.url, "--retries", "0"]
    proc = run_cli(args, tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    records = results(out)
    honest, cheat = records[("write-greeting", CAMEL, 1)], records[("count-words", CAMEL, 1)]
    assert (honest["failure_mode"], honest["resolved"], honest["findings"]) == ("resolved", True, 0)
    assert (cheat["outcome"], cheat["failure_mode"], cheat["resolved"], cheat["exit_code"]) == (
        "tampered",
        "tampered",
        False,
        8,
    )
    assert cheat["findings"] >= 2  # the writer and the reward it wrote
    failure_modes = proc.stdout.split("failure modes")[1]
    header = next(line for line in failure_modes.splitlines() if line.startswith("┃"))
    row = next(line for line in failure_modes.splitlines() if line.startswith("│"))
    cells = dict(zip([c.strip() for c in header.split("┃")], [c.strip() for c in row.split("│")], strict=True))
    assert (cells["resolved"], cells["tampered"]) == ("1", "1")
    page = tmp_path / "report.html"
    assert run_cli(["bench", "report", str(out), "--html", str(page)], tmp_path).returncode == 0
    assert "#1: tampered" in page.read_text() and ">tampered</span>" in page.read_text()
