"""Comparisons that stop once decided: an anytime-valid confidence sequence for the difference of two arms' pass@1,
looked at after every round.

A round is one trial of every task with each arm (attempt r of a bench); it gives every task's difference, D_t =
other_t - baseline_t in {-1, 0, 1}. The quantity decided on is mu, the mean over the tasks of their expected
differences: the difference of the arms' pass@1 over this task set, what the fixed report estimates. Tasks differ as
they do (one easy, one never solved): the test needs no model of how they cluster, only that a round holds each task
once and that rounds are independent repeats.

Around mu the bench keeps a confidence sequence: intervals that hold mu at every round at once with probability at
least 1 - alpha (Waudby-Smith & Ramdas, "Estimating means of bounded random variables by betting", JRSS-B 2024: the
hedged capital process with predictable plug-in bets, intersected over rounds). Stopping at the first decision keeps
both error rates at alpha, however often it looks:
- separable: 0 is outside the interval (a false one, mu = 0, has probability at most alpha);
- equivalent within the margin: the interval lies inside (-margin, +margin) (a false one, |mu| >= margin, likewise);
- otherwise not yet, until the budget (the bench's k) is spent.
With more than two arms each is compared with the first at alpha / (arms - 1) (Bonferroni), and the bench stops once
every comparison is decided.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

GRID = np.linspace(-1.0, 1.0, 2001)  # candidate values of the mean difference
BET_CAP = 0.5  # at most this share of what a bet can lose is staked (keeps every factor positive)


@dataclass
class Decision:
    rounds: int
    estimate: float  # the mean difference so far
    low: float  # the anytime-valid interval
    high: float
    verdict: str  # "separable", "equivalent" or "not yet"
    alpha: float
    margin: float

    def words(self) -> str:
        interval = f"[{100 * self.low:+.1f}, {100 * self.high:+.1f}] pp"
        what = {
            "separable": "separable",
            "equivalent": f"equivalent within ±{100 * self.margin:.1f} pp",
            "not yet": "not decided yet",
        }[self.verdict]
        return (
            f"{what} after {self.rounds} rounds: {100 * self.estimate:+.1f} pp, anytime {100 * (1 - self.alpha):.4g}% "
            f"interval {interval} (both error rates at most {self.alpha:.3g} at every look)"
        )


class ConfidenceSequence:
    """Anytime-valid intervals for the task-averaged difference mu, a round (each task's difference) at a time.

    For each candidate m, two capital processes bet that mu is above m and below it: a round multiplies the first by
    the product over tasks of (1 + lam (D_t - m)), D_t in {-1, 0, 1}, the second with -lam. The bet lam is fixed
    before the round, so under mu = m the round's expected factor is the product of (1 + lam (mu_t - m)) over the
    tasks, at most exp(lam * sum_t (mu_t - m)) = 1: tasks may differ as they like, only their average is m. Each
    process is then a nonnegative supermartingale at round ends, and by Ville's inequality half of each (the hedge)
    reaches 1/alpha with probability at most alpha, ever: the candidates it has not reached form the interval.
    """

    def __init__(self, alpha: float) -> None:
        self.alpha = alpha
        self.log_up = np.zeros_like(GRID)
        self.log_down = np.zeros_like(GRID)
        self.n = 0  # task observations so far
        self.rounds = 0
        self.total = 0.0
        self.squares = 0.0
        self.low, self.high = -1.0, 1.0

    def add(self, differences: Sequence[float]) -> None:
        d = np.clip(np.asarray(differences, dtype=float), -1.0, 1.0)
        # the bet, from earlier rounds only: the plug-in rule of the paper with its variance estimate (a prior of 1,
        # the widest a difference in [-1, 1] allows, worth one observation)
        mean = self.total / self.n if self.n else 0.0
        variance = (1.0 + max(self.squares - self.n * mean * mean, 0.0)) / (self.n + 1)
        t = self.n + d.size
        bet = math.sqrt(2.0 * math.log(2.0 / self.alpha) / (variance * t * math.log(1.0 + t)))
        with np.errstate(divide="ignore"):
            up = np.minimum(bet, BET_CAP / (1.0 + GRID))  # 1 + lam (D - m) >= 1 - lam (1 + m) > 0
            down = np.minimum(bet, BET_CAP / (1.0 - GRID))  # 1 - lam (D - m) >= 1 - lam (1 - m) > 0
        values, counts = np.unique(d, return_counts=True)  # a round's differences take few values (-1, 0, 1)
        excess = values[:, None] - GRID[None, :]
        self.log_up += (counts[:, None] * np.log1p(up * excess)).sum(axis=0)
        self.log_down += (counts[:, None] * np.log1p(-down * excess)).sum(axis=0)
        self.n, self.rounds = t, self.rounds + 1
        self.total += float(d.sum())
        self.squares += float((d * d).sum())
        capital = np.logaddexp(self.log_up, self.log_down) + math.log(0.5)
        kept = GRID[capital < math.log(1.0 / self.alpha)]
        if kept.size:
            self.low, self.high = max(self.low, float(kept.min())), min(self.high, float(kept.max()))
        if self.low > self.high:  # the grid's resolution: the intersection is one point
            self.low = self.high = (self.low + self.high) / 2

    @property
    def estimate(self) -> float:
        return self.total / self.n if self.n else 0.0


def decide(rounds: Sequence[Sequence[float]], alpha: float, margin: float) -> Decision:
    """The decision after `rounds` (each: every task's difference, other minus baseline)."""
    sequence = ConfidenceSequence(alpha)
    for differences in rounds:
        sequence.add(differences)
    low, high = sequence.low, sequence.high
    if low > 0 or high < 0:
        verdict = "separable"
    elif -margin < low and high < margin:
        verdict = "equivalent"
    else:
        verdict = "not yet"
    return Decision(len(rounds), sequence.estimate, low, high, verdict, alpha, margin)


def round_differences(
    baseline: dict[tuple[str, int], bool], other: dict[tuple[str, int], bool], tasks: Sequence[str]
) -> list[list[float]]:
    """Each round complete in both arms ((task, attempt) -> resolved, counted trials only), in order: every task's
    difference. The rounds end where a task lacks a counted trial in either arm (an infrastructure failure not yet
    run again): a round is used whole or not at all, as the test's guarantee needs."""
    found = []
    for r in range(1, 1 + max((a for _, a in baseline), default=0)):
        if not all((t, r) in baseline and (t, r) in other for t in tasks):
            break
        found.append([float(other[(t, r)]) - float(baseline[(t, r)]) for t in tasks])
    return found


def decisions(
    arms: dict[str, Sequence[Any]], tasks: Sequence[str], alpha: float, margin: float
) -> list[tuple[str, str, Decision]]:
    """Each arm (label -> its trials, in order) against the first, at alpha / (arms - 1): (baseline, other,
    decision). Trials that failed on infrastructure are not outcomes of the model: a round waits for them to be run
    again."""
    outcomes = {
        label: {(r.task, r.attempt): bool(r.resolved) for r in trials if not r.infrastructure}
        for label, trials in arms.items()
    }
    each = alpha / max(len(arms) - 1, 1)
    baseline, *others = list(arms)
    return [
        (baseline, other, decide(round_differences(outcomes[baseline], outcomes[other], tasks), each, margin))
        for other in others
    ]


def by_arm(results: Sequence[Any], labels: Sequence[str]) -> dict[str, list[Any]]:
    """A bench's trials grouped by arm, in the plan's order of arms."""
    found: dict[str, list[Any]] = {label: [] for label in labels}
    for r in results:
        if r.label in found:
            found[r.label].append(r)
    return found


def decision_lines(found: list[tuple[str, str, Decision]]) -> list[str]:
    return [f"{other} vs {baseline}: {d.words()}" for baseline, other, d in found]
