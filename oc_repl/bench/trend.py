"""A sweep's trend: across checkpoints in order, how pass@1 moves per checkpoint, and from which one on it is
separably different from the first.

The slope is the least-squares slope of each checkpoint's pass@1 over the tasks all of them ran (mean over tasks of
each task's resolved share) against its place in the sweep (0, 1, 2, ...). Being linear in the tasks' shares, it is
the mean over tasks of each task's own slope, so its interval is the bootstrap over tasks the comparisons use (tasks
resampled, the same seed and count). The first separable checkpoint is the first whose comparison with the first
checkpoint (compare.py: the paired test over the common tasks) separates them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from oc_repl.bench.stats import BOOTSTRAP_RESAMPLES, bootstrap_ci

METHOD = f"least squares over the checkpoints' places; bootstrap over tasks, {BOOTSTRAP_RESAMPLES} resamples"


@dataclass
class Trend:
    slope: float  # pass@1 per checkpoint
    low: float
    high: float
    tasks: int
    first_separable: str | None  # the first checkpoint separable from the first one
    method: str = METHOD

    def words(self) -> str:
        where = (
            f"first separable from the first checkpoint: {self.first_separable}"
            if self.first_separable
            else "no checkpoint is separable from the first"
        )
        return (
            f"trend: {100 * self.slope:+.2f} pp of pass@1 per checkpoint (95% CI {100 * self.low:+.2f} … "
            f"{100 * self.high:+.2f}) over {self.tasks} common tasks; {where} ({self.method})"
        )


def task_slopes(shares: np.ndarray) -> np.ndarray:
    """Each task's least-squares slope across checkpoints; `shares`: tasks x checkpoints."""
    x = np.arange(shares.shape[1], dtype=float)
    x -= x.mean()
    return (shares - shares.mean(axis=1, keepdims=True)) @ x / float((x * x).sum())


def trend(arms: Sequence[Any], separable: Callable[[Any, Any], bool]) -> Trend | None:
    """The trend of arms (ArmStats, in sweep order; three or more), `separable(first, other)` deciding separation."""
    if len(arms) < 3:
        return None
    common = sorted(set.intersection(*(set(a.per_task) for a in arms)))
    if not common:
        return None
    shares = np.array([[a.per_task[t][1] / a.per_task[t][0] for a in arms] for t in common])
    slopes = task_slopes(shares)
    low, high = bootstrap_ci(slopes.tolist())
    first = next((a.label for a in arms[1:] if separable(arms[0], a)), None)
    return Trend(float(slopes.mean()), low, high, len(common), first)
