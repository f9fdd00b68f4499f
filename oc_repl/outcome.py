"""One outcome model: how a run ended (`Status`), mapped once to its exit code.

Exceptions that end a run carry their Status (oc_repl.errors); `thread.completed` records the Status value; `bench`
derives its failure modes from it. The verifier, not the model, decides success: `final()` folds its verdict in, and
the tamper evidence over it.
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
    SERVER_ERROR = "server_error"
    CONTEXT_LENGTH = "context_length_exceeded"  # the conversation outgrew the model's context
    SANDBOX_ERROR = "sandbox_error"
    BUILD_ERROR = "build_error"  # a task's image could not be built
    AGENT_TIMEOUT = "agent_timeout"  # the run's or the task's time for the agent ran out
    INTERRUPTED = "interrupted"  # Ctrl-C, SIGTERM or SIGHUP
    INTERNAL_ERROR = "internal_error"  # a bug: the transcript's last `error` event holds the traceback

    def __str__(self) -> str:
        return self.value


EXIT_CODES: dict[Status, int] = {
    Status.VERIFIED: 0,
    Status.DONE: 0,
    Status.VERIFY_FAILED: 1,
    Status.USAGE: 2,
    Status.TURN_CAP: 3,
    Status.LOOP: 4,
    Status.PARSE_ERRORS: 4,
    Status.SERVER_ERROR: 5,
    Status.CONTEXT_LENGTH: 5,
    Status.SANDBOX_ERROR: 6,
    Status.BUILD_ERROR: 6,
    Status.AGENT_TIMEOUT: 7,
    Status.TAMPERED: 8,
    Status.INTERRUPTED: 130,
    Status.INTERNAL_ERROR: 70,  # EX_SOFTWARE: never confused with a verdict
}

# The loop ended in a state worth checking: the verifier runs and its verdict decides.
VERIFIABLE = frozenset({Status.DONE, Status.TURN_CAP, Status.LOOP, Status.PARSE_ERRORS, Status.AGENT_TIMEOUT})


def exit_code(status: Status) -> int:
    return EXIT_CODES[status]


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
