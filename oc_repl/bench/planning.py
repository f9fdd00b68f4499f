"""`oc-repl bench plan`: the trials a comparison needs, planned before the GPUs are spent.

The comparison planned is the one the bench decides on: the difference of two arms' pass@1 over the same tasks,
the mean over tasks of each task's difference in resolved share, each task run m times with each arm. Its variance is
the sum over tasks of each arm's per-task variance p_t (1 - p_t), over m T^2: outcomes cluster by task (a task that
is never solved varies not at all; one solved half the time the most), so the variance comes from the tasks' own
rates, not from a binomial on the pooled rate, which would ask for more trials by the design effect 1 / (1 - ICC).
From a pilot (bench directories or Harbor jobs of the same tasks) each task's variance is its unbiased estimate,
p (1 - p) n / (n - 1); with two arms in the pilot each arm's own, with one the same for both.

For a two-sided test at `alpha` to see a difference `delta` with probability `power` (the normal approximation, as
for any mean of many tasks), m >= (z_{1-alpha/2} + z_power)^2 * sum_t (v_a,t + v_b,t) / (T^2 delta^2).

Tasks whose every trial in the pilot ended alike in every arm (all solved, or none) carry no information at these
sizes: named, with what leaving them out saves (their trials) and costs (a change on them goes unseen, and a pass@1
over fewer tasks is not comparable with one over all).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from statistics import NormalDist
from typing import Any

from oc_repl.errors import UsageError


@dataclass
class Plan:
    tasks: int
    difference: float
    alpha: float
    power: float
    variance: float  # sum over tasks of both arms' per-task variances
    pooled_rate: float
    icc: float  # intra-task correlation of outcomes (0: trials of a task no more alike than any two)
    trials_per_task: int  # per task and arm
    total_trials: int  # both arms
    binomial_trials_per_task: int  # what a binomial on the pooled rate would ask for
    hours: float | None  # at the pilot's rate of finished trials
    zero_variance: list[str] = field(default_factory=list)
    without_zero: dict[str, int] = field(default_factory=dict)  # trials_per_task, total_trials, saved
    assumed: bool = False  # from stated assumptions, no pilot

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _z(alpha: float, power: float) -> float:
    normal = NormalDist()
    return normal.inv_cdf(1 - alpha / 2) + normal.inv_cdf(power)


def trials_needed(variance: float, tasks: int, difference: float, alpha: float, power: float) -> int:
    """m, the trials per task and arm: at least 1."""
    return max(1, math.ceil(_z(alpha, power) ** 2 * variance / (tasks * tasks * difference * difference)))


def task_variance(resolved: int, trials: int) -> float:
    """The unbiased estimate of a task's outcome variance from its trials (0 with fewer than two)."""
    if trials < 2:
        return 0.0
    p = resolved / trials
    return p * (1 - p) * trials / (trials - 1)


def from_pilot(
    counts: dict[str, list[tuple[int, int]]],
    difference: float,
    alpha: float,
    power: float,
    trials_per_hour: float | None = None,
) -> Plan:
    """`counts`: task -> (resolved, trials) of each pilot arm (one or two)."""
    tasks = sorted(counts)
    per_task = []
    for task in tasks:
        arms = counts[task]
        variances = [task_variance(c, n) for c, n in arms]
        per_task.append(variances[0] + (variances[1] if len(variances) > 1 else variances[0]))
    variance = sum(per_task)
    if variance == 0:
        raise UsageError(
            "the pilot's trials differ on no task, so they say nothing of how outcomes vary",
            hint="run the pilot with -k 2 or more, or state --tasks, --rate and --icc",
        )
    resolved, trials = sum(c for a in counts.values() for c, _ in a), sum(n for a in counts.values() for _, n in a)
    pooled = resolved / trials if trials else 0.0
    within = variance / (2 * len(tasks)) if tasks else 0.0
    icc = 1 - within / (pooled * (1 - pooled)) if 0 < pooled < 1 else 0.0
    zero = [t for t, v in zip(tasks, per_task, strict=True) if v == 0 and all(n > 1 for _, n in counts[t])]
    return _plan(len(tasks), variance, pooled, icc, difference, alpha, power, trials_per_hour, zero)


def from_assumptions(tasks: int, rate: float, icc: float, difference: float, alpha: float, power: float) -> Plan:
    """No pilot: T tasks of mean pass rate `rate` whose outcomes correlate within a task by `icc`."""
    variance = 2 * tasks * rate * (1 - rate) * (1 - icc)
    plan = _plan(tasks, variance, rate, icc, difference, alpha, power, None, [])
    plan.assumed = True
    return plan


def _plan(
    tasks: int,
    variance: float,
    pooled: float,
    icc: float,
    difference: float,
    alpha: float,
    power: float,
    per_hour: float | None,
    zero: Sequence[str],
) -> Plan:
    m = trials_needed(variance, tasks, difference, alpha, power)
    binomial = trials_needed(2 * tasks * pooled * (1 - pooled), tasks, difference, alpha, power)
    plan = Plan(tasks, difference, alpha, power, variance, pooled, icc, m, 2 * m * tasks, binomial, None, list(zero))
    if per_hour:
        plan.hours = plan.total_trials / per_hour
    if zero and len(zero) < tasks:
        # over the other tasks the same evidence is a difference tasks / kept times larger
        kept = tasks - len(zero)
        m_kept = trials_needed(variance, kept, difference * tasks / kept, alpha, power)
        total = 2 * m_kept * kept
        plan.without_zero = {"trials_per_task": m_kept, "total_trials": total, "saved": plan.total_trials - total}
    return plan


def plan_lines(plan: Plan) -> list[str]:
    pp = 100 * plan.difference
    source = "from stated assumptions (no pilot)" if plan.assumed else "from the pilot"
    lines = [
        f"to see a difference of {pp:.1f} pp in pass@1 over {plan.tasks} tasks (two-sided alpha {plan.alpha:g}, "
        f"power {100 * plan.power:.0f}%), {source}:",
        f"  {plan.trials_per_task} trials per task and arm: {plan.total_trials} trials in all"
        + (f", about {plan.hours:.1f} hours at the pilot's rate" if plan.hours is not None else ""),
        f"  outcomes cluster by task (intra-task correlation {plan.icc:.2f}, pooled pass@1 "
        f"{100 * plan.pooled_rate:.1f}%): a binomial on trials would ask for {plan.binomial_trials_per_task}",
    ]
    if plan.zero_variance:
        names = ", ".join(plan.zero_variance[:20]) + (" …" if len(plan.zero_variance) > 20 else "")
        lines.append(f"  {len(plan.zero_variance)} tasks ended alike in every pilot trial: {names}")
        if plan.without_zero:
            w = plan.without_zero
            lines.append(
                f"  without them: {w['trials_per_task']} trials per task and arm, {w['total_trials']} in all "
                f"({w['saved']} fewer); a change on them then goes unseen, and pass@1 over the others is not "
                "comparable with one over all the tasks"
            )
    return lines
