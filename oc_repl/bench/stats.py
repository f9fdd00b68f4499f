"""The numbers of a bench: per protocol (pass@k with the unbiased estimator, rates, means) and paired comparisons.

pass@k of a task with n trials of which c resolved is 1 - C(n-c, k) / C(n, k) (the chance that k trials drawn
without replacement from the n include a resolved one); a protocol's pass@k is its mean over tasks, for k up to the
fewest trials any task has.

Two protocols are compared on the tasks both ran: the difference of their per-task pass@1, averaged over tasks, with
a 95% confidence interval from a paired bootstrap over tasks (10 000 resamples, fixed seed). Tasks are the unit that
varies (they differ far more from each other than trials of one task do), pairing takes each task's difficulty out
of the difference, and the bootstrap assumes no normality of a bounded, lumpy difference over few tasks; the seed
makes a report reproducible. With few tasks the interval is wide, as it should be.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from math import comb
from typing import Any

from oc_repl.bench.results import TrialResult

BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 0
LEVEL = 0.95


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one task: n trials, c resolved, 1 <= k <= n."""
    if not 1 <= k <= n or not 0 <= c <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n and 0 <= c <= n (n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


@dataclass
class ProtocolStats:
    protocol: str
    tasks: int
    trials: int
    resolved: int
    k: int  # pass@k is given for 1..k: the fewest trials of any of its tasks
    pass_at: dict[int, float]
    mean_turns: float
    parse_error_rate: float  # parse errors per model turn
    salvaged_call_rate: float  # tool calls salvaged from text, of all tool calls
    mean_tokens_in: float
    mean_tokens_out: float
    mean_wall_time_s: float
    total_wall_time_s: float
    failure_modes: dict[str, int]
    per_task: dict[str, tuple[int, int]]  # task -> (trials, resolved)


@dataclass
class Comparison:
    baseline: str
    other: str
    tasks: int  # tasks both ran
    difference: float  # mean over those tasks of pass@1(other) - pass@1(baseline)
    ci_low: float
    ci_high: float
    gained: list[str] = field(default_factory=list)  # resolved by `other` at least once, never by `baseline`
    lost: list[str] = field(default_factory=list)  # the other way round
    method: str = f"paired bootstrap over tasks, {BOOTSTRAP_RESAMPLES} resamples, seed {BOOTSTRAP_SEED}"


@dataclass
class Summary:
    protocols: list[ProtocolStats]
    comparisons: list[Comparison]
    tasks: list[str]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def protocol_stats(protocol: str, trials: list[TrialResult]) -> ProtocolStats:
    per_task: dict[str, tuple[int, int]] = {}
    for t in trials:
        n, c = per_task.get(t.task, (0, 0))
        per_task[t.task] = (n + 1, c + t.resolved)
    k = min(n for n, _ in per_task.values())
    pass_at = {j: _mean([pass_at_k(n, c, j) for n, c in per_task.values()]) for j in range(1, k + 1)}
    turns = sum(t.turns for t in trials)
    calls = sum(t.tool_calls_native + t.tool_calls_salvaged for t in trials)
    return ProtocolStats(
        protocol=protocol,
        tasks=len(per_task),
        trials=len(trials),
        resolved=sum(t.resolved for t in trials),
        k=k,
        pass_at=pass_at,
        mean_turns=_mean([t.turns for t in trials]),
        parse_error_rate=sum(t.parse_errors for t in trials) / turns if turns else 0.0,
        salvaged_call_rate=sum(t.tool_calls_salvaged for t in trials) / calls if calls else 0.0,
        mean_tokens_in=_mean([t.tokens_in for t in trials]),
        mean_tokens_out=_mean([t.tokens_out for t in trials]),
        mean_wall_time_s=_mean([t.wall_time_s for t in trials]),
        total_wall_time_s=sum(t.wall_time_s for t in trials),
        failure_modes=dict(Counter(t.failure_mode for t in trials)),
        per_task=dict(sorted(per_task.items())),
    )


def bootstrap_ci(differences: Sequence[float], resamples: int = BOOTSTRAP_RESAMPLES) -> tuple[float, float]:
    """Percentile interval of the mean of `differences` resampled with replacement (fixed seed)."""
    rng = random.Random(BOOTSTRAP_SEED)
    m = len(differences)
    means = sorted(sum(rng.choices(differences, k=m)) / m for _ in range(resamples))
    tail = (1 - LEVEL) / 2
    return means[int(tail * resamples)], means[min(resamples - 1, int((1 - tail) * resamples))]


def compare(baseline: ProtocolStats, other: ProtocolStats) -> Comparison | None:
    common = sorted(set(baseline.per_task) & set(other.per_task))
    if not common:
        return None

    def rate(stats: ProtocolStats, task: str) -> float:
        n, c = stats.per_task[task]
        return c / n

    differences = [rate(other, task) - rate(baseline, task) for task in common]
    low, high = bootstrap_ci(differences)
    return Comparison(
        baseline=baseline.protocol,
        other=other.protocol,
        tasks=len(common),
        difference=_mean(differences),
        ci_low=low,
        ci_high=high,
        gained=[t for t in common if other.per_task[t][1] and not baseline.per_task[t][1]],
        lost=[t for t in common if baseline.per_task[t][1] and not other.per_task[t][1]],
    )


def summarize(results: list[TrialResult], protocols: Sequence[str] = ()) -> Summary:
    """Per-protocol statistics (in the order given, then any others found) and each protocol against the first."""
    by_protocol: dict[str, list[TrialResult]] = {p: [] for p in protocols}
    for result in results:
        by_protocol.setdefault(result.protocol, []).append(result)
    stats = [protocol_stats(p, trials) for p, trials in by_protocol.items() if trials]
    comparisons = [c for other in stats[1:] if (c := compare(stats[0], other)) is not None]
    return Summary(protocols=stats, comparisons=comparisons, tasks=sorted({r.task for r in results}))
