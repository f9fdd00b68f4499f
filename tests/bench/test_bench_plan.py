"""`bench plan`: the trials it plans give the power it promises in repeated simulation, its arithmetic agrees with
scipy's normal quantiles, and the command reads a pilot bench."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from oc_repl.bench import planning
from oc_repl.bench.results import TrialResult, trial_dir, write_result
from tests.conftest import run_cli

TASKS, DIFFERENCE, ALPHA, POWER = 40, 0.05, 0.05, 0.8


def pilot(rng: np.random.Generator, rates: dict[str, np.ndarray], k: int) -> dict[str, list[tuple[int, int]]]:
    """task -> (resolved, trials) of each arm after k pilot trials."""
    names = [f"task-{i:02d}" for i in range(TASKS)]
    return {n: [(int((rng.random(k) < rates[arm][i]).sum()), k) for arm in rates] for i, n in enumerate(names)}


def detected(rng: np.random.Generator, a: np.ndarray, b: np.ndarray, m: int) -> bool:
    """One fixed-design run of m trials per task and arm, judged by the z-test of the mean task difference."""
    from scipy.stats import norm

    ca, cb = rng.binomial(m, a), rng.binomial(m, b)
    pa, pb = ca / m, cb / m
    variance = (pa * (1 - pa) + pb * (1 - pb)) * m / max(m - 1, 1)
    se = math.sqrt(variance.sum() / m) / TASKS
    return se > 0 and abs((pb - pa).mean()) / se > norm.ppf(1 - ALPHA / 2)


def test_the_planned_trials_detect_the_difference_at_the_planned_power_in_repeated_simulation():
    rng = np.random.default_rng(3)
    baseline = rng.beta(0.8, 2.0, TASKS)  # most tasks rarely solved, some often, a few never
    baseline[:6] = 0.0
    other = np.clip(baseline + DIFFERENCE * TASKS / (TASKS - 6) * (baseline > 0), 0, 1)  # better where it can be
    assert other.mean() - baseline.mean() == pytest.approx(DIFFERENCE, abs=0.01)
    plan = planning.from_pilot(pilot(rng, {"a": baseline, "b": other}, 20), DIFFERENCE, ALPHA, POWER)
    assert plan.trials_per_task < plan.binomial_trials_per_task  # clustering by task asks for fewer than a binomial
    hits = sum(detected(rng, baseline, other, plan.trials_per_task) for _ in range(2000)) / 2000
    assert abs(hits - POWER) <= 0.05, (plan.trials_per_task, hits)
    assert {f"task-{i:02d}" for i in range(6)} <= set(plan.zero_variance)  # never solved, so named (and any alike)
    assert plan.without_zero["saved"] == 2 * len(plan.zero_variance) * plan.trials_per_task


def test_the_arithmetic_agrees_with_scipys_normal_quantiles():
    from scipy.stats import norm

    z = norm.ppf(1 - ALPHA / 2) + norm.ppf(POWER)
    plan = planning.from_assumptions(89, 0.06, 0.3, 0.03, ALPHA, POWER)
    variance = 2 * 89 * 0.06 * 0.94 * 0.7
    assert plan.trials_per_task == math.ceil(z**2 * variance / (89**2 * 0.03**2)) and plan.assumed
    assert plan.binomial_trials_per_task == math.ceil(z**2 * 2 * 89 * 0.06 * 0.94 / (89**2 * 0.03**2))


def test_the_command_plans_from_a_pilot_bench_and_refuses_one_that_varies_nowhere(tmp_path):
    out = tmp_path / "pilot"
    for t, (ca, cb) in enumerate([(1, 3), (0, 2), (2, 2), (0, 0)]):
        for arm, solved in (("a", ca), ("b", cb)):
            for n in range(1, 5):  # four trials of each task and arm, `solved` of them resolved
                ok = n <= solved
                outcome, mode = ("verified", "resolved") if ok else ("verify_failed", "unresolved")
                record = TrialResult(f"t{t}", arm, n, outcome, mode, ok, 0, started_at=1000.0 + n, wall_time_s=5)
                (folder := trial_dir(out, f"t{t}", arm, n)).mkdir(parents=True)
                write_result(folder, record)
    (out / "bench.json").write_text(
        json.dumps({"tasks": [{"name": f"t{t}"} for t in range(4)], "protocols": ["a", "b"], "k": 4})
    )
    done = run_cli(["bench", "plan", str(out), "--difference", "20", "--json"], tmp_path)
    assert done.returncode == 0, done.stderr
    counts = {"t0": [(1, 4), (3, 4)], "t1": [(0, 4), (2, 4)], "t2": [(2, 4), (2, 4)], "t3": [(0, 4), (0, 4)]}
    expected = planning.from_pilot(counts, 0.20, ALPHA, POWER)
    found = json.loads(done.stdout)
    assert found["trials_per_task"] == expected.trials_per_task and found["zero_variance"] == ["t3"]
    assert found["hours"] is not None
    text = run_cli(["bench", "plan", str(out), "--difference", "20"], tmp_path).stdout
    assert f"{expected.trials_per_task} trials per task and arm" in text and "1 tasks ended alike" in text
    alike = tmp_path / "alike"
    for n in (1, 2):
        (folder := trial_dir(alike, "t0", "a", n)).mkdir(parents=True)
        write_result(folder, TrialResult("t0", "a", n, "verify_failed", "unresolved", False, 1))
    done = run_cli(["bench", "plan", str(alike), "--difference", "20"], tmp_path)
    assert done.returncode == 2 and "differ on no task" in done.stderr
