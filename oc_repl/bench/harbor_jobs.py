"""Harbor's job directories read as benches: `bench report | compare | tasks | export` take a job (or a folder of
jobs) wherever they take a bench directory.

A job is a folder with Harbor's `config.json` (it names `job_name`) and a folder per trial; a trial is finished once
it holds Harbor's `result.json` (Harbor removes an unfinished one when it resumes the job, and a retry writes over
the same trial, so a trial is never counted twice). Each becomes a trial record:

- its arm: the agent, with oc-repl's protocol for oc-repl's agent, and the model (`oc-repl:camel@qwen3-8b`);
- its verdict: the reward Harbor's verifier wrote, as it is (resolved at 1); for oc-repl's agent its transcript's
  outcome and tamper evidence as well (a tampered trial is `tampered`, whatever the reward);
- how it failed: Harbor's exception, by the failure cause Harbor's own policy gives its type (harbor.models.trial.
  error_policy, 0.25): the agent's own ends (its time, its context, a refusal) are the model's; an environment that
  did not start, a model provider that failed, a verifier that gave no reward, Harbor's own failure are the
  infrastructure's (Harbor holds their rewards invalid too), each with its cause in the record's error.

Trials of one (task, arm) are numbered in the order they started. Harbor's task checksum stands in for the task's
content hash, so two jobs of changed tasks are told apart; it is never compared with a local bench's hash.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from oc_repl.bench.results import TrialResult, from_transcript
from oc_repl.outcome import Status, final
from oc_repl.protocols.kinds import DEFAULT as DEFAULT_PROTOCOL
from oc_repl.safejson import BadInput, load_file

CONFIG, RESULT, LOCK = "config.json", "result.json", "lock.json"
TRANSCRIPT = "agent/oc-repl.jsonl"  # what oc-repl's Harbor agent writes into a trial (integrations/harbor/agent.py)
FORMAT = "harbor"
OC_REPL_AGENT = "oc_repl.harbor:OcRepl"

# Harbor's failure causes by exception type (error_policy.py), as oc-repl's outcomes: the model's own ends first.
_MODEL_OWN = {
    "AgentTimeoutError": Status.AGENT_TIMEOUT,
    "ContextWindowExceededError": Status.CONTEXT_LENGTH,
    "ContextLengthExceededError": Status.CONTEXT_LENGTH,
    "OutputTokenExceededError": Status.CONTEXT_LENGTH,
    "OutputLengthExceededError": Status.CONTEXT_LENGTH,
    "AgentSafetyRefusalError": Status.DONE,
    "ContentPolicyViolationError": Status.DONE,
}
_SANDBOX = {
    "EnvironmentStartTimeoutError", "AgentSetupTimeoutError", "HealthcheckError", "SandboxLikelyOutOfMemoryError",
    "MemoryLimitExceededError", "SSHAccessError", "GKEExecStreamClosedError", "GKEPodNotFoundError",
    "RuntimeRequestError", "AddTestsDirError", "DownloadVerifierDirError",
}  # fmt: skip
_BUILD = {"SandboxBuildFailedError"}
_PROVIDER = {
    "ApiError", "ApiRateLimitError", "ApiInternalServerError", "ApiOverloadedError", "ApiConnectionClosedError",
    "ApiResponseStalledError", "UnknownApiError", "NetworkConnectionError", "ApiConnectionError", "ApiUsageLimitError",
    "RateLimitError", "InternalServerError", "ServiceUnavailableError", "APIConnectionError", "APIError", "Timeout",
    "BadRequestError", "UnprocessableEntityError", "UnsupportedParamsError", "APIResponseValidationError",
    "BudgetExceededError", "AgentAuthenticationError", "ModelNotFoundError", "ApiProviderResourceNotFoundError",
    "AuthenticationError", "PermissionDeniedError", "NotFoundError",
}  # fmt: skip
_VERIFIER = {"VerifierTimeoutError", "RewardFileNotFoundError", "RewardFileEmptyError", "VerifierOutputParseError"}
_CANCELLED = {"CancelledError"}


def is_job(path: Path) -> bool:
    try:
        config = load_file(path / CONFIG)
    except BadInput:
        return False
    return isinstance(config, dict) and "job_name" in config


def jobs_in(path: Path) -> list[Path]:
    """The Harbor jobs `path` is or holds (a folder of jobs, as `harbor run -o jobs` leaves), by name; [] when it
    is neither."""
    if is_job(path):
        return [path]
    return sorted(p for p in path.iterdir() if p.is_dir() and is_job(p)) if path.is_dir() else []


def load(path: Path) -> tuple[list[TrialResult], dict[str, Any]]:
    """The finished trials of the job(s) at `path` and a plan made from their configs (tasks, arms, attempts)."""
    jobs = jobs_in(path)
    trials: list[tuple[TrialResult, str]] = []
    names: dict[str, str] = {}  # task -> Harbor's checksum, where a trial recorded it
    arms: list[str] = []
    k, shapes = 0, set()
    for job in jobs:
        config = load_file(job / CONFIG)
        attempts = int(config.get("n_attempts") or 1) if isinstance(config, dict) else 1
        k = max(k, attempts)
        trial_dirs = sorted(p for p in job.iterdir() if p.is_dir())
        planned = _locked(job) or [_planned(t) for t in trial_dirs]  # the lock file, else each trial's own config
        shapes.add((attempts, frozenset(task for task, _ in planned if task)))
        if len(shapes) > 1:  # one plan holds every arm: the same tasks, as often
            raise BadInput(
                path, f"its jobs plan different tasks or attempts; compare them: oc-repl bench compare {path}/*"
            )
        for task, arm in planned:
            if task:
                names.setdefault(task, "")
            if arm and arm not in arms:
                arms.append(arm)
        for found in _results(trial_dirs, path):
            trials.append(found)
            names[found[0].task] = found[1] or names.get(found[0].task, "")
    results = _numbered([t for t, _ in trials])
    plan = {
        "format": FORMAT,
        "tasks": [{"name": n, **({"sha256": f"harbor:{s}"} if s else {})} for n, s in sorted(names.items())],
        "protocols": arms,
        "k": k,
        "jobs": [str(j) for j in jobs],
    }
    return results, plan


def finished(path: Path) -> list[TrialResult]:
    """The finished trials of the job(s) at `path` alone, numbered as `load` numbers them: what a watch reads at
    every look, without the plan (a lock file of thousands of trials) it read once."""
    found = [t for job in jobs_in(path) for t, _ in _results(sorted(p for p in job.iterdir() if p.is_dir()), path)]
    return _numbered(found)


def _results(trial_dirs: list[Path], root: Path) -> list[tuple[TrialResult, str]]:
    return [found for trial in trial_dirs if (found := _finished(trial, root)) is not None]


def _locked(job: Path) -> list[tuple[str, str]]:
    """The task and arm of every trial the job plans, as Harbor's lock file lists them when the job starts."""
    try:
        lock = load_file(job / LOCK)
    except BadInput:
        return []
    trials = lock.get("trials") if isinstance(lock, dict) else None
    return [
        (str((t.get("task") or {}).get("name") or ""), arm_label(t.get("agent") or {}, {}))
        for t in trials or []
        if isinstance(t, dict)
    ]


def ended(path: Path) -> bool:
    """Harbor has finished every job at `path` (its job result says when; a cancelled trial never finishes)."""
    for job in jobs_in(path):
        try:
            result = load_file(job / RESULT)
        except BadInput:
            return False
        if not isinstance(result, dict) or not result.get("finished_at"):
            return False
    return True


def never_ran(path: Path) -> list[Path]:
    """Trials Harbor stopped before their agent ran (a cancelled job writes them a result with no exception and no
    verdict): Harbor's resume keeps them as finished, so they are run again only once removed."""
    found = []
    for job in jobs_in(path):
        for trial in sorted(p for p in job.iterdir() if (p / RESULT).is_file()):
            with contextlib.suppress(BadInput):
                data = load_file(trial / RESULT)
                if isinstance(data, dict) and "task_name" in data and _status(data, {}, False)[0] is Status.INTERRUPTED:
                    found.append(trial)
    return found


def running(path: Path) -> list[Path]:
    """The trials of the job(s) at `path` that started and have no result yet."""
    return [
        t
        for job in jobs_in(path)
        for t in sorted(job.iterdir())
        if (t / CONFIG).is_file() and not (t / RESULT).exists()
    ]


def _planned(trial: Path) -> tuple[str, str]:
    """The task and arm a trial directory was made for, from Harbor's trial config (there before it finishes)."""
    try:
        config = load_file(trial / CONFIG)
    except BadInput:
        return "", ""
    if not isinstance(config, dict):
        return "", ""
    task = config.get("task") or {}
    name = (
        task.get("name") or Path(str(task.get("path") or "")).name or str(config.get("trial_name", "")).split("__")[0]
    )
    return str(name), arm_label(config.get("agent") or {}, {})


def arm_label(agent: dict[str, Any], metadata: dict[str, Any]) -> str:
    """An arm's name: the agent (oc-repl's by its protocol too) and the model it drove."""
    ours = OC_REPL_AGENT in (agent.get("import_path"), agent.get("name"))  # `--agent` takes a name or a path
    name = "oc-repl" if ours else str(agent.get("name") or agent.get("import_path") or "oracle")  # Harbor's default
    given = metadata.get("protocol") or (agent.get("kwargs") or {}).get("protocol")
    protocol = (given or DEFAULT_PROTOCOL) if ours else ""
    model = agent.get("model_name") or ""
    return name + (f":{protocol}" if protocol else "") + (f"@{model}" if model else "")


def _finished(trial: Path, root: Path) -> tuple[TrialResult, str] | None:
    """The trial's record and Harbor's task checksum, or None while it runs (no result.json yet). A watch reads a
    job again every few seconds: a result already read, unchanged since, is not parsed again."""
    try:
        stat = (trial / RESULT).stat()
    except FileNotFoundError:
        return None
    return _parsed(trial, root, (stat.st_mtime_ns, stat.st_size))


@lru_cache(maxsize=100_000)
def _parsed(trial: Path, root: Path, stamp: tuple[int, int]) -> tuple[TrialResult, str] | None:
    data = load_file(trial / RESULT)
    if not isinstance(data, dict) or "task_name" not in data:
        raise BadInput(trial / RESULT, "not a Harbor trial result")
    config = data.get("config") or {}
    agent = config.get("agent") or {}
    context = data.get("agent_result") or {}
    metadata = context.get("metadata") or {}
    label = arm_label(agent, metadata)
    transcript = trial / TRANSCRIPT
    ours = transcript.is_file()
    status, error = _status(data, metadata, ours)
    if status is Status.INTERRUPTED:
        return None  # cancelled before it finished: missing, as a trial still running is
    protocol = str(metadata.get("protocol") or label)
    started, ended = _time(data.get("started_at")), _time(data.get("finished_at"))
    # the transcript oc-repl's agent left (another agent's trial has none: its record is Harbor's alone)
    base = from_transcript(
        transcript,
        task=str(data["task_name"]),
        protocol=protocol,
        attempt=1,
        exit_code=None,
        wall_time_s=max(ended - started, 0.0),
        started_at=started,
        task_format=FORMAT,
        arm=label,
    )
    result = replace(
        base,
        outcome=status.value,
        failure_mode=status.failure_mode(),
        resolved=status is Status.VERIFIED,
        reward=None if status.infrastructure else _reward(data),
        tokens_in=context.get("n_input_tokens") or base.tokens_in,
        tokens_out=context.get("n_output_tokens") or base.tokens_out,
        model=agent.get("model_name") or base.model,
        error=error or base.error,
        transcript=TRANSCRIPT if ours else "",
        directory=str(trial.relative_to(root)),
        turns=base.turns or int(metadata.get("n_turns") or 0),
        sandbox_calls=base.sandbox_calls or int(metadata.get("environment_calls") or 0),
        findings=len(metadata.get("findings") or []) or base.findings,
    )
    return result, str(data.get("task_checksum") or "")


def _status(data: dict[str, Any], metadata: dict[str, Any], ours: bool) -> tuple[Status, str]:
    """How the trial ended, in oc-repl's outcomes, and the cause when it is not the verdict alone (`ours`: oc-repl's
    agent ran it, so `metadata` holds its status and tamper evidence)."""
    exception = data.get("exception_info") or {}
    kind = str(exception.get("exception_type") or "")
    cause = f"{kind}: {str(exception.get('exception_message') or '').strip()[:300]}" if kind else ""
    reward = _reward(data)
    passed = None if reward is None else reward >= 1.0
    tampered = bool(metadata.get("tampered"))
    if not kind:
        if reward is None and data.get("agent_execution") is None:
            return Status.INTERRUPTED, ""  # stopped before its agent ran (a cancelled job): it never ran
        if reward is None:
            return Status.VERIFIER_ERROR, "the verifier gave no reward (Harbor: no verifier result)"
        if ours and metadata.get("status"):
            return final(Status(metadata["status"]), passed, tampered), ""
        return final(Status.DONE, bool(passed), tampered), ""
    if kind in _MODEL_OWN:
        return final(_MODEL_OWN[kind], passed, tampered), cause
    for names, status, whose in (
        (_BUILD, Status.BUILD_ERROR, "the environment's image could not be built"),
        (_SANDBOX, Status.SANDBOX_ERROR, "the environment failed"),
        (_PROVIDER, Status.SERVER_ERROR, "the model provider failed"),
        (_VERIFIER, Status.VERIFIER_ERROR, "the verifier gave no reward"),
        (_CANCELLED, Status.INTERRUPTED, "the trial was cancelled"),
    ):
        if kind in names:
            return status, f"{whose} (Harbor: {cause})"
    if data.get("agent_execution") is None:  # before the agent ran: the environment's start, or the agent's setup
        return Status.SANDBOX_ERROR, f"the environment failed before the agent ran (Harbor: {cause})"
    return Status.INTERNAL_ERROR, f"the trial failed outside the model (Harbor: {cause})"


def _reward(data: dict[str, Any]) -> float | None:
    rewards = (data.get("verifier_result") or {}).get("rewards") or {}
    value = rewards.get("reward", next(iter(rewards.values())) if len(rewards) == 1 else None)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _time(text: Any) -> float:
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def _numbered(results: list[TrialResult]) -> list[TrialResult]:
    """Each (task, arm)'s trials numbered 1, 2, … in the order they started."""
    count: dict[tuple[str, str], int] = {}
    numbered = []
    for result in sorted(results, key=lambda r: (r.task, r.label, r.started_at, r.directory)):
        key = (result.task, result.label)
        count[key] = count.get(key, 0) + 1
        numbered.append(replace(result, attempt=count[key]))
    return numbered
