"""The power of the comparison's test: the chance that Fisher's exact test (two-sided, at the 5% level) separates two
arms of n1 and n2 trials whose true rates are p1 and p2, computed exactly: the tables the test rejects are enumerated
once per pair of sizes, and the power is the binomial probability of landing in them.

From it, the differences a run of these sizes detects with 80% power, a rise and a fall from the baseline's rate, each
bounded by what the rates allow: near 100% no rise may be detectable at all (at 80% vs 80% with ten trials each, not
even a rise to 100% is seen with 80% power), and the figure says so instead of the gap to the ceiling. Past
EXACT_LIMIT trials in all (a few thousand), the normal approximation with a continuity correction stands in for the
enumeration; it is close there.
"""

from __future__ import annotations

from functools import lru_cache
from math import sqrt
from statistics import NormalDist
from typing import TYPE_CHECKING

from oc_repl.bench.exact import ALPHA, POWER

if TYPE_CHECKING:
    import numpy as np

EXACT_LIMIT = 3000  # trials of both arms together up to which the rejection region is enumerated
_TIES = 1 + 1e-7  # as in exact.fisher


def _log_factorials(n: int) -> np.ndarray:
    import numpy as np

    return np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, n + 1, dtype=float)))])


@lru_cache(maxsize=16)
def rejected(n1: int, n2: int) -> np.ndarray:
    """The (n1 + 1) x (n2 + 1) table of the outcomes (x1 resolved of n1, x2 of n2) Fisher's test rejects at ALPHA."""
    import numpy as np

    lf = _log_factorials(n1 + n2)
    table = np.zeros((n1 + 1, n2 + 1), dtype=bool)
    for s in range(n1 + n2 + 1):  # the tables that share a margin share their null distribution
        x = np.arange(max(0, s - n2), min(s, n1) + 1)
        logs = lf[n1] - lf[x] - lf[n1 - x] + lf[n2] - lf[s - x] - lf[n2 - s + x]
        probabilities = np.exp(logs - logs.max())
        probabilities /= probabilities.sum()
        ordered = np.sort(probabilities)
        below = np.cumsum(ordered)
        p_values = below[np.searchsorted(ordered, probabilities * _TIES, side="right") - 1]
        table[x, s - x] = p_values < ALPHA
    return table


def _binomial(n: int, p: float) -> np.ndarray:
    import numpy as np

    x = np.arange(n + 1)
    if p <= 0 or p >= 1:
        return (x == (n if p >= 1 else 0)).astype(float)
    lf = _log_factorials(n)
    return np.exp(lf[n] - lf[x] - lf[n - x] + x * np.log(p) + (n - x) * np.log1p(-p))


def power(p1: float, n1: int, p2: float, n2: int) -> float:
    """The chance that the test separates arms of true rates p1 and p2 with n1 and n2 trials."""
    if n1 <= 0 or n2 <= 0:
        return 0.0
    if n1 + n2 > EXACT_LIMIT:
        return _normal_power(p1, n1, p2, n2)
    return float(_binomial(n1, p1) @ rejected(n1, n2) @ _binomial(n2, p2))


def _normal_power(p1: float, n1: int, p2: float, n2: int) -> float:
    """The two-proportion test's power with a continuity correction, for sizes too large to enumerate."""
    normal = NormalDist()
    pooled = (n1 * p1 + n2 * p2) / (n1 + n2)
    null = sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    spread = sqrt(p1 * (1 - p1) / n1 + p2 * (1 - p2) / n2)
    if spread == 0:
        return 1.0 if p1 != p2 else 0.0
    gap = abs(p2 - p1) - (1 / n1 + 1 / n2) / 2
    return normal.cdf((gap - normal.inv_cdf(1 - ALPHA / 2) * null) / spread)


def detectable(rate: float, n1: int, n2: int, rise: bool = True) -> float | None:
    """The smallest rise (or fall) from `rate` that arms of n1 and n2 trials detect with 80% power; None when none
    does, not even one to 100% (or to 0%)."""
    rate = min(max(rate, 0.0), 1.0)
    end = 1.0 if rise else 0.0
    if power(rate, n1, end, n2) < POWER:
        return None
    near, far = rate, end  # power(near) < POWER <= power(far)
    for _ in range(40):
        middle = (near + far) / 2
        if power(rate, n1, middle, n2) < POWER:
            near = middle
        else:
            far = middle
    return abs(far - rate)
