"""The numbers of one arm (a protocol, a model, a server, a run: whatever a bench or a comparison sets side by side).

pass@k of a task with n trials of which c resolved is 1 - C(n-c, k) / C(n, k) (the chance that k trials drawn
without replacement from the n include a resolved one); an arm's pass@k is its mean over tasks, for k up to the
fewest trials any task has. A trial's partial score is its share of passed tests (results.py).

Trials that ended on an infrastructure failure (`Status.infrastructure`) say nothing about the model: they are left
out of the score unless asked (`count_infra`), and counted apart. Every score has two denominators: the trials
finished (those that count), and the trials planned, each missing one counted as a failure with a score of zero. The
second never flatters a run that lost trials, so it is shown first.

Intervals: Wilson's for pass@1 (over trials); for the mean partial score a bootstrap over tasks (10 000 resamples,
fixed seed): tasks differ far more from each other than trials of one task do, so they are the unit resampled, and
the seed makes a report reproducible.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from math import comb
from typing import Any

from oc_repl.bench.exact import LEVEL, wilson
from oc_repl.bench.results import TrialResult
from oc_repl.outcome import FAILURE_MODES

BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 0
BOOTSTRAP_BLOCK = 2_000_000  # draws held at once (16 MB of indices)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one task: n trials, c resolved, 1 <= k <= n."""
    if not 1 <= k <= n or not 0 <= c <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n and 0 <= c <= n (n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def bootstrap_ci(values: Sequence[float], resamples: int = BOOTSTRAP_RESAMPLES) -> tuple[float, float]:
    """Percentile interval of the mean of `values` resampled with replacement (fixed seed)."""
    return bootstrap_ratio_ci([(v, 1.0) for v in values], resamples)


def bootstrap_ratio_ci(
    parts: Sequence[tuple[float, float]], resamples: int = BOOTSTRAP_RESAMPLES
) -> tuple[float, float]:
    """Percentile interval of sum(x) / sum(n) over `parts` (x, n), the parts (tasks) resampled with replacement:
    the mean over trials, with a task's trials kept together. Drawn in blocks of resamples (numpy), so that a
    thousand tasks take a fraction of a second and the memory stays bounded."""
    if not parts:
        return 0.0, 0.0
    import numpy as np

    x = np.array([part[0] for part in parts], dtype=float)
    n = np.array([part[1] for part in parts], dtype=float)
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    m, ratios = len(parts), np.empty(resamples)
    block = max(1, BOOTSTRAP_BLOCK // m)
    for start in range(0, resamples, block):
        rows = min(block, resamples - start)
        drawn = rng.integers(0, m, size=(rows, m))
        sums, totals = x[drawn].sum(axis=1), n[drawn].sum(axis=1)
        ratios[start : start + rows] = np.divide(sums, totals, out=np.zeros(rows), where=totals != 0)
    ratios.sort()
    tail = (1 - LEVEL) / 2
    return float(ratios[int(tail * resamples)]), float(ratios[min(resamples - 1, int((1 - tail) * resamples))])


@dataclass
class Score:
    """A proportion or a mean with its 95% interval and what it is over."""

    value: float
    low: float
    high: float
    over: int  # trials


@dataclass
class ArmStats:
    label: str
    tasks: int  # tasks with a trial that counts
    planned: int  # trials planned (tasks × k)
    trials: int  # trials finished, infrastructure failures included
    infrastructure: int  # of those, failures of the infrastructure
    scored: int  # trials that count: the finished ones, less infrastructure failures unless they are counted
    resolved: int
    k: int  # pass@k is given for 1..k: the fewest trials that count of any of its tasks
    pass_at: dict[int, float]  # over the trials that count
    pass_at_planned: dict[int, float]  # over the planned trials, each missing one unresolved
    pass1_planned: Score
    pass1: Score
    partial_planned: Score
    partial: Score
    mean_turns: float
    parse_error_rate: float  # parse errors per model turn
    salvaged_call_rate: float  # tool calls salvaged from text, of all tool calls
    mean_tokens_in: float
    mean_tokens_out: float
    mean_wall_time_s: float
    total_wall_time_s: float
    failure_modes: dict[str, int]
    infra_modes: dict[str, int]
    per_task: dict[str, tuple[int, int]]  # task -> (trials that count, resolved)
    per_task_partial: dict[str, float]  # task -> sum of the partial scores of its trials that count
    infra_errors: dict[str, str] = field(default_factory=dict)  # failure mode -> the last error it ended with
    run: str = ""  # the bench directory it comes from
    options: dict[str, Any] = field(default_factory=dict)  # the run options its plan records for it
    task_hashes: dict[str, str] = field(default_factory=dict)  # task -> its content hash, where recorded


def _in_order(found: Counter[str]) -> dict[str, int]:
    """Counts of failure modes in bench's order of them."""
    return {mode: found[mode] for mode in FAILURE_MODES if found[mode]}


def counts(result: TrialResult, count_infra: bool) -> bool:
    """Whether a finished trial counts in the score."""
    return count_infra or not result.infrastructure


def arm_stats(
    label: str,
    trials: list[TrialResult],
    planned_tasks: Sequence[str] = (),
    k_planned: int = 0,
    count_infra: bool = False,
    run: str = "",
) -> ArmStats:
    scored = [t for t in trials if counts(t, count_infra)]
    infra = [t for t in trials if t.infrastructure]
    per_task: dict[str, tuple[int, int]] = {}
    partial: dict[str, float] = {}
    for t in scored:
        n, c = per_task.get(t.task, (0, 0))
        per_task[t.task] = (n + 1, c + t.resolved)
        partial[t.task] = partial.get(t.task, 0.0) + t.partial
    k = min((n for n, _ in per_task.values()), default=0)
    pass_at = {j: mean([pass_at_k(n, c, j) for n, c in per_task.values()]) for j in range(1, k + 1)}
    tasks_planned = sorted(set(planned_tasks) | {t.task for t in trials})
    k_planned = max([k_planned, *(n for n, _ in per_task.values())]) if tasks_planned else 0
    planned = max(len(tasks_planned) * k_planned, len(scored))
    padded = [(max(k_planned, per_task.get(task, (0, 0))[0]), per_task.get(task, (0, 0))[1]) for task in tasks_planned]
    pass_at_planned = {j: mean([pass_at_k(n, c, j) for n, c in padded]) for j in range(1, k_planned + 1)}
    resolved = sum(t.resolved for t in scored)
    turns = sum(t.turns for t in trials)
    calls = sum(t.tool_calls_native + t.tool_calls_salvaged for t in trials)
    finished_parts = [(partial[task], n) for task, (n, _) in per_task.items()]
    planned_parts = [(partial.get(task, 0.0), n) for task, (n, _) in zip(tasks_planned, padded, strict=True)]
    total_partial = sum(partial.values())
    return ArmStats(
        label=label,
        tasks=len(per_task),
        planned=planned,
        trials=len(trials),
        infrastructure=len(infra),
        scored=len(scored),
        resolved=resolved,
        k=k,
        pass_at=pass_at,
        pass_at_planned=pass_at_planned,
        pass1_planned=Score(resolved / planned if planned else 0.0, *wilson(resolved, planned), planned),
        pass1=Score(resolved / len(scored) if scored else 0.0, *wilson(resolved, len(scored)), len(scored)),
        partial_planned=Score(total_partial / planned if planned else 0.0, *bootstrap_ratio_ci(planned_parts), planned),
        partial=Score(total_partial / len(scored) if scored else 0.0, *bootstrap_ratio_ci(finished_parts), len(scored)),
        mean_turns=mean([t.turns for t in trials]),
        parse_error_rate=sum(t.parse_errors for t in trials) / turns if turns else 0.0,
        salvaged_call_rate=sum(t.tool_calls_salvaged for t in trials) / calls if calls else 0.0,
        mean_tokens_in=mean([t.tokens_in for t in trials]),
        mean_tokens_out=mean([t.tokens_out for t in trials]),
        mean_wall_time_s=mean([t.wall_time_s for t in trials]),
        total_wall_time_s=sum(t.wall_time_s for t in trials),
        failure_modes=_in_order(Counter(t.failure_mode for t in trials)),
        infra_modes=_in_order(Counter(t.failure_mode for t in infra)),
        per_task=dict(sorted(per_task.items())),
        per_task_partial=dict(sorted(partial.items())),
        infra_errors={t.failure_mode: t.error.strip().splitlines()[0] for t in infra if t.error.strip()},
        run=run,
    )
