"""The statistics of a comparison against independent computations (scipy) and the figures checkpoints' authors
published; the infrastructure split; partial scores with both denominators; verdicts that say what is separable."""

from __future__ import annotations

import pytest

from oc_repl.bench.compare import Arm, arms_of, summarize
from oc_repl.bench.exact import fisher, mcnemar, trials_needed, wilson
from oc_repl.bench.results import TrialResult
from oc_repl.bench.stats import arm_stats, bootstrap_ci, bootstrap_ratio_ci
from oc_repl.outcome import Status, infrastructure_mode

stats = pytest.importorskip("scipy.stats", reason="scipy checks the statistics (pip install '.[test]')")
np = pytest.importorskip("numpy")


@pytest.mark.parametrize("trials", [1, 2, 5, 17, 89, 267, 1000])
def test_wilson_intervals_are_scipys(trials):
    for successes in sorted({0, 1, trials // 3, trials // 2, trials - 1, trials}):
        expected = stats.binomtest(successes, trials).proportion_ci(confidence_level=0.95, method="wilson")
        assert wilson(successes, trials) == pytest.approx((expected.low, expected.high), abs=1e-12)


@pytest.mark.parametrize(
    "table",
    [(3, 267, 6, 267), (3, 267, 8, 267), (0, 5, 5, 5), (2, 5, 5, 5), (6, 15, 15, 15), (1, 1, 0, 1), (0, 10, 0, 10)]
    + [(a, 9, b, 12) for a in range(0, 10, 3) for b in range(0, 13, 4)]
    # a real benchmark's size: 89 tasks x 6 attempts x 2 arms and beyond (exact integers outgrow a float there)
    + [(517, 1000, 450, 1000), (267, 534, 300, 534), (5000, 10000, 5100, 10000), (9990, 10000, 9995, 10000)],
)
def test_fisher_p_values_are_scipys(table):
    a, n, b, m = table
    expected = stats.fisher_exact([[a, n - a], [b, m - b]], alternative="two-sided").pvalue
    assert fisher(a, n, b, m) == pytest.approx(expected, rel=1e-9, abs=1e-15)


@pytest.mark.parametrize(("only_a", "only_b"), [(0, 0), (0, 3), (3, 0), (1, 4), (2, 2), (0, 6), (7, 19)])
def test_mcnemar_is_the_exact_binomial_test_of_the_discordant_tasks(only_a, only_b):
    expected = 1.0 if only_a + only_b == 0 else stats.binomtest(only_a, only_a + only_b, 0.5).pvalue
    assert mcnemar(only_a, only_b) == pytest.approx(expected, rel=1e-12)


def test_the_published_figures_reproduce():
    assert round(fisher(3, 267, 6, 267), 2) == 0.50  # 3/267 vs 6/267: Fisher two-sided p = 0.50
    assert f"{100 * 3 / 267:.2f}%" == "1.12%" and f"{100 * 8 / 267:.2f}%" == "3.00%"
    low_1, high_1 = wilson(3, 267)
    low_3, high_3 = wilson(8, 267)
    assert low_1 < 3 / 267 < high_1 and low_3 < 8 / 267 < high_3
    assert high_1 > low_3  # the two intervals overlap: pass@1 1.12% and 3.00% are not told apart at n = 267


def test_the_trials_needed_give_the_two_proportion_test_80_percent_power():
    norm = stats.norm
    for rate, p2, n in [(0.0112, 0.0562, 267), (0.3, 0.6, 40), (0.5, 0.7, 100), (0.05, 0.08, 1000)]:
        needed = trials_needed(rate, p2)
        pooled = (rate + p2) / 2
        z = ((p2 - rate) * needed**0.5 - norm.ppf(0.975) * (2 * pooled * (1 - pooled)) ** 0.5) / (
            rate * (1 - rate) + p2 * (1 - p2)
        ) ** 0.5
        assert norm.cdf(z) == pytest.approx(0.80, abs=0.01), (rate, p2, n)
    assert trials_needed(0.2, 0.2) is None


def test_the_bootstrap_keeps_a_tasks_trials_together():
    assert bootstrap_ratio_ci([(2.0, 4.0)] * 5) == (0.5, 0.5)
    low, high = bootstrap_ratio_ci([(0.0, 3.0), (3.0, 3.0), (1.5, 3.0)])
    assert 0.0 <= low < 0.5 < high <= 1.0


def test_the_bootstrap_interval_is_scipys_percentile_bootstrap_over_tasks():
    # per task: (partial scores summed over its trials, trials): 12 tasks of 1 to 4 trials
    parts = [(0.0, 3.0), (3.0, 3.0), (1.5, 3.0), (0.5, 1.0), (2.0, 4.0), (0.0, 2.0)]
    parts += [(1.0, 2.0), (4.0, 4.0), (0.25, 1.0), (0.0, 3.0), (2.5, 3.0), (1.0, 4.0)]
    xs, ns = np.array([x for x, _ in parts]), np.array([n for _, n in parts])
    expected = stats.bootstrap(
        (xs, ns),
        lambda x, n, axis=-1: x.sum(axis=axis) / n.sum(axis=axis),
        paired=True,
        vectorized=True,
        n_resamples=40_000,
        method="percentile",
        random_state=np.random.default_rng(1),
    ).confidence_interval
    assert bootstrap_ratio_ci(parts) == pytest.approx((expected.low, expected.high), abs=0.015)
    values = [0.0, 1.0, 0.5, 0.25, 1.0, 0.0, 0.75, 1.0]
    expected = stats.bootstrap(
        (np.array(values),), np.mean, n_resamples=40_000, method="percentile", random_state=np.random.default_rng(1)
    ).confidence_interval
    assert bootstrap_ci(values) == pytest.approx((expected.low, expected.high), abs=0.02)


def test_every_end_is_the_models_the_infrastructures_or_unfinished():
    infra = {s for s in Status if s.infrastructure}
    servers = {Status.SERVER_ERROR, Status.SERVER_TIMEOUT}
    harness = {Status.VERIFIER_ERROR}  # a verifier with no verdict, where the harness blames it (Harbor's jobs)
    assert infra == servers | harness | {Status.SANDBOX_ERROR, Status.BUILD_ERROR, Status.USAGE, Status.INTERNAL_ERROR}
    model = {Status.VERIFY_FAILED, Status.TURN_CAP, Status.LOOP, Status.PARSE_ERRORS, Status.AGENT_TIMEOUT}
    assert not (model | {Status.CONTEXT_LENGTH, Status.TAMPERED, Status.VERIFIED}) & infra
    modes = ("server_error", "server_timeout", "sandbox_error", "build_error", "verifier_error", "usage_error")
    modes += ("internal_error",)
    assert set(modes) == {m for m in (*modes, "unresolved", "agent_timeout") if infrastructure_mode(m)}
    assert not infrastructure_mode("test_timeout") and not infrastructure_mode("context_length_exceeded")


def trial(task: str, arm: str, attempt: int, outcome: Status, **more: object) -> TrialResult:
    mode = outcome.failure_mode()
    return TrialResult(task, arm, attempt, outcome.value, mode, outcome is Status.VERIFIED, 0, **more)  # type: ignore[arg-type]


def test_partial_scores_are_passed_tests_or_the_reward_as_it_is():
    assert trial("t", "a", 1, Status.VERIFY_FAILED, tests_passed=3, tests_total=4).partial == 0.75
    assert trial("t", "a", 1, Status.VERIFY_FAILED, reward=0.4, tests_passed=0, tests_total=2).partial == 0.4
    assert trial("t", "a", 1, Status.VERIFIED).partial == 1.0
    assert trial("t", "a", 1, Status.TURN_CAP).partial == 0.0
    assert trial("t", "a", 1, Status.TAMPERED, tests_passed=4, tests_total=4).partial == 0.0  # no verdict counts


def test_both_denominators_and_infrastructure_left_out_or_counted():
    # planned: 2 tasks × 3; x: 2 resolved of 3, then a server error; y: one trial, a quarter of its tests, one missing
    results = [
        trial("x", "a", 1, Status.VERIFIED),
        trial("x", "a", 2, Status.VERIFIED),
        trial("x", "a", 3, Status.SERVER_ERROR, error="HTTP 503: busy"),
        trial("y", "a", 1, Status.VERIFY_FAILED, tests_passed=1, tests_total=4),
        trial("y", "a", 2, Status.SANDBOX_ERROR),
    ]
    a = arm_stats("a", results, ["x", "y"], 3)
    assert (a.planned, a.trials, a.infrastructure, a.scored, a.resolved) == (6, 5, 2, 3, 2)
    assert a.pass1_planned.value == pytest.approx(2 / 6) and a.pass1.value == pytest.approx(2 / 3)
    assert a.partial_planned.value == pytest.approx(2.25 / 6) and a.partial.value == pytest.approx(2.25 / 3)
    assert a.pass1_planned.value <= a.pass1.value  # the conservative one
    assert (a.pass1.low, a.pass1.high) == pytest.approx(wilson(2, 3))
    assert (
        a.infra_modes == {"server_error": 1, "sandbox_error": 1} and a.infra_errors["server_error"] == "HTTP 503: busy"
    )
    assert a.pass_at_planned[3] == pytest.approx(0.5)  # x solved; y never
    counted = arm_stats("a", results, ["x", "y"], 3, count_infra=True)
    assert (counted.scored, counted.pass1.value) == (5, pytest.approx(2 / 5))


def arms_with(rates: dict[str, tuple[str, str]], k: int) -> list[TrialResult]:
    """rates: task -> (arm a's plays, arm b's plays), one letter per trial (g solved, b not), repeated to k."""
    results = []
    for task, plays in rates.items():
        for arm, play in zip("ab", plays, strict=True):
            for n in range(1, k + 1):
                solved = play[(n - 1) % len(play)] == "g"
                results.append(trial(task, arm, n, Status.VERIFIED if solved else Status.VERIFY_FAILED))
    return results


RATES = {"t1": ("g", "g"), "t2": ("b", "g"), "t3": ("b", "g"), "t4": ("gb", "g"), "t5": ("b", "b"), "t6": ("g", "b")}


def test_a_difference_is_separable_with_enough_trials_and_not_with_few():
    few = summarize(arms_of(arms_with(RATES, 1), {"protocols": ["a", "b"]}))
    (c,) = few.comparisons
    assert (c.gained, c.lost) == (["t2", "t3"], ["t6"])
    assert c.mcnemar_p == pytest.approx(stats.binomtest(1, 3, 0.5).pvalue) and c.test.startswith("exact McNemar")
    assert not c.separable and "not separable at this sample size" in c.verdict
    # three of six against four of six: not even a rise to 100% or a fall to 0% is seen with 80% power at six trials
    assert (c.baseline_trials, c.detectable_pp, c.detectable_fall_pp) == (6, None, None)
    assert "Fisher's test on 6 and 6 trials sees no difference with 80% power" in c.verdict
    assert f"about {c.trials_per_task_needed} trials per task" in c.verdict
    many = summarize(arms_of(arms_with(RATES, 20), {"protocols": ["a", "b"]}))
    (c,) = many.comparisons
    assert c.mcnemar_p is None and c.test.startswith("Fisher")
    assert c.fisher_p == pytest.approx(stats.fisher_exact([[50, 70], [80, 40]]).pvalue)
    assert c.separable and "separable at the 5% level; b resolves more" in c.verdict
    assert (c.gained, c.lost) == (["t2", "t3"], ["t6"])
    assert c.ci_low <= c.difference <= c.ci_high
    assert "still holds zero: more tasks would tell" in c.verdict  # six tasks: the interval over them stays wide


def test_a_sweep_compares_each_checkpoint_with_the_one_before():
    arms = [Arm(f"step-{n}", [trial("t", f"step-{n}", 1, Status.VERIFIED)]) for n in (1, 2, 3)]
    summary = summarize(arms, consecutive=True)
    assert [(c.baseline, c.other) for c in summary.comparisons] == [("step-1", "step-2"), ("step-2", "step-3")]
    assert [(c.baseline, c.other) for c in summarize(arms).comparisons] == [("step-1", "step-2"), ("step-1", "step-3")]
