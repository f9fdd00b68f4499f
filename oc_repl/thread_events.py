"""The first and the last event of a thread, from what its session made (`Made`): the run's settings and plan, the
task, the protocol, the sandbox, the client's counts, the time before it started."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from oc_repl import events as ev
from oc_repl.outcome import Status
from oc_repl.types import AgentProtocol, Sandbox, Task

if TYPE_CHECKING:
    from oc_repl.agent import Outcome
    from oc_repl.client.chat import ChatClient
    from oc_repl.config import RunSettings
    from oc_repl.plan import RunPlan


@dataclass
class Made:
    """What a session's current thread has made so far, for its `thread.started`; `started` once that was said."""

    task: Task | None = None
    protocol: AgentProtocol | None = None
    sandbox: Sandbox | None = None
    model: str = ""
    served: str = ""  # what the server says it serves (the text wires)
    started: bool = False
    held: list[Any] = field(default_factory=list)  # said before `thread.started`, which comes first: said after it
    calls_before: tuple[int, float] = (0, 0.0)  # the sandbox's calls (Sandbox.calls) when the thread began
    startup: dict[str, float] = field(default_factory=dict)  # seconds before thread.started, by what they went to
    clock: float = 0.0

    def took(self, what: str) -> None:
        """The time since the last step, put down to `what`."""
        now = time.monotonic()
        self.startup[what], self.clock = round(now - self.clock, 3), now


class Thread(Protocol):
    """What the events are built from: the thread a session runs (session.py)."""

    settings: RunSettings
    plan: RunPlan
    made: Made
    client: ChatClient
    thread_id: str
    transcript: str
    attempt: int
    tasks_run: int

    def tools_offered(self) -> list[Any] | None: ...


def refused(status: Status, turns: int) -> bool:
    """A run refused before it started (its settings, before the first reply): the command line keeps no transcript
    of it, so its `thread.completed` names none."""
    return status is Status.USAGE and not turns


def thread_started(session: Thread, isolation: ev.Isolation) -> ev.ThreadStarted:
    from oc_repl import deviations

    s, made = session.settings, session.made
    task, protocol, sandbox = made.task, made.protocol, made.sandbox
    needs_sandbox = protocol is None or protocol.needs_sandbox
    # the served model's files the run reads: the template a request with these tools uses, the tokenizer
    files = session.plan.model_files.assets(session.tools_offered()) if session.plan.model_files else []
    return ev.ThreadStarted(
        thread_id=session.thread_id,
        model=made.model or s.model or "",
        protocol=s.protocol,
        sandbox=sandbox.spec if sandbox else (session.plan.sandboxes.spec if needs_sandbox else "none"),
        api_base=s.api_base,
        task_name=task.name if task else "",
        task=task.instruction if task else "",
        workdir=protocol.working_directory(sandbox) if protocol and sandbox else "",
        assets=[ev.AssetInfo(**vars(a)) for a in [*(protocol.assets() if protocol else []), *files]],
        exact=s.exact,
        wire=s.wire,
        prompt=session.plan.model_files.sends if s.text_wire and session.plan.model_files else "",
        deviations=deviations.from_settings(s).names(),
        options={
            "sampling": s.sampling_options(),
            # the protocol's own settings (camel: its history, rich's line, its cut), as the run had them
            **{k: v for k, v in s.own(s.protocol_kind().options).items() if v is not None},
            "stream": s.stream,
            "max_turns": s.max_turns,
            "follow_up": session.tasks_run > 0,
            **({"served": made.served} if made.served else {}),
            # the verifier a command gave (not a task's own): what `resume` sets again
            **({"verify": s.verify} if s.verify else {}),
            **({"verify_file": str(s.verify_file.resolve())} if s.verify_file else {}),
        },
        attempt=session.attempt,
        isolation=isolation,
        startup=dict(made.startup),
    )


def thread_completed(
    session: Thread, status: Status, outcome: Outcome, kept: str, calls_before: tuple[int, int]
) -> ev.ThreadCompleted:
    sandbox, (calls, seconds) = session.made.sandbox, session.made.calls_before
    now = sandbox.calls() if sandbox is not None else (calls, seconds)  # closed by now: it still knows
    return ev.ThreadCompleted(
        status=status.value,
        exit_code=status.exit_code,
        final_answer=outcome.final_answer,
        turns=outcome.turns,
        tool_calls_native=session.client.native_calls - calls_before[0],
        tool_calls_salvaged=session.client.salvaged_calls - calls_before[1],
        kept_container=kept,
        transcript="" if refused(status, outcome.turns) else session.transcript,
        attempt=session.attempt,
        attempts=session.plan.attempts,
        sandbox_calls=now[0] - calls,
        sandbox_seconds=round(now[1] - seconds, 3),
    )
