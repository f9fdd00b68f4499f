"""Verifiers: the objective check that decides a run's outcome, whatever the model claimed."""

from __future__ import annotations

import re
import shlex
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from oc_repl.events import VerifyCompleted
from oc_repl.types import Sandbox

# `pytest -rA` prints one line per test in its "short test summary info" section.
_SUMMARY_HEADER = re.compile(r"^=+ short test summary info =+\s*$", re.M)
_SUMMARY_LINE = re.compile(r"^(PASSED|FAILED|SKIPPED|XFAIL|XPASS|ERROR)\s+(\S+)")
_COUNTS_AS_PASSED = {"PASSED", "SKIPPED", "XFAIL"}
TAIL_BYTES = 4000


@dataclass
class PytestSummary:
    passed: int
    total: int
    failed: list[str]


def parse_pytest_summary(text: str) -> PytestSummary | None:
    """Counts from the last short-summary section; None when there is none (a failure for task tests)."""
    headers = list(_SUMMARY_HEADER.finditer(text))
    if not headers:
        return None
    passed, failed = 0, []
    for line in text[headers[-1].end() :].splitlines():
        match = _SUMMARY_LINE.match(line)
        if line.startswith("="):
            break
        if not match:
            continue
        outcome, name = match.groups()
        if outcome in _COUNTS_AS_PASSED:
            passed += 1
        else:
            failed.append(name)
    return PytestSummary(passed=passed, total=passed + len(failed), failed=failed)


class Verifier(Protocol):
    """Anything that checks a sandbox objectively after the agent is done."""

    def describe(self) -> str: ...
    def run(self, sandbox: Sandbox) -> VerifyCompleted: ...

    def working_directory(self, sandbox: Sandbox) -> str:
        """Where it runs (the tamper probe watches what it will read from there)."""
        return sandbox.workdir


@dataclass
class CommandVerifier(Verifier):
    """`--verify CMD` runs CMD in the sandbox; `--verify-file F` copies F in and runs it with bash (`bash PATH`, so
    a script that finds its own place through `$0` works). The copy is made when the verifier runs, after what the
    agent left running was stopped: nothing of the agent's can rewrite it between the copy and the run."""

    command: str = ""
    file: Path | None = None
    timeout: float = 600.0

    def describe(self) -> str:
        return self.command or f"bash {self.file}"

    def run(self, sandbox: Sandbox) -> VerifyCompleted:
        command, cleanup = self.command, ""
        if self.file is not None:
            remote = f"/tmp/oc-repl-verify-{uuid.uuid4().hex[:8]}.sh"
            sandbox.write_file(remote, self.file.read_bytes())
            command, cleanup = f"bash {shlex.quote(remote)}", remote
        try:
            result = sandbox.exec(command, timeout=self.timeout)
        finally:
            if cleanup:
                sandbox.exec(f"rm -f {shlex.quote(cleanup)}", timeout=10)
        text = result.output.decode("utf-8", "replace")
        summary = parse_pytest_summary(text)
        passed = result.exit_code == 0 and not result.timed_out
        return VerifyCompleted(
            command=self.describe(),
            passed=passed,
            exit_code=result.exit_code,
            tests_passed=summary.passed if summary else None,
            tests_total=summary.total if summary else None,
            failed_tests=summary.failed if summary else [],
            output_tail=text[-TAIL_BYTES:],
            timed_out=result.timed_out,
        )
