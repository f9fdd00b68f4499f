"""The sequential comparison's statistics (oc_repl/bench/sequential.py): its error rates in repeated simulation, the
rounds it saves against the fixed design, its interval against a direct computation of the capital process."""

from __future__ import annotations

import math

import numpy as np
import pytest

from oc_repl.bench.sequential import BET_CAP, ConfidenceSequence, decide

ALPHA, MARGIN, TASKS, BUDGET = 0.05, 0.05, 20, 30


def task_rates(seed: int) -> np.ndarray:
    """Pass rates of 20 tasks as these checkpoints have them: most rarely solved, a few often."""
    return np.random.default_rng(seed).beta(0.6, 2.5, TASKS)


def run(rng: np.random.Generator, baseline: np.ndarray, other: np.ndarray) -> tuple[str, int]:
    """One sequential comparison: its verdict and the rounds it took (the budget when undecided)."""
    cs = ConfidenceSequence(ALPHA)
    for r in range(1, BUDGET + 1):
        a, b = rng.random(TASKS) < baseline, rng.random(TASKS) < other
        cs.add(b.astype(float) - a.astype(float))
        if cs.low > 0 or cs.high < 0:
            return "separable", r
        if cs.low > -MARGIN and cs.high < MARGIN:
            return "equivalent", r
    return "not yet", BUDGET


@pytest.mark.parametrize("shape", ["same rates", "different per task, equal on average"])
def test_equal_arms_are_called_separable_at_most_alpha_of_the_time_over_1000_runs(shape):
    rng = np.random.default_rng(7)
    baseline = task_rates(1)
    other = baseline.copy()
    if shape != "same rates":  # one arm better on some tasks, worse on others, the same on average
        other = np.clip(baseline + rng.normal(0, 0.15, TASKS), 0, 1)
        other = np.clip(other - (other.mean() - baseline.mean()), 0, 1)
        assert abs(other.mean() - baseline.mean()) < 0.01
    verdicts = [run(rng, baseline, other)[0] for _ in range(1000)]
    assert verdicts.count("separable") / 1000 <= ALPHA


def fixed_rounds(baseline: np.ndarray, other: np.ndarray, difference: float, power: float = 0.8) -> int:
    """Rounds a fixed design needs to detect `difference` with this power (the z-test of the mean difference)."""
    from scipy.stats import norm

    variance = float(np.mean(baseline * (1 - baseline) + other * (1 - other))) / TASKS  # of one round's mean
    return math.ceil((norm.ppf(1 - ALPHA / 2) + norm.ppf(power)) ** 2 * variance / difference**2)


def test_well_separated_arms_stop_sooner_than_the_fixed_design_planned_for_the_smallest_difference():
    rng = np.random.default_rng(11)
    baseline = task_rates(2)
    other = np.clip(baseline + 0.25, 0, 1)
    planned = fixed_rounds(baseline, other, difference=0.10)  # the design sized for 10 pp
    found = [run(rng, baseline, other) for _ in range(300)]
    assert all(v == "separable" for v, _ in found)
    mean = sum(r for _, r in found) / len(found)
    saving = 1 - mean / planned
    print(f"fixed design {planned} rounds; sequential {mean:.1f} on average: {100 * saving:.0f}% fewer")
    assert mean < planned and saving > 0.3


def test_the_interval_is_the_set_of_means_no_bet_has_disproved_as_computed_directly():
    # one candidate mean at a time, by the definition: two bettors, half the capital each, bets fixed per round
    rounds = [[1, 0, -1, 1, 0], [1, 1, 0, 0, 0], [0, 1, 1, -1, 1], [1, 1, 0, 1, 0]]
    cs = ConfidenceSequence(ALPHA)
    n, total, squares = 0, 0.0, 0.0
    up = {m: 1.0 for m in (-0.5, 0.0, 0.2, 0.5, 0.9)}
    down = dict(up)
    for differences in rounds:
        cs.add([float(d) for d in differences])
        mean = total / n if n else 0.0
        variance = (1 + max(squares - n * mean * mean, 0)) / (n + 1)
        t = n + len(differences)
        bet = math.sqrt(2 * math.log(2 / ALPHA) / (variance * t * math.log(1 + t)))
        for m in up:
            for d in differences:
                up[m] *= 1 + min(bet, BET_CAP / (1 + m)) * (d - m)
                down[m] *= 1 - min(bet, BET_CAP / (1 - m)) * (d - m)
        n, total, squares = t, total + sum(differences), squares + sum(d * d for d in differences)
    for m in up:  # each candidate is in the interval exactly when the hedged capital stayed below 1/alpha
        inside = cs.low <= m <= cs.high
        assert inside == ((up[m] + down[m]) / 2 < 1 / ALPHA), m
    assert decide(rounds, ALPHA, MARGIN).verdict == ("separable" if cs.low > 0 else "not yet")
