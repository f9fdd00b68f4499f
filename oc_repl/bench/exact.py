"""The small statistics a comparison of checkpoints needs, computed exactly (integers where they can be) with the
standard library alone: Wilson score intervals, Fisher's exact test, the exact McNemar test, and the trials a
two-proportion test needs to see a difference (the power of Fisher's test itself is power.py's).

Trials are treated as independent draws in Fisher's test and in the power figures, as the checkpoints' authors do;
the paired bootstrap over tasks (stats.py) is the figure that respects that a task's trials are alike.
"""

from __future__ import annotations

from math import ceil, comb, exp, fsum, lgamma, log, sqrt
from statistics import NormalDist

LEVEL = 0.95
ALPHA = 1 - LEVEL
POWER = 0.80
_TIES = 1 + 1e-7  # probabilities this close to the observed one count as as extreme (as R and scipy do)


def _z(p: float) -> float:
    return NormalDist().inv_cdf(p)


def wilson(successes: int, trials: int, level: float = LEVEL) -> tuple[float, float]:
    """The Wilson score interval of a proportion; (0, 1) when there is no trial."""
    if trials <= 0:
        return 0.0, 1.0
    z = _z(1 - (1 - level) / 2)
    p = successes / trials
    denominator = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denominator
    half = z * sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def _log_comb(n: int, k: int) -> float:
    return lgamma(n + 1) - lgamma(k + 1) - lgamma(n - k + 1)


def fisher(a_successes: int, a_trials: int, b_successes: int, b_trials: int) -> float:
    """Two-sided p-value of Fisher's exact test on the 2×2 table (successes, failures) × (a, b): the chance, with
    the margins fixed, of a table at most as likely as the one observed. The hypergeometric weights are taken in log
    space, relative to the largest: their exact integers outgrow a float past a few hundred trials an arm."""
    successes = a_successes + b_successes
    low, high = max(0, successes - b_trials), min(successes, a_trials)
    logs = [_log_comb(a_trials, x) + _log_comb(b_trials, successes - x) for x in range(low, high + 1)]
    top, observed = max(logs), logs[a_successes - low] + log(_TIES)
    weights = [exp(w - top) for w in logs]
    extreme = fsum(w for w, lw in zip(weights, logs, strict=True) if lw <= observed)
    return min(1.0, extreme / fsum(weights))


def mcnemar(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p-value from the discordant pairs (tasks only a solved, tasks only b solved): a
    binomial test of the split against one half."""
    n = only_a + only_b
    if n == 0:
        return 1.0
    tail = sum(comb(n, i) for i in range(min(only_a, only_b) + 1))
    return min(1.0, 2 * tail / 2**n)


def _trials_for(p1: float, p2: float, alpha: float = ALPHA, power: float = POWER) -> float:
    """Trials per arm a two-sided two-proportion test needs to tell p1 from p2 (the normal approximation)."""
    if p1 == p2:
        return float("inf")
    pooled = (p1 + p2) / 2
    spread = _z(1 - alpha / 2) * sqrt(2 * pooled * (1 - pooled)) + _z(power) * sqrt(p1 * (1 - p1) + p2 * (1 - p2))
    return spread * spread / (p1 - p2) ** 2


def trials_needed(p1: float, p2: float) -> int | None:
    """Trials per arm for a difference of p1 against p2 to be detected with 80% power; None when there is none."""
    needed = _trials_for(p1, p2)
    return None if needed == float("inf") else ceil(needed)
