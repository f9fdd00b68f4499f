"""A sweep's trend (`bench compare --sweep`): its slope against scipy's least squares, its interval against scipy's
bootstrap over tasks, and the first checkpoint separable from the first."""

from __future__ import annotations

import json

import numpy as np
import pytest

from oc_repl.bench.results import TrialResult, trial_dir, write_result
from tests.conftest import run_cli

TASKS, K = 12, 6


def checkpoint(out, solved: list[int]) -> None:
    """A bench of one arm: task i resolved in solved[i] of its K trials."""
    for i, c in enumerate(solved):
        for n in range(1, K + 1):
            ok = n <= c
            outcome, mode = ("verified", "resolved") if ok else ("verify_failed", "unresolved")
            (folder := trial_dir(out, f"t{i:02d}", "camel", n)).mkdir(parents=True)
            write_result(folder, TrialResult(f"t{i:02d}", "camel", n, outcome, mode, ok, 0))
    plan = {"tasks": [{"name": f"t{i:02d}"} for i in range(TASKS)], "protocols": ["camel"], "k": K}
    (out / "bench.json").write_text(json.dumps(plan))


def test_a_sweep_reports_the_slope_its_interval_and_the_first_separable_checkpoint(tmp_path):
    from scipy.stats import bootstrap, linregress

    rng = np.random.default_rng(5)
    base = rng.integers(0, 3, TASKS)
    sweep = [np.clip(base + step * rng.integers(0, 2, TASKS), 0, K) for step in range(4)]  # a rise, task by task
    dirs = []
    for n, solved in enumerate(sweep):
        checkpoint(out := tmp_path / f"ckpt{n}", [int(c) for c in solved])
        dirs.append(str(out))
    done = run_cli(["bench", "compare", "--sweep", "--json", *dirs], tmp_path)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)["trend"]
    shares = np.array(sweep, dtype=float).T / K  # tasks x checkpoints
    assert found["slope"] == pytest.approx(linregress(np.arange(4), shares.mean(axis=0)).slope)
    slopes = np.array([linregress(np.arange(4), row).slope for row in shares])
    ci = bootstrap((slopes,), np.mean, n_resamples=10_000, method="percentile", random_state=1).confidence_interval
    assert found["low"] == pytest.approx(ci.low, abs=0.01) and found["high"] == pytest.approx(ci.high, abs=0.01)
    compared = json.loads(run_cli(["bench", "compare", "--json", *dirs], tmp_path).stdout)["comparisons"]
    first = next((c["other"] for c in compared if c["separable"]), None)  # each against the first
    assert found["first_separable"] == first and first is not None
    text = run_cli(["bench", "compare", "--sweep", *dirs], tmp_path).stdout
    assert "pp of pass@1 per checkpoint" in text and f"first separable from the first checkpoint: {first}" in text
