"""The benchmark suite (`python -m benchmarks`): it runs real benchmark scripts, reads their figures and prints each
next to its baseline; what cannot run here is listed as skipped with the reason. Timing is never asserted."""

from __future__ import annotations

import re
import signal
import subprocess
import sys

from benchmarks.adapters import bench_trials, docker_exec
from tests.conftest import ROOT


def suite(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def test_suite_prints_each_figure_beside_its_baseline_and_lists_what_it_skipped():
    proc = suite("--quick", "--markdown", "--only", "output_memory,harbor_concurrency")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    table = proc.stdout.split("== figures", 1)[1]
    row = next(line for line in table.splitlines() if line.startswith("| output_memory |"))
    _, figure, value, baseline, base, ratio, _goal, load = (cell.strip() for cell in row.strip("| ").split(" | "))
    assert figure.startswith("peak RSS") and baseline == "shell_exec 'true'"
    assert value.endswith(" MB") and base.endswith(" MB") and re.fullmatch(r"\d+\.\d+x", ratio)
    assert re.fullmatch(r"\d+\.\d-\d+\.\d", load)
    assert "skipped: harbor_concurrency: Harbor's virtualenv was not given" in proc.stdout


def test_a_benchmark_that_fails_fails_the_suite_and_one_that_cannot_run_is_skipped(tmp_path):
    mini = tmp_path / "mini-venv"
    (mini / "bin").mkdir(parents=True)
    (mini / ".installed").write_text("")
    (mini / "bin" / "mini").write_text("#!/bin/sh\necho mini cannot start >&2\nexit 3\n")
    (mini / "bin" / "mini").chmod(0o755)
    only = "per_turn,harbor_concurrency"
    proc = suite("--quick", "--only", only, "--mini-venv", str(mini), "--harbor-venv", str(tmp_path))
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "failed: per_turn: exit 1: mini cannot start" in proc.stdout
    assert f"skipped: harbor_concurrency: not a Harbor virtualenv: {tmp_path}/bin/python" in proc.stdout
    proc = suite("--only", "nonesuch")
    assert proc.returncode == 2 and "no benchmark named nonesuch" in proc.stderr


DOCKER_EXEC = """docker exec overhead, 3 calls each, image oc-repl-test:bookworm, one container
load average (1 min) at the start 9.29, at the end 9.29, 2 cpus
method        median ms  mean ms  p90 ms vs floor HTTP/call
floor             65.55    63.22   76.93    1.00x       2.0
sandbox            4.24     9.87   21.16    0.06x       0.0
exec-each        110.07    92.61  110.30    1.68x       3.7
goal: sandbox <= 5 ms and <= 0.15x floor (median): 4.24 ms, 0.06x -> met
"""
DOCKER_EXEC_RAW = """method        mean ms   median  vs raw  HTTP/call
raw             50.00    41.00   1.00x   3.0
sandbox         52.00    43.00   1.05x   3.0
persistent       3.00     2.30   0.06x    -
raw call by call (median ms): exec_create 1.00, exec_start 2.00, exec_inspect 3.00
"""


def test_docker_exec_medians_are_read_from_either_printout():
    rows = {r.figure: r for r in docker_exec(DOCKER_EXEC)}
    assert rows["sandbox (median)"].value == 4.24 and rows["sandbox (median)"].base_value == 65.55
    assert rows["sandbox (median)"].met is True and rows["exec-each (median)"].met is None
    rows = {r.figure: r for r in docker_exec(DOCKER_EXEC_RAW)}
    assert rows["sandbox (median)"].value == 43.0 and rows["sandbox (median)"].base_value == 41.0
    assert rows["sandbox (median)"].met is False and rows["persistent (median)"].value == 2.3
    assert docker_exec("Traceback (most recent call last):\n") == []


def test_bench_trials_figures_are_read_from_its_printout():
    text = (
        "trial overhead (-j 1): bench 1.23 s/trial (a trial's own process: 0.90 s) vs\n"
        "  docker CLI by hand 1.00 s/trial: ratio 1.23x\n"
        "throughput (trials per minute; the model takes 0 s per reply in bench trials):\n"
        "  -j 1: bench   48.0   by hand   60.0\n"
        "  -j 4: bench   90.5   by hand  120.0\n"
    )
    rows = bench_trials(text)
    assert [(r.figure, r.value, r.base_value) for r in rows] == [
        ("bench trial, -j 1", 1.23, 1.0),
        ("bench trials a minute, -j 1", 48.0, 60.0),
        ("bench trials a minute, -j 4", 90.5, 120.0),
    ]
