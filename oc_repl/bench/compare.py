"""Arms side by side: one bench's protocols (or models, or servers), or several bench directories (checkpoints).

Two arms are compared on the tasks both ran: the mean over those tasks of the difference of their per-task pass@1
(and of their mean partial score), with a 95% interval from a paired bootstrap over tasks (pairing takes each task's
difficulty out of the difference); an exact test on the trials (Fisher's), or on the tasks when each has one trial
per arm (McNemar's, on the tasks only one of them solved); the tasks that flip either way; and a verdict in words
that says, when the difference is not separable, how large a rise and a fall would have to be to be seen with 80% power
at these sizes (power.py: exact, the ceiling and floor respected), and how many trials per task would separate the one
observed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from oc_repl.bench.benchplan import arm_options, setting_differences, task_hashes
from oc_repl.bench.exact import ALPHA, POWER, fisher, mcnemar, trials_needed
from oc_repl.bench.power import detectable
from oc_repl.bench.results import TrialResult
from oc_repl.bench.stats import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, ArmStats, arm_stats, bootstrap_ci, mean
from oc_repl.bench.trend import Trend, trend

METHOD = f"paired bootstrap over tasks, {BOOTSTRAP_RESAMPLES} resamples, seed {BOOTSTRAP_SEED}"


@dataclass
class Arm:
    """What is compared: a label, its finished trials, and what was planned for it."""

    label: str
    trials: list[TrialResult]
    planned_tasks: list[str] = field(default_factory=list)
    k: int = 0
    run: str = ""
    options: dict[str, Any] = field(default_factory=dict)  # the run options its plan records
    task_hashes: dict[str, str] = field(default_factory=dict)  # task -> content hash, where the plan records one


@dataclass
class TaskMove:
    """One task whose resolved share moved between two arms."""

    task: str
    baseline: tuple[int, int]  # (resolved, trials that count)
    other: tuple[int, int]
    change: float  # its pass@1 in `other` less that in `baseline`
    p_value: float  # Fisher's exact test on the task's own trials


@dataclass
class Comparison:
    baseline: str
    other: str
    tasks: int  # tasks both ran (with a trial that counts)
    difference: float  # mean over those tasks of pass@1(other) - pass@1(baseline)
    ci_low: float
    ci_high: float
    partial_difference: float  # the same, of the mean partial score
    partial_ci_low: float
    partial_ci_high: float
    baseline_resolved: int  # on the common tasks
    baseline_trials: int
    other_resolved: int
    other_trials: int
    test: str  # the exact test the verdict rests on
    p_value: float
    fisher_p: float
    mcnemar_p: float | None  # with one trial per task and arm
    separable: bool
    # the smallest rise above the baseline's rate, and fall below it, that 80% power sees at these sizes, in
    # percentage points; None where none is (near 100% no rise may be)
    detectable_pp: float | None
    detectable_fall_pp: float | None
    trials_per_task_needed: int | None  # to separate the observed difference (None: none was observed)
    verdict: str
    gained: list[str] = field(default_factory=list)  # resolved by `other` at least once, never by `baseline`
    lost: list[str] = field(default_factory=list)  # the other way round
    moved: list[TaskMove] = field(default_factory=list)  # every task whose rate changed, the largest change first
    settings_differ: list[str] = field(default_factory=list)  # "--flag: baseline's vs other's", the arm's own aside
    tasks_differ: list[str] = field(default_factory=list)  # common tasks whose content differs between the two
    method: str = METHOD


@dataclass
class Summary:
    arms: list[ArmStats]
    comparisons: list[Comparison]
    tasks: list[str]
    count_infra: bool = False
    trend: Trend | None = None  # a sweep's (three checkpoints or more)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def compare(baseline: ArmStats, other: ArmStats) -> Comparison | None:
    common = sorted(set(baseline.per_task) & set(other.per_task))
    if not common:
        return None

    def rate(stats: ArmStats, task: str) -> float:
        n, c = stats.per_task[task]
        return c / n

    def partial(stats: ArmStats, task: str) -> float:
        return stats.per_task_partial[task] / stats.per_task[task][0]

    differences = [rate(other, task) - rate(baseline, task) for task in common]
    partials = [partial(other, task) - partial(baseline, task) for task in common]
    low, high = bootstrap_ci(differences)
    partial_low, partial_high = bootstrap_ci(partials)
    a_n, a_c = (sum(baseline.per_task[t][i] for t in common) for i in (0, 1))
    b_n, b_c = (sum(other.per_task[t][i] for t in common) for i in (0, 1))
    gained = [t for t in common if other.per_task[t][1] and not baseline.per_task[t][1]]
    lost = [t for t in common if baseline.per_task[t][1] and not other.per_task[t][1]]
    moved = sorted(
        (move for t in common if (move := _move(t, baseline.per_task[t], other.per_task[t])).change),
        key=lambda m: (-abs(m.change), m.p_value, m.task),
    )
    fisher_p = fisher(a_c, a_n, b_c, b_n)
    single = all(baseline.per_task[t][0] == 1 and other.per_task[t][0] == 1 for t in common)
    mcnemar_p = mcnemar(len(lost), len(gained)) if single else None
    test, p = (
        ("exact McNemar test on tasks", mcnemar_p)
        if mcnemar_p is not None
        else ("Fisher's exact test on trials", fisher_p)
    )
    p1, p2 = a_c / a_n, b_c / b_n
    needed = trials_needed(p1, p2)
    comparison = Comparison(
        baseline=baseline.label,
        other=other.label,
        tasks=len(common),
        difference=mean(differences),
        ci_low=low,
        ci_high=high,
        partial_difference=mean(partials),
        partial_ci_low=partial_low,
        partial_ci_high=partial_high,
        baseline_resolved=a_c,
        baseline_trials=a_n,
        other_resolved=b_c,
        other_trials=b_n,
        test=test,
        p_value=p,
        fisher_p=fisher_p,
        mcnemar_p=mcnemar_p,
        separable=p < ALPHA,
        detectable_pp=_pp(detectable(p1, a_n, b_n)),
        detectable_fall_pp=_pp(detectable(p1, a_n, b_n, rise=False)),
        trials_per_task_needed=None if needed is None else -(-needed // len(common)),
        verdict="",
        gained=gained,
        lost=lost,
        moved=moved,
        settings_differ=[f"{flag}: {a} vs {b}" for flag, a, b in setting_differences(baseline.options, other.options)],
        tasks_differ=[t for t in common if _hash_differs(baseline, other, t)],
    )
    comparison.verdict = verdict(comparison)
    return comparison


def _hash_differs(baseline: ArmStats, other: ArmStats, task: str) -> bool:
    a, b = baseline.task_hashes.get(task), other.task_hashes.get(task)
    # a hash names its kind before a colon (Harbor's checksum: "harbor:..."): hashes of two kinds say nothing
    return a is not None and b is not None and a.rpartition(":")[0] == b.rpartition(":")[0] and a != b


def _pp(share: float | None) -> float | None:
    return None if share is None else 100 * share


def _move(task: str, baseline: tuple[int, int], other: tuple[int, int]) -> TaskMove:
    (n1, c1), (n2, c2) = baseline, other
    return TaskMove(task, (c1, n1), (c2, n2), c2 / n2 - c1 / n1, fisher(c1, n1, c2, n2))


def verdict(c: Comparison) -> str:
    """The comparison in plain words."""
    a, b = c.baseline_resolved / c.baseline_trials, c.other_resolved / c.other_trials
    observed = 100 * (b - a)
    said = (
        f"{c.other} vs {c.baseline}: {100 * b:.1f}% vs {100 * a:.1f}% of trials resolved ({observed:+.1f} pp; "
        f"{c.test} p = {c.p_value:.2g})"
    )
    if c.separable:
        better = c.other if observed > 0 else c.baseline
        words = f"{said}: separable at the {100 * ALPHA:.0f}% level; {better} resolves more"
        if c.ci_low <= 0 <= c.ci_high:  # the trials tell them apart, the tasks not yet: say so
            words += (
                f", though the paired interval over tasks ({100 * c.ci_low:+.0f} … {100 * c.ci_high:+.0f} pp) still "
                "holds zero: more tasks would tell whether it holds beyond these"
            )
        return words
    rise = "no rise" if c.detectable_pp is None else f"a rise of {c.detectable_pp:.1f} pp or more"
    fall = "no fall" if c.detectable_fall_pp is None else f"a fall of {c.detectable_fall_pp:.1f} pp or more"
    seen = "no difference" if c.detectable_pp is None and c.detectable_fall_pp is None else f"{rise}, and {fall},"
    words = (
        f"{said}: not separable at this sample size: Fisher's test on {c.baseline_trials} and {c.other_trials} "
        f"trials sees {seen} with {100 * POWER:.0f}% power"
    )
    if c.trials_per_task_needed is None:
        return f"{words}; no difference was observed at all"
    return f"{words}; you would need about {c.trials_per_task_needed} trials per task to separate {observed:+.1f} pp"


def summarize(arms: Sequence[Arm], count_infra: bool = False, consecutive: bool = False) -> Summary:
    """Each arm's numbers, and each arm against the first (or, `consecutive`, against the one before it: a sweep
    over checkpoints in order)."""
    stats = [
        replace(
            arm_stats(a.label, a.trials, a.planned_tasks, a.k, count_infra, a.run),
            options=a.options,
            task_hashes=a.task_hashes,
        )
        for a in arms
        if a.trials
    ]
    pairs = zip(stats, stats[1:], strict=False) if consecutive else ((stats[0], s) for s in stats[1:])
    comparisons = [c for baseline, other in pairs if (c := compare(baseline, other)) is not None]
    tasks = sorted({t.task for a in arms for t in a.trials})
    swept = (
        trend(stats, lambda first, other: bool((c := compare(first, other)) and c.separable)) if consecutive else None
    )
    return Summary(arms=stats, comparisons=comparisons, tasks=tasks, count_infra=count_infra, trend=swept)


def arms_of(results: list[TrialResult], plan: dict[str, Any], run: str = "", prefix: str = "") -> list[Arm]:
    """A bench directory's arms, in the order its plan names them, then any others found."""
    planned_tasks = [str(t.get("name")) for t in plan.get("tasks") or [] if isinstance(t, dict) and t.get("name")]
    k = int(plan.get("k") or 0)
    grouped: dict[str, list[TrialResult]] = {label: [] for label in plan.get("protocols") or ()}
    for result in results:
        grouped.setdefault(result.label, []).append(result)
    hashes = task_hashes(plan)
    return [
        Arm(prefix + label, trials, planned_tasks, k, run, arm_options(plan, label), hashes)
        for label, trials in grouped.items()
    ]


def run_labels(dirs: Sequence[Path]) -> list[str]:
    """A label per bench directory: its name, or the path as given when two share a name."""
    names = [d.name or str(d) for d in dirs]
    return [name if names.count(name) == 1 else str(d) for name, d in zip(names, dirs, strict=True)]
