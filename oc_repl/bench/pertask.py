"""Per-task analysis across all trials of each task (one run or many): where a checkpoint is, task by task.

Three buckets: truly-cold (no trial ever got partial credit), partial-stuck (partial credit, never a full pass),
ever-solved. The reward is the trial's partial score; its mean and standard deviation over a task's trials tell
whether the task teaches anything: with the same reward in every trial (zero variance), a group-relative RL step
gets no signal from it. Failure signatures are counted per task; and for a task solved in some trials and not in
others, the first turn at which a solved trial's actions and a failed one's part is shown, with both actions.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from statistics import pstdev
from typing import Any

from oc_repl.bench.results import TrialResult
from oc_repl.bench.stats import counts, mean

EVER_SOLVED, PARTIAL_STUCK, TRULY_COLD = "ever-solved", "partial-stuck", "truly-cold"
BUCKETS = (EVER_SOLVED, PARTIAL_STUCK, TRULY_COLD)


@dataclass
class Divergence:
    turn: int  # 1-based: the first turn at which the two trials did something different
    solved: str  # which trial (arm #attempt)
    solved_action: str
    failed: str
    failed_action: str


@dataclass
class TaskAnalysis:
    task: str
    trials: int  # that count
    resolved: int
    bucket: str
    reward_mean: float
    reward_sd: float
    zero_variance: bool  # two trials or more, all with the same reward
    signatures: dict[str, int] = field(default_factory=dict)  # signature -> trials that show it
    divergence: Divergence | None = None


@dataclass
class TaskReport:
    tasks: list[TaskAnalysis]
    buckets: dict[str, int]
    zero_variance: list[str]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def bucket_of(partials: list[float], resolved: int) -> str:
    if resolved:
        return EVER_SOLVED
    return PARTIAL_STUCK if any(p > 0 for p in partials) else TRULY_COLD


def _name(result: TrialResult) -> str:
    return f"{result.label} #{result.attempt}"


def divergence(trials: list[TrialResult]) -> Divergence | None:
    """The earliest turn at which a solved trial and a failed one of the same task acted differently."""
    solved = [t for t in trials if t.resolved]
    failed = [t for t in trials if not t.resolved]
    best: Divergence | None = None
    for s in solved:
        for f in failed:
            turn = next(
                (i for i in range(max(len(s.actions), len(f.actions))) if _at(s.actions, i) != _at(f.actions, i)),
                None,
            )
            if turn is not None and (best is None or turn + 1 < best.turn):
                best = Divergence(turn + 1, _name(s), _at(s.actions, turn), _name(f), _at(f.actions, turn))
    return best


def _at(actions: list[str], i: int) -> str:
    return actions[i] if i < len(actions) else "(no turn)"


def analyse(results: list[TrialResult], count_infra: bool = False) -> TaskReport:
    by_task: dict[str, list[TrialResult]] = {}
    for r in results:
        if counts(r, count_infra):
            by_task.setdefault(r.task, []).append(r)
    tasks = []
    for task, trials in sorted(by_task.items()):
        partials = [t.partial for t in trials]
        resolved = sum(t.resolved for t in trials)
        sd = pstdev(partials) if len(partials) > 1 else 0.0
        signatures = Counter(name for t in trials for name in {s.split(":")[0] for s in t.signatures})
        tasks.append(
            TaskAnalysis(
                task=task,
                trials=len(trials),
                resolved=resolved,
                bucket=bucket_of(partials, resolved),
                reward_mean=mean(partials),
                reward_sd=sd,
                zero_variance=len(trials) > 1 and sd == 0,
                signatures=dict(sorted(signatures.items())),
                divergence=divergence(trials) if 0 < resolved < len(trials) else None,
            )
        )
    buckets = {b: sum(t.bucket == b for t in tasks) for b in BUCKETS}
    return TaskReport(tasks=tasks, buckets=buckets, zero_variance=[t.task for t in tasks if t.zero_variance])


def task_filter(names: list[str]) -> str:
    """The tasks as a file `bench --skip-tasks FILE` reads: one name a line."""
    head = "# tasks whose trials all scored the same: no signal for a group-relative RL step\n"
    return head + "".join(f"{name}\n" for name in names)


def read_task_filter(text: str) -> set[str]:
    return {line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")}
