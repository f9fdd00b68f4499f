"""Small exceptions that carry control flow and map onto exit codes (see design: exit codes)."""

from __future__ import annotations


class OcReplError(Exception):
    """Base class; `exit_code` is what the CLI returns when this ends a run."""

    exit_code = 1
    kind = "error"

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class UsageError(OcReplError):
    exit_code = 2
    kind = "usage"


class ServerError(OcReplError):
    """The model server failed after the bounded retries (or failed in a way retries cannot fix)."""

    exit_code = 5
    kind = "server"


class ServerUnreachable(ServerError):
    kind = "server_unreachable"


class ContextOverflow(ServerError):
    kind = "context_overflow"


class SandboxError(OcReplError):
    exit_code = 6
    kind = "sandbox"


class SandboxLost(SandboxError):
    """The sandbox itself is gone (container removed or stopped, daemon unreachable): the run cannot go on."""

    kind = "sandbox_lost"


class StopRun(OcReplError):
    """The loop stops early on purpose (loop detected, too many parse errors)."""

    exit_code = 4
    kind = "stopped"


class LoopDetected(StopRun):
    kind = "loop"


class ParseErrorLimit(StopRun):
    kind = "parse_errors"
