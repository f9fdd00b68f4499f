"""One outcome model: how a run ended (`Status`), and everything that follows from it, in one place.

Exceptions that end a run carry their Status (oc_repl.errors, where `status_of` reads it); `thread.completed` records
the Status value; each Status knows its exit code, whether a verifier judges a run that ended so, whether it ends a
series of attempts, whether a harness (Harbor) grades it, whether it is a failure of the infrastructure rather than of
the model, and its name in bench's vocabulary. The verifier, not the model, decides success: `final()` folds its
verdict in, and the tamper evidence over it.
"""

from __future__ import annotations

from enum import Enum


class Status(str, Enum):
    VERIFIED = "verified"  # the verifier passed, whatever the model said
    DONE = "done"  # the agent ended on its own and there is no verifier
    VERIFY_FAILED = "verify_failed"  # the agent said it was done; the verifier disagrees
    TAMPERED = "tampered"  # the agent touched what the verifier relies on: no verdict counts, whatever it said
    USAGE = "usage"  # a usage or configuration error, before or outside the loop
    TURN_CAP = "turn_cap"
    LOOP = "loop"  # the same actions with the same results, turn after turn
    PARSE_ERRORS = "parse_errors"  # too many replies that could not be read
    # a call whose arguments were no JSON object ended the episode, as training's harness ended its rollout there
    BAD_ARGUMENTS = "bad_arguments"
    SERVER_ERROR = "server_error"
    CONTEXT_LENGTH = "context_length_exceeded"  # the conversation outgrew the model's context
    SANDBOX_ERROR = "sandbox_error"
    BUILD_ERROR = "build_error"  # a task's image could not be built
    # the verifier gave no verdict (it timed out, or wrote no reward) where the harness holds that against the
    # infrastructure, not the model: Harbor's jobs (oc_repl/bench/harbor_jobs.py)
    VERIFIER_ERROR = "verifier_error"
    AGENT_TIMEOUT = "agent_timeout"  # the run's or the task's time for the agent ran out
    # the agent's time ran out while most of it went to waiting on the model server (queueing before first tokens,
    # stalls, retries): the server's failure, not the model's (SERVER_SHARE)
    SERVER_TIMEOUT = "server_timeout"
    INTERRUPTED = "interrupted"  # Ctrl-C, SIGTERM or SIGHUP
    INTERNAL_ERROR = "internal_error"  # a bug: the transcript's last `error` event holds the traceback

    def __str__(self) -> str:
        return self.value

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self]

    @classmethod
    def of_exit(cls, code: int | None) -> Status:
        """The outcome a run's exit alone tells, when nothing else does (it was killed, or crashed before its first
        event): a signal (or 130) is an interruption, 2 a usage error, anything else a crash. A verdict is never
        read from an exit code."""
        if code is None or code < 0 or code == EXIT_CODES[cls.INTERRUPTED]:
            return cls.INTERRUPTED
        return cls.USAGE if code == EXIT_CODES[cls.USAGE] else cls.INTERNAL_ERROR

    @property
    def verifiable(self) -> bool:
        """The loop ended in a state worth checking: the verifier runs and its verdict decides."""
        return self in _VERIFIABLE

    @property
    def ends_attempts(self) -> bool:
        """No further attempt follows one that ended so: it is verified; or it says nothing about the model (a
        repeat would end the same way); or, tampered, too much: a cheat is not retried until it passes."""
        return self in _ENDS_ATTEMPTS

    @property
    def graded_by_harness(self) -> bool:
        """A run under a harness's verifier (Harbor's) that ended so may have solved the task: the harness grades it
        (a tampered one too, with the evidence beside it). Any other end is a failure outside the model."""
        return self in _GRADED

    @property
    def infrastructure(self) -> bool:
        """The run ended on a failure of what runs the model, not of the model: the server, the sandbox, the task's
        image, the settings, or oc-repl itself. It says nothing about the model, so a bench leaves it out of the
        score (by default) and runs it again; every other finished end is the model's own (an interruption is
        neither: the run did not finish)."""
        return self in _INFRASTRUCTURE

    def failure_mode(self, verify_timed_out: bool = False) -> str:
        """How a trial ended, in bench's one vocabulary (terminal-bench's names where it has one). A tampered run is
        that whatever its tests did; a verifier killed at its timeout is otherwise the tests' failure
        (test_timeout); else the outcome names it. An interrupted trial is unfinished: it has none."""
        if self in (Status.VERIFIED, Status.TAMPERED):
            return _FAILURE_MODES[self]
        if verify_timed_out:
            return "test_timeout"
        if self is Status.INTERRUPTED:
            raise ValueError("an interrupted trial is unfinished: it has no failure mode")
        return _FAILURE_MODES[self]


EXIT_CODES: dict[Status, int] = {
    Status.VERIFIED: 0,
    Status.DONE: 0,
    Status.VERIFY_FAILED: 1,
    Status.USAGE: 2,
    Status.TURN_CAP: 3,
    Status.LOOP: 4,
    Status.PARSE_ERRORS: 4,
    Status.BAD_ARGUMENTS: 4,
    Status.SERVER_ERROR: 5,
    Status.SERVER_TIMEOUT: 5,
    Status.CONTEXT_LENGTH: 5,
    Status.SANDBOX_ERROR: 6,
    Status.BUILD_ERROR: 6,
    Status.VERIFIER_ERROR: 6,
    Status.AGENT_TIMEOUT: 7,
    Status.TAMPERED: 8,
    Status.INTERRUPTED: 130,
    Status.INTERNAL_ERROR: 70,  # EX_SOFTWARE: never confused with a verdict
}

_VERIFIABLE = frozenset(
    {Status.DONE, Status.TURN_CAP, Status.LOOP, Status.PARSE_ERRORS, Status.BAD_ARGUMENTS, Status.AGENT_TIMEOUT}
)
_ENDS_ATTEMPTS = frozenset(
    {Status.VERIFIED, Status.USAGE, Status.BUILD_ERROR, Status.INTERRUPTED, Status.INTERNAL_ERROR, Status.TAMPERED}
)
_GRADED = _VERIFIABLE | {Status.CONTEXT_LENGTH, Status.TAMPERED}
# A usage error in a trial is its setup's (a model the server does not list, say), never the model's answer.
_INFRASTRUCTURE = frozenset(
    {
        Status.SERVER_ERROR,
        Status.SERVER_TIMEOUT,
        Status.SANDBOX_ERROR,
        Status.BUILD_ERROR,
        Status.VERIFIER_ERROR,
        Status.USAGE,
        Status.INTERNAL_ERROR,
    }
)
SERVER_SHARE = 0.5  # an agent timeout is the server's when more than this share of the agent's time went to it

# bench's names; one per way a trial can end (test_timeout comes from the verifier, not from a Status)
FAILURE_MODES = (
    "resolved",
    "unresolved",
    "tampered",
    "agent_timeout",
    "test_timeout",
    "parse_error",
    "bad_arguments",
    "turn_cap",
    "loop",
    "context_length_exceeded",
    "server_error",
    "server_timeout",
    "sandbox_error",
    "build_error",
    "verifier_error",
    "usage_error",
    "internal_error",
)
_FAILURE_MODES = {
    Status.VERIFIED: "resolved",
    Status.VERIFY_FAILED: "unresolved",
    Status.TAMPERED: "tampered",
    Status.DONE: "unresolved",
    Status.AGENT_TIMEOUT: "agent_timeout",
    Status.PARSE_ERRORS: "parse_error",
    Status.BAD_ARGUMENTS: "bad_arguments",
    Status.TURN_CAP: "turn_cap",
    Status.LOOP: "loop",
    Status.CONTEXT_LENGTH: "context_length_exceeded",
    Status.SERVER_ERROR: "server_error",
    Status.SERVER_TIMEOUT: "server_timeout",
    Status.SANDBOX_ERROR: "sandbox_error",
    Status.BUILD_ERROR: "build_error",
    Status.VERIFIER_ERROR: "verifier_error",
    Status.USAGE: "usage_error",
    Status.INTERNAL_ERROR: "internal_error",
}


def infrastructure_mode(mode: str) -> bool:
    """A failure mode (bench's name for an end) that is the infrastructure's: the one split, read off `Status`."""
    return any(s.infrastructure for s, name in _FAILURE_MODES.items() if name == mode)


def final(status: Status, passed: bool | None, tampered: bool = False) -> Status:
    """The outcome once the verifier (if any; `passed` None when there is none) has spoken; `tampered` when the
    evidence gathered before it shows the agent touched what tests rely on, which no verdict outweighs."""
    if tampered:
        return Status.TAMPERED
    if passed:
        return Status.VERIFIED
    if passed is False and status is Status.DONE:
        return Status.VERIFY_FAILED
    return status
