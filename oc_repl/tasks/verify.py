"""Verifiers: the objective check that decides a run's outcome, whatever the model claimed.

A verifier describes its run as a job (its command, directory, user, its own files and directories: oc_repl/types.py
VerifierJob) and reads a verdict from what the run left. The sandbox runs the job beside what the agent left running,
sealed from it where the driver can (the verifier's files out of reach of the agent's processes, and its processes
out of reach of their tracing), and says whether it was (`VerifierRun.sealed`).

pytest's verdicts come from pytest's own record of its sessions (pytest_record.py), never from text the code under
test could print; only a pytest that ran without the record (one the plugin could not reach) is read from its `-rA`
summary, as terminal-bench reads it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from oc_repl.events import Finding, VerifyCompleted
from oc_repl.tasks import pytest_record
from oc_repl.types import Sandbox, VerifierJob, VerifierRun

# `pytest -rA` prints one line per test in its "short test summary info" section.
_SUMMARY_HEADER = re.compile(r"=+\s*short test summary info\s*=+", re.I)
_OUTCOMES = frozenset({"PASSED", "FAILED", "SKIPPED", "XFAIL", "XPASS", "ERROR"})
TAIL_BYTES = 4000
NO_RECORD = "[oc-repl] pytest ran without oc-repl's record of its session: the verdict is read from its -rA summary"


@dataclass
class PytestSummary:
    passed: int
    total: int
    failed: list[str]


def parse_pytest_summary(text: str) -> PytestSummary | None:
    """terminal-bench's reading of pytest's output (its PytestParser): every line after the first "short test summary
    info" header, a test keyed by its name after `::` and its later line winning over an earlier one, a FAILED line's
    " - reason" cut; None when there is no header (a failure for task tests)."""
    parts = _SUMMARY_HEADER.split(text, maxsplit=1)
    if len(parts) < 2:
        return None
    outcomes: dict[str, tuple[str, str]] = {}  # key -> (outcome, the test as printed)
    for line in parts[1].splitlines():
        if line.startswith("FAILED") and " - " in line:
            line = " - ".join(line.split(" - ")[:-1])
        words = line.split(maxsplit=1)
        if len(words) < 2 or words[0].strip(":") not in _OUTCOMES:
            continue
        printed = words[1].strip()
        key = printed.split("::", maxsplit=1)[-1]
        if key:
            outcomes[key] = (words[0].strip(":"), printed)
    failed = [printed for outcome, printed in outcomes.values() if outcome not in pytest_record.PASSING]
    return PytestSummary(passed=len(outcomes) - len(failed), total=len(outcomes), failed=failed)


@dataclass
class Judged:
    """What a verifier's run says, before the evidence is added."""

    passed: bool
    tests_passed: int | None = None
    tests_total: int | None = None
    failed: list[str] | None = None
    reward: float | None = None
    note: str = ""
    findings: list[Finding] | None = None


class Verifier(Protocol):
    """Anything that checks a sandbox objectively after the agent is done."""

    def describe(self) -> str: ...
    def job(self, sandbox: Sandbox, tools: str) -> VerifierJob: ...  # `tools`: the verifier's own directory
    def judge(self, run: VerifierRun, sessions: list[pytest_record.Session]) -> Judged: ...

    def working_directory(self, sandbox: Sandbox) -> str:
        """Where it runs (the evidence counts what pytest would read from there)."""
        return sandbox.workdir

    def run(self, sandbox: Sandbox) -> tuple[VerifyCompleted, VerifierRun]:
        """The verdict, and the run it was read from (what was seen of it counts for the evidence)."""
        tools = sandbox.verifier_home
        plan = pytest_record.Plan(tools)
        job = self.job(sandbox, tools)
        job.files = [*job.files, *plan.files()]
        job.private = [*job.private, tools]
        job.env = {**job.env, **plan.environment()}
        job.record = plan.fifo
        run = sandbox.run_verifier(job)
        found = pytest_record.sessions(run.records, plan.nonce)
        judged = self.judge(run, found)
        if judged.passed and not found and _pytest_files(job):
            judged.findings = [*(judged.findings or []), _NEVER_RAN]
        text = run.output.decode("utf-8", "replace")
        tail = text[-TAIL_BYTES:] + (f"\n{judged.note}" if judged.note else "")
        completed = VerifyCompleted(
            command=self.describe(),
            passed=judged.passed and not run.timed_out,
            exit_code=run.exit_code,
            tests_passed=judged.tests_passed,
            tests_total=judged.tests_total,
            failed_tests=judged.failed or [],
            output_tail=tail,
            timed_out=run.timed_out,
            reward=judged.reward,
            findings=[*(judged.findings or []), *pytest_record.disagreements(found, run.exits)],
            sealed=run.sealed,
        )
        return completed, run


# A verdict of pass for a task whose tests are pytest's, where pytest never ran them: something else answered for it
# (a `pytest`, `python` or `uvx` of the agent's that prints success, a start-up file that defines one).
_NEVER_RAN = Finding(
    kind="verdict",
    path="pytest",
    detail="the task's pytest tests passed although no pytest session ran them (none was recorded)",
    affects_tests=True,
)


def _pytest_files(job: VerifierJob) -> bool:
    names = (path.rsplit("/", 1)[-1] for path, _data, _mode in job.files if path.startswith("/tests/"))
    return any(n.endswith(".py") and (n.startswith("test_") or n.endswith("_test.py")) for n in names)


def counts(run: VerifierRun, found: list[pytest_record.Session]) -> Judged:
    """The tests' counts, from the record where pytest kept one, else from the summary it printed; `passed` is left
    to the caller."""
    verdict = pytest_record.verdict(found)
    if verdict is not None:
        failed = verdict.failed
        return Judged(False, len(verdict.tests) - len(failed), len(verdict.tests), failed)
    summary = parse_pytest_summary(run.output.decode("utf-8", "replace"))
    if summary is None:
        return Judged(False)
    return Judged(False, summary.passed, summary.total, summary.failed)


@dataclass
class CommandVerifier(Verifier):
    """`--verify CMD` runs CMD in the sandbox; `--verify-file F` puts F's content in the verifier's own directory and
    runs it with bash (`bash PATH`, so a script that finds its own place through `$0` works). The exit status decides;
    pytest's record, where CMD runs pytest, gives the counts."""

    command: str = ""
    file: Path | None = None
    timeout: float = 600.0

    def describe(self) -> str:
        return self.command or f"bash {self.file}"

    def job(self, sandbox: Sandbox, tools: str) -> VerifierJob:
        script = f"{tools}/verify.sh"
        files = [(script, self.file.read_bytes(), 0o644)] if self.file is not None else []
        return VerifierJob(
            command=f"bash {script}" if files else self.command,
            cwd=self.working_directory(sandbox),
            timeout=self.timeout,
            user="",
            files=files,
        )

    def judge(self, run: VerifierRun, sessions: list[pytest_record.Session]) -> Judged:
        found = counts(run, sessions)
        found.passed = run.exit_code == 0 and not run.timed_out
        unfinished = [s for s in sessions if s.status is None]
        if found.passed and unfinished and not run.exits:
            found.findings = [
                Finding(
                    kind="verdict",
                    path=f"pytest (pid {unfinished[0].pid})",
                    detail="its session never finished, and the command still ended with status 0",
                )
            ]
        return found
