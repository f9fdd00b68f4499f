"""`bench --until decided` on real trials: two scripted arms, one solving every example task, one none; the bench
stops at the first round its anytime-valid test decides, says why, and its report says it again."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.bench_scripts import CAMEL, TASKS, TERMINUS, bench_script
from tests.conftest import ROOT, run_cli
from tests.docker_support import docker_session


@pytest.fixture(scope="module")
def docker_client() -> Iterator[Any]:
    yield from docker_session()


pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("docker_client")]
NAMES = sorted(p.name for p in TASKS.iterdir() if p.is_dir())


@pytest.mark.timeout(900)
def test_a_bench_until_decided_stops_when_the_arms_separate_and_says_why(serve, tmp_path):
    plan = {**{(t, CAMEL): "good" for t in NAMES}, **{(t, TERMINUS): "bad" for t in NAMES}}
    server = serve(bench_script(plan))
    out = tmp_path / "out"
    args = ["bench", "examples/tasks", "-k", "6", "--protocol", f"{CAMEL},{TERMINUS}", "--until", "decided", "-j", "4"]
    proc = run_cli(
        [*args, "--api-base", server.url, "--retries", "0", "--out", str(out)], tmp_path, cwd=ROOT, timeout=800
    )
    assert proc.returncode == 0, proc.stderr
    # five tasks that differ every time: two rounds make it separable (the test holds alpha at every look)
    assert f"{TERMINUS} vs {CAMEL}: separable after 2 rounds: -100.0 pp" in proc.stderr
    assert "decided after 2 rounds; stopped (4 rounds of the budget left)" in proc.stderr
    records = list((out / "trials").glob("*/*/*/result.json"))
    assert len(records) == 2 * 2 * len(NAMES)  # two rounds of every task and arm, not the budget's six
    assert json.loads((out / "bench.json").read_text())["k"] == 2
    report = run_cli(["bench", "report", str(out)], tmp_path)
    assert "sequential comparison (--until decided):" in report.stdout
    assert f"{TERMINUS} vs {CAMEL}: separable after 2 rounds" in report.stdout


def test_until_decided_needs_two_arms(serve, tmp_path):
    server = serve(bench_script({}))
    args = ["bench", "examples/tasks", "--until", "decided", "--api-base", server.url, "--out", str(tmp_path / "o")]
    proc = run_cli(args, tmp_path, cwd=ROOT)
    assert proc.returncode == 2 and "--until decided compares arms" in proc.stderr
