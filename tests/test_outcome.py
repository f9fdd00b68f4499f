"""The one outcome model: each Status's exit code as the README documents it, the sets it belongs to, and the one
place an exception becomes a Status."""

from __future__ import annotations

import re

import pytest

from oc_repl.errors import (
    BuildError,
    ConfinementUnavailable,
    ContextOverflow,
    Deadline,
    LoopDetected,
    ParseErrorLimit,
    SandboxError,
    SandboxLost,
    ServerError,
    ServerUnreachable,
    Terminated,
    TurnCapReached,
    UsageError,
    status_of,
)
from oc_repl.outcome import FAILURE_MODES, Status
from tests.conftest import ROOT


def readme_exit_table() -> dict[str, int]:
    """status -> exit code, as the README's "Exit codes" table lists them."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    table = text[text.index("### Exit codes") :].split("\n\n")[2]
    found = {}
    for row in table.splitlines()[2:]:
        code, statuses = row.split("|")[1:3]
        for status in re.findall(r"`([a-z_]+)`", statuses):
            found[status] = int(code)
    return found


def test_every_status_exits_with_the_code_the_readme_documents():
    documented = readme_exit_table()
    assert documented == {status.value: status.exit_code for status in Status}
    assert Status.TAMPERED.exit_code == 8 and Status.INTERNAL_ERROR.exit_code == 70


def test_an_exit_code_alone_tells_an_interruption_a_usage_error_or_a_crash_never_a_verdict():
    assert [Status.of_exit(code) for code in (None, -15, 130)] == [Status.INTERRUPTED] * 3
    assert Status.of_exit(2) is Status.USAGE
    assert {Status.of_exit(code) for code in (0, 1, 6, 8, 70)} == {Status.INTERNAL_ERROR}


def test_the_verifier_judges_a_run_that_ended_on_its_own_or_ran_out_of_turns_loops_or_time():
    judged = {s for s in Status if s.verifiable}
    stopped = {Status.LOOP, Status.PARSE_ERRORS, Status.BAD_ARGUMENTS}  # the model's own output stopped it
    assert judged == {Status.DONE, Status.TURN_CAP, Status.AGENT_TIMEOUT} | stopped


def test_attempts_end_at_a_verdict_a_cheat_or_an_end_a_repeat_would_not_change():
    ending = {s for s in Status if s.ends_attempts}
    assert ending == {
        Status.VERIFIED,
        Status.TAMPERED,
        Status.USAGE,
        Status.BUILD_ERROR,
        Status.INTERRUPTED,
        Status.INTERNAL_ERROR,
    }


def test_a_harness_grades_every_run_the_model_may_have_solved_and_none_that_failed_outside_it():
    graded = {s for s in Status if s.graded_by_harness}
    assert graded == {s for s in Status if s.verifiable} | {Status.CONTEXT_LENGTH, Status.TAMPERED}
    for status in set(Status) - graded - {Status.VERIFIED, Status.VERIFY_FAILED}:  # the harness's own verdicts
        assert status.exit_code in (2, 5, 6, 70, 130), status


def test_every_finished_outcome_has_one_of_bench_failure_modes():
    assert {s.failure_mode() for s in Status if s is not Status.INTERRUPTED} <= set(FAILURE_MODES)
    assert Status.VERIFIED.failure_mode(verify_timed_out=True) == "resolved"


@pytest.mark.parametrize(
    ("exc", "status"),
    [
        (UsageError("x"), Status.USAGE),
        (ServerError("x"), Status.SERVER_ERROR),
        (ServerUnreachable("x"), Status.SERVER_ERROR),
        (ContextOverflow("x"), Status.CONTEXT_LENGTH),
        (SandboxError("x"), Status.SANDBOX_ERROR),
        (SandboxLost("x"), Status.SANDBOX_ERROR),
        (ConfinementUnavailable("x"), Status.SANDBOX_ERROR),
        (BuildError("x"), Status.BUILD_ERROR),
        (LoopDetected("x"), Status.LOOP),
        (ParseErrorLimit("x"), Status.PARSE_ERRORS),
        (TurnCapReached(), Status.TURN_CAP),
        (Deadline(), Status.AGENT_TIMEOUT),
        (Terminated("SIGTERM"), Status.INTERRUPTED),
        (KeyboardInterrupt(), Status.INTERRUPTED),
        (RuntimeError("a bug"), Status.INTERNAL_ERROR),
        (KeyError("a bug"), Status.INTERNAL_ERROR),
    ],
)
def test_each_way_a_run_stops_maps_to_one_status(exc, status):
    assert status_of(exc) is status
