"""The power figures of a comparison against simulation: at the detectable difference the run's sizes are said to
see with 80% power, Fisher's exact test (scipy's, not ours) separates simulated arms 80% of the time; where no rise
or fall is said to be detectable, not even the extreme one is seen with 80% power."""

from __future__ import annotations

import pytest

from oc_repl.bench.power import EXACT_LIMIT, _normal_power, detectable, power

stats = pytest.importorskip("scipy.stats", reason="scipy checks the statistics (pip install '.[test]')")
np = pytest.importorskip("numpy")

RUNS = 2000


def simulated_power(p1: float, n1: int, p2: float, n2: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    x1, x2 = rng.binomial(n1, p1, RUNS), rng.binomial(n2, p2, RUNS)
    seen: dict[tuple[int, int], bool] = {}
    separated = 0
    for a, b in zip(x1.tolist(), x2.tolist(), strict=True):
        if (a, b) not in seen:
            seen[a, b] = stats.fisher_exact([[a, n1 - a], [b, n2 - b]]).pvalue < 0.05
        separated += seen[a, b]
    return separated / RUNS


@pytest.mark.parametrize("n", [10, 30, 100, 400, 2000])
@pytest.mark.parametrize("rate", [0.05, 0.2, 0.5, 0.8, 0.95])
def test_the_stated_detectable_difference_has_80_percent_power_by_simulation(rate, n):
    for seed, rise in enumerate((True, False)):
        d = detectable(rate, n, n, rise)
        if d is None:  # nothing is: not even the rates' end is seen with 80% power
            end = 1.0 if rise else 0.0
            assert power(rate, n, end, n) < 0.80
            assert simulated_power(rate, n, end, n, seed) < 0.83
            continue
        other = rate + d if rise else rate - d
        assert simulated_power(rate, n, other, n, seed) == pytest.approx(0.80, abs=0.03), (rate, n, rise, d)


def test_near_the_ceiling_no_rise_is_detectable_with_ten_trials_and_the_power_is_fishers():
    assert detectable(0.8, 10, 10) is None  # not "20 pp": a rise to 100% has 3.3% power there
    assert power(0.8, 10, 1.0, 10) == pytest.approx(0.0328, abs=5e-4)
    assert power(0.8, 20, 1.0, 15) == pytest.approx(0.196, abs=1e-3)
    assert detectable(0.8, 10, 10, rise=False) is not None  # a fall can be seen


def test_the_approximation_past_the_enumeration_meets_it_there():
    n = EXACT_LIMIT // 2
    for p1, p2 in [(0.5, 0.55), (0.05, 0.08), (0.9, 0.93)]:
        exact = power(p1, n, p2, n)
        assert _normal_power(p1, n, p2, n) == pytest.approx(exact, abs=0.02)
