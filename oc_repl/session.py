"""The runner: executes a plan (oc_repl/plan.py), one thread per task: `thread.started` first whatever happens,
then the loop, the verifier, and `thread.completed` with the outcome.

`execute` runs a plan's attempts, each a Session of its own: what `oc-repl run` (bench's trials are such runs), the
Python API and the Harbor agent do. The interactive shell keeps one Session for many tasks and changes it through its
methods (model, protocol, turns, sandbox, verifier).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from oc_repl import events as ev
from oc_repl import signals, startup
from oc_repl.agent import Agent, Outcome, error_event
from oc_repl.config import RunSettings
from oc_repl.errors import OcReplError, SandboxError, Terminated, UsageError, status_of
from oc_repl.fanout import Fanout as Fanout  # where the run's callers take it from
from oc_repl.outcome import SERVER_SHARE, Status, final
from oc_repl.plan import RunPlan, check_attempts, known, plan
from oc_repl.thread_events import Made
from oc_repl.types import AgentProtocol, Approve, Consent, Sandbox, Task, allow_all, refuse

if TYPE_CHECKING:
    from oc_repl.tasks.verdict import Judge


@dataclass
class TaskResult:
    status: Status
    final_answer: str = ""
    verify: ev.VerifyCompleted | None = None
    turns: int = 0
    attempt: int = 1  # which attempt this was (`run --attempts N`)
    findings: list[ev.Finding] = field(default_factory=list)  # what the agent tried (in `verify` too, when it ran)

    @property
    def exit_code(self) -> int:
        return self.status.exit_code


def run_attempts(
    settings: RunSettings,
    instruction: str | None,
    emit: Callable[[Any], None],
    *,
    attempts: int = 1,
    consent: Consent = refuse,
    transcript: str = "",
    sandbox: Sandbox | None = None,
) -> TaskResult:
    """Plan the run, then execute it. A run that cannot be planned (a refused task directory, no instruction) is
    still a thread: it starts with what is known and ends saying why. Attempts that cannot go together are refused
    before any thread, as the command line refuses them."""
    check_attempts(settings, attempts)
    try:
        planned = plan(settings, instruction, attempts=attempts, sandbox=sandbox)
    except OcReplError as exc:
        return Session(known(settings, instruction, sandbox), emit, transcript=transcript).refuse(exc)
    return execute(planned, emit, consent=consent, transcript=transcript)


def execute(
    planned: RunPlan, emit: Callable[[Any], None], *, consent: Consent = refuse, transcript: str = ""
) -> TaskResult:
    """The plan's attempts, each in a fresh sandbox and a thread of its own, until one ends them (it is verified, or
    ended in a way a repeat would not change); the last `thread.completed` names the attempt that decided."""
    result = TaskResult(Status.INTERNAL_ERROR)
    for attempt in range(1, planned.attempts + 1):
        session = Session(planned, emit, consent=consent, transcript=transcript, attempt=attempt)
        try:
            result = session.run(close_after=True)
        finally:
            session.client.close()
        if result.status.ends_attempts or session.terminated:
            break
    return result


class Session:
    """One conversation in one sandbox, executing a plan: `oc-repl run` runs one task with it, the interactive shell
    many (conversation.py, whose changes between tasks make the next plan). `approve` is asked before each model
    action (the shell's approval), `consent` before model-chosen commands run on this host: hooks like `emit`, so
    the library itself never reads a terminal."""

    def __init__(
        self,
        plan: RunPlan,
        emit: Callable[[Any], None],
        *,
        approve: Approve = allow_all,
        consent: Consent = refuse,
        transcript: str = "",  # named in thread.completed, when the caller keeps one
        attempt: int = 1,  # named in thread.started and thread.completed (`run --attempts N`)
    ) -> None:
        self.plan, self.emit, self.approve, self.consent = plan, emit, approve, consent
        self.transcript, self.attempt = transcript, attempt
        self.client = self._client()
        self.protocol: AgentProtocol | None = None
        self.sandbox: Sandbox | None = None
        self.thread_id = uuid.uuid4().hex[:12]
        self.tasks_run = 0  # in the current conversation
        self.terminated = False  # a SIGTERM or SIGHUP stopped a run: the interactive shell leaves too
        self.judge: Judge | None = None  # the judge of the current sandbox (its evidence's base)
        self.made = Made()

    @property
    def settings(self) -> RunSettings:
        return self.plan.settings

    def _client(self) -> Any:
        from oc_repl.client.chat import run_client

        return run_client(self.settings, self.plan.model_files, self._on_retry)

    def _on_retry(self, message: str, attempt: int) -> None:
        total = self.settings.retries + 1
        error = ev.Error(kind="server", message=f"{message} (attempt {attempt} of {total})", retrying=True)
        if self.made.started:
            self.emit(error)
        else:  # the server is asked for its model before the thread starts
            self.made.held.append(error)

    # --- pieces, made when first needed ------------------------------------------------------------------------

    def open_sandbox(self, meanwhile: Callable[[], None] | None = None) -> Sandbox:
        if self.sandbox is None:
            self.sandbox = self.plan.sandboxes.open(self.consent, meanwhile)
        return self.sandbox

    def _meanwhile(self) -> None:
        """What comes next, made while a sandbox starts: the client (httpx loads) and the display (rich loads)."""
        self.client.connect()
        if isinstance(self.emit, Fanout):
            self.emit.prepare()

    def open_protocol(self) -> AgentProtocol:
        if self.protocol is None:
            from oc_repl import deviations, protocols

            s, tok = self.settings, self.plan.model_files.tokenizer if self.plan.model_files else None
            self.protocol = protocols.create(
                s.protocol,
                deviations.from_settings(s),
                count_tokens=tok.count if tok is not None else None,
                **s.own(s.protocol_kind().options),
            )
            if s.exact:
                protocols.require_upstream(s.protocol, self.protocol.assets())
        return self.protocol

    def new_conversation(self, leave_running: bool = False) -> None:
        if self.protocol is not None and not leave_running:
            with contextlib.suppress(SandboxError):
                self.protocol.close()
        self.protocol, self.tasks_run, self.thread_id = None, 0, uuid.uuid4().hex[:12]

    def close(self, leave_running: bool = False) -> str:
        """Stop what the session left running; returns the name of a container kept on purpose (--keep). With
        `leave_running` (a harness's verifier judges the sandbox next, beside what the agent left) nothing is stopped:
        the harness ends the sandbox."""
        self.new_conversation(leave_running)
        sandbox, self.sandbox, self.judge = self.sandbox, None, None
        if sandbox is None or leave_running:
            return ""
        with contextlib.suppress(SandboxError, KeyboardInterrupt):
            sandbox.close()
        return sandbox.kept()

    # --- running -----------------------------------------------------------------------------------------------

    def run(self, instruction: str | None = None, close_after: bool = False) -> TaskResult:
        """One task in the current conversation (the planned one, or `instruction`), then the verifier, then
        `thread.completed`. With `close_after` the conversation ends here: the verifier runs beside what the agent
        left running, which ends after it."""
        outcome, verify, kept, findings = Outcome(), None, "", []
        calls_before = (self.client.native_calls, self.client.salvaged_calls)
        self.made = Made(calls_before=self.sandbox.calls() if self.sandbox is not None else (0, 0.0))
        with signals.stoppable():
            try:
                outcome = self._run(self.plan.task_for(instruction), close_after)
                if self.plan.verifier is not None and outcome.status.verifiable:
                    verify = self.verify_now(final_run=close_after)
                    findings = verify.findings
                elif self.plan.harness_judges and outcome.status.graded_by_harness:
                    findings = self._judge(self.open_sandbox()).for_harness(self._keep())
            except (Exception, KeyboardInterrupt) as exc:  # a bug too: the transcript still ends properly
                outcome.status = self._failed(exc)
            finally:
                if close_after:  # cleanup runs to its end; a second Ctrl-C or a SIGTERM now is only remembered
                    with signals.deferred() as late:
                        self._name_what_is_left_on_host()
                        kept = self.close(leave_running=self.plan.harness_judges)
                    if late.interrupted:
                        outcome.status = Status.INTERRUPTED
                        self.terminated = self.terminated or late.terminated
            tampered = any(f.affects_tests for f in findings)
            status = final(outcome.status, verify.passed if verify is not None else None, tampered)
            self._completed(status, outcome, kept, calls_before)
        return TaskResult(status, outcome.final_answer, verify, outcome.turns, self.attempt, findings)

    def _name_what_is_left_on_host(self) -> None:
        if self.sandbox is None:
            return
        with contextlib.suppress(OcReplError):
            for what in self.sandbox.left_on_host():
                hint = "look at it before you run anything of it there"
                self.emit(ev.Error(kind="warning", message=f"the model left {what}", hint=hint))

    def refuse(self, exc: OcReplError) -> TaskResult:
        """The thread of a run that could not be planned: started with what is known, ended with why."""
        self.made = Made(task=self.plan.task)
        status = self._failed(exc)
        self._completed(status, Outcome(status), "", (0, 0))
        return TaskResult(status, attempt=self.attempt)

    def _run(self, task: Task, close_after: bool) -> Outcome:
        made = self.made
        made.task = task
        made.clock = time.monotonic()
        protocol = made.protocol = self.open_protocol()
        # plain chat (raw) runs nothing, so it needs no sandbox and no consent
        sandbox = made.sandbox = self.open_sandbox(meanwhile=self._meanwhile) if protocol.needs_sandbox else None
        made.took("sandbox")
        # something judges this run, or may (the shell's /verify, later in the conversation): a baseline first
        judged = self.plan.verifier is not None or self.plan.harness_judges or not close_after
        if sandbox is not None and judged and (self.judge is None or self.judge.sandbox is not sandbox):
            self.judge = self._baseline(sandbox)
            made.took("baseline")
        made.model = self.client.resolve_model()
        warnings = self._served()
        made.took("server")  # the model's name asked of the server, what it serves (a busy server: minutes)
        self._say_started(sandbox.isolation() if sandbox is not None else ev.Isolation())
        for warning in warnings:
            self.emit(warning)
        agent = Agent(
            self.client,
            protocol,
            sandbox,  # type: ignore[arg-type]  # raw needs none
            self.emit,
            max_turns=self.settings.max_turns,
            loop_limit=self.settings.loop_limit,
            sampling=self.settings.sampling_options(),
            approve=self.approve,
        )
        began = time.monotonic()
        with signals.deadline(self.plan.agent_timeout):
            outcome = agent.run(task, follow_up=self.tasks_run > 0)
        self.tasks_run += 1
        spent = time.monotonic() - began
        if outcome.status is Status.AGENT_TIMEOUT and outcome.server_wait_s > SERVER_SHARE * spent:
            from oc_repl.client.failures import SILENT_HINT

            outcome.status = Status.SERVER_TIMEOUT
            said = (
                f"the agent's time ran out, and {outcome.server_wait_s:.0f} s of its {spent:.0f} s went to waiting on "
                "the model server (before first tokens, stalled or refused attempts, retries): the server's failure"
            )
            self.emit(ev.Error(kind="server", message=said, hint=SILENT_HINT))
        return outcome

    def _failed(self, exc: BaseException) -> Status:
        """How `exc` ends the thread, its error recorded; a thread it ended before it could start still starts,
        with what is known."""
        if not self.made.started:
            isolation, sandbox = ev.Isolation(), self.made.sandbox
            if sandbox is not None:
                with contextlib.suppress(OcReplError):
                    isolation = sandbox.isolation()
            self._say_started(isolation)
        error = error_event(exc)
        if error is not None:
            self.emit(error)
        self.terminated = self.terminated or isinstance(exc, Terminated)
        return status_of(exc)

    def verify_now(self, final_run: bool = False) -> ev.VerifyCompleted:
        """The verifier's verdict, with the evidence. It runs beside what the agent left running; in the `final_run` of
        a sandbox all of that ends after it, and mid-conversation (the shell) it goes on running and the sandbox as the
        verdict leaves it becomes the base for the next one."""
        verifier = self.plan.verifier
        if verifier is None:
            raise UsageError("no verifier set", hint="give one: --verify CMD, --verify-file F, or /verify CMD")
        result = self._judge(self.open_sandbox()).verify(verifier, self._keep(), final_run)
        self.emit(result)
        return result

    def _keep(self) -> frozenset[int]:
        return self.protocol.own_processes() if self.protocol is not None else frozenset()

    def _judge(self, sandbox: Sandbox) -> Judge:
        if self.judge is None or self.judge.sandbox is not sandbox:
            self.judge = self._baseline(sandbox)
        return self.judge

    def _baseline(self, sandbox: Sandbox) -> Judge:
        from oc_repl.tasks.verdict import Judge

        # where the verifier runs: a task's in the image's WORKDIR, Harbor's too, --verify in the sandbox's workdir
        if self.plan.verifier is not None:
            where = self.plan.verifier.working_directory(sandbox)
        else:
            where = (sandbox.image_workdir if self.plan.harness_judges else "") or sandbox.workdir
        return Judge.opened(sandbox, where, self.emit)

    def _say_started(self, isolation: ev.Isolation) -> None:
        """`thread.started` with what the thread has made so far (all of it, unless it ended early)."""
        from oc_repl.thread_events import thread_started

        self.made.started = True
        self.emit(thread_started(self, isolation))
        startup.settled()
        held, self.made.held = self.made.held, []
        for event in held:
            self.emit(event)

    def _served(self) -> list[ev.Error]:
        """On a text wire, what the server says it serves (for thread.started), and how it differs from
        --tokenizer's files: the warnings to give."""
        if self.plan.model_files is None or not self.settings.text_wire:
            return []
        from oc_repl.client.served import TOKENIZER_HINT, served_warnings

        self.made.served, warnings = served_warnings(self.client, self.plan.model_files, self.tools_offered())
        return [ev.Error(kind="warning", message=warning, hint=TOKENIZER_HINT) for warning in warnings]

    def tools_offered(self) -> list[Any] | None:
        protocol = self.made.protocol
        return (protocol.request().options.get("tools") or None) if protocol is not None else None

    def _completed(self, status: Status, outcome: Outcome, kept: str, calls_before: tuple[int, int]) -> None:
        from oc_repl.thread_events import thread_completed

        self.emit(thread_completed(self, status, outcome, kept, calls_before))
