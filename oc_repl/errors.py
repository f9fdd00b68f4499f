"""Small exceptions that carry control flow; each names the outcome (oc_repl.outcome.Status) it ends a run with."""

from __future__ import annotations

from oc_repl.outcome import Status


class OcReplError(Exception):
    """Base class; `status` is how a run ends when this stops it, `kind` names it in `error` events."""

    status = Status.INTERNAL_ERROR
    kind = "error"

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    @property
    def exit_code(self) -> int:
        return self.status.exit_code


class UsageError(OcReplError):
    status = Status.USAGE
    kind = "usage"


class ServerError(OcReplError):
    """The model server failed after the bounded retries (or failed in a way retries cannot fix)."""

    status = Status.SERVER_ERROR
    kind = "server"


class ServerRefused(ServerError):
    """The server refused the run's settings (HTTP 401, 403, 404: a wrong key, path or model) before it gave any
    reply: a configuration error, found before a turn could do anything, so exit 2 like every other one."""

    status = Status.USAGE
    kind = "server_config"


class ServerUnreachable(ServerError):
    kind = "server_unreachable"


class ContextOverflow(ServerError):
    status = Status.CONTEXT_LENGTH
    kind = "context_overflow"


class SandboxError(OcReplError):
    status = Status.SANDBOX_ERROR
    kind = "sandbox"


class SandboxLost(SandboxError):
    """The sandbox itself is gone (container removed or stopped, daemon unreachable): the run cannot go on."""

    kind = "sandbox_lost"


class ConfinementUnavailable(SandboxError):
    """bubblewrap is missing or cannot confine a local sandbox here."""

    kind = "confinement"


class BuildError(SandboxError):
    """A task's image could not be built."""

    status = Status.BUILD_ERROR
    kind = "build"


class TurnCapReached(Exception):
    """The loop used its last turn: no error, an outcome of its own."""

    status = Status.TURN_CAP


class StopRun(OcReplError):
    """The loop stops early on purpose (loop detected, too many parse errors)."""

    status = Status.LOOP
    kind = "stopped"


class LoopDetected(StopRun):
    kind = "loop"


class ParseErrorLimit(StopRun):
    status = Status.PARSE_ERRORS
    kind = "parse_errors"


class BadArguments(StopRun):
    """A reply's call had arguments that were no JSON object: training's harness ended the rollout there."""

    status = Status.BAD_ARGUMENTS
    kind = "bad_arguments"


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP: stop like Ctrl-C (everything cleaned up), but also leave the interactive shell."""


class Deadline(KeyboardInterrupt):
    """The agent's time (`--timeout`, or a task's agent timeout) ran out: stop like Ctrl-C, but with its own outcome.

    A KeyboardInterrupt on purpose: every place that stops a running command on Ctrl-C must stop it here too.
    """


def status_of(exc: BaseException) -> Status:
    """How a run ends when `exc` stops it: the one place an exception becomes an outcome (the loop's and the
    runner's alike). Deadline before KeyboardInterrupt: it is one."""
    if isinstance(exc, OcReplError | TurnCapReached):
        return exc.status
    if isinstance(exc, Deadline):
        return Status.AGENT_TIMEOUT
    if isinstance(exc, KeyboardInterrupt):
        return Status.INTERRUPTED
    return Status.INTERNAL_ERROR
