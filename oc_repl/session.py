"""One run, assembled: settings -> client, protocol, sandbox, renderers, transcript -> loop -> verify -> exit code."""

from __future__ import annotations

import contextlib
import re
import sys
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from oc_repl import events as ev
from oc_repl import signals
from oc_repl.agent import Agent, Outcome
from oc_repl.config import RunSettings
from oc_repl.errors import ConfinementUnavailable, Deadline, OcReplError, SandboxError, Terminated, UsageError
from oc_repl.outcome import VERIFIABLE, Status, exit_code, final
from oc_repl.tasks.verify import Verifier
from oc_repl.types import AgentProtocol, Approve, Sandbox, Task, allow_all

if TYPE_CHECKING:
    from oc_repl.tasks.tamper import TamperProbe


def task_name_for(instruction: str) -> str:
    words = re.findall(r"[a-z0-9]+", instruction.lower())[:4]
    return "-".join(words) or "task"


class Fanout:
    """Sends each event to every sink in order. The transcript comes first; a display that fails (a closed pipe, a
    vanished terminal) is dropped with one error event instead of stopping the run or the record of it."""

    def __init__(self, *sinks: Callable[[Any], None]) -> None:
        self.sinks = list(sinks)

    def __call__(self, event: Any) -> None:
        failed = []
        for sink in self.sinks:
            try:
                sink(event)
            except (OSError, ValueError) as exc:  # ValueError: writing to a closed file
                failed.append((sink, exc))
        for sink, exc in failed:
            self.sinks.remove(sink)
            self(ev.Error(kind="display", message=f"an output stopped taking events and was dropped: {exc!r}"))


def ask_consent(question: str) -> bool:
    """A yes/no at the terminal, on stderr. Ctrl-D (end of input) is a no; Ctrl-C interrupts as everywhere."""
    sys.stderr.write(f"{question} [y/N]: ")
    sys.stderr.flush()
    try:
        answer = input()
    except EOFError:
        sys.stderr.write("\n")
        return False
    return answer.strip().lower() in ("y", "yes")


def _consent(settings: RunSettings) -> None:
    """Nothing the model chooses runs on this host without a yes: --yes, or one typed at a terminal."""
    if not settings.sandbox.startswith("local:") or settings.yes:
        return
    where = settings.sandbox.removeprefix("local:")
    network = "the network on" if settings.network else "no network"
    how = f"confined to it (the rest of the host read-only, {network})" if settings.confine else "UNCONFINED"
    if sys.stdin.isatty() and ask_consent(f"Let the model run commands on this host in {where}, {how}?"):
        return
    raise UsageError(
        f"refusing to run model-chosen commands on this host ({settings.sandbox}) without consent",
        hint="pass --yes, or use a container sandbox (docker:<name>, docker-image:<image>)",
    )


def _unconfined_consent(settings: RunSettings, why: str) -> None:
    """bubblewrap cannot confine commands here: running them unconfined is the user's choice, never a default."""
    where = settings.sandbox.removeprefix("local:")
    question = (
        f"bubblewrap cannot confine commands here ({why}). Let the model run them UNCONFINED on this host in {where}?"
    )
    if not settings.yes and sys.stdin.isatty() and ask_consent(question):
        return
    raise UsageError(
        f"local: cannot be confined here: {why}",
        hint="install bubblewrap (apt-get install bubblewrap), use a container sandbox, or pass --no-confine to run "
        "the model's commands unconfined on this host",
    )


def _started(sandbox: Sandbox, meanwhile: Callable[[], None] | None) -> Sandbox:
    """`sandbox` once it is ready to run commands, `meanwhile` done while it got there; closed if either fails."""
    try:
        if meanwhile is not None:
            meanwhile()
        ready = getattr(sandbox, "ready", None)  # a driver that starts something in the background waits here
        if ready is not None:
            ready()
    except BaseException:
        with contextlib.suppress(SandboxError):
            sandbox.close()
        raise
    return sandbox


def _sandbox_options(settings: RunSettings) -> dict[str, Any]:
    if settings.sandbox.startswith("docker-image:"):
        options = {
            "workdir": settings.workdir,
            "network": settings.docker_network,
            "keep": settings.keep,
            "max_processes": settings.max_processes,
            "memory_mb": settings.memory_mb,
        }
        if settings.timeout:  # else the driver's default (a day): long enough for a working session in the shell
            from oc_repl.sandbox.docker_lifetime import for_run

            options["lifetime"] = for_run(settings.timeout, settings.verify_timeout)
        return options
    if settings.sandbox.startswith("docker:"):
        return {"workdir": settings.workdir}
    from oc_repl.sandbox.limits import Limits

    limits = Limits(processes=settings.max_processes, memory_mb=settings.memory_mb)
    return {
        "confine": settings.confine,
        "network": settings.network,
        "writable_vcs": settings.writable_vcs,
        "limits": limits,
    }


def command_verifier(settings: RunSettings) -> Verifier | None:
    if not (settings.verify or settings.verify_file):
        return None
    from oc_repl.tasks.verify import CommandVerifier

    return CommandVerifier(settings.verify or "", settings.verify_file, settings.verify_timeout)


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
        return exit_code(self.status)


class Session:
    """One conversation in one sandbox: what `oc-repl run` uses once and the interactive shell many times."""

    def __init__(self, settings: RunSettings, emit: Callable[[Any], None], approve: Approve = allow_all) -> None:
        from oc_repl.client.chat import ChatClient

        self.settings = settings
        self.emit = emit
        self.approve = approve  # asked before each model action (the shell's approval); a hook like `emit`
        self.client = ChatClient(
            settings.api_base,
            settings.api_key,
            settings.model,
            stream=settings.stream,
            retries=settings.retries,
            idle_timeout=settings.idle_timeout,
            request_timeout=settings.request_timeout,
            on_retry=self._on_retry,
        )
        self.protocol: AgentProtocol | None = None
        self.sandbox: Sandbox | None = None
        self.verifier: Verifier | None = command_verifier(settings)
        self.thread_id = uuid.uuid4().hex[:12]
        self.tasks_run = 0  # in the current conversation
        self.transcript_path = ""  # named in thread.completed, when the caller keeps one
        self.task_agent_timeout: float | None = None  # a task directory's own limit for the agent
        self.terminated = False  # a SIGTERM or SIGHUP stopped a run: the interactive shell leaves too
        self.attempt, self.attempts = 1, 1  # named in thread.started and thread.completed (`run --attempts N`)
        self.probe: TamperProbe | None = None  # the tamper baseline of the current sandbox
        # A verifier outside oc-repl (Harbor's) judges the sandbox after a run ending so: it is quieted and probed.
        self.judged_after: frozenset[Status] = frozenset()

    def _on_retry(self, message: str, attempt: int) -> None:
        total = self.settings.retries + 1
        self.emit(ev.Error(kind="server", message=f"{message} (attempt {attempt} of {total})", retrying=True))

    # --- pieces, made when first needed ------------------------------------------------------------------------

    def open_sandbox(self, meanwhile: Callable[[], None] | None = None) -> Sandbox:
        if self.sandbox is None:
            self.sandbox = self.try_sandbox(meanwhile)
        return self.sandbox

    def try_sandbox(self, meanwhile: Callable[[], None] | None = None) -> Sandbox:
        """A sandbox for the current settings, after consent; the session's own is left as it is. `meanwhile` runs
        while the sandbox starts (a confined one starts a process of its own)."""
        from oc_repl.sandbox import open_sandbox

        _consent(self.settings)
        try:
            return _started(open_sandbox(self.settings.sandbox, **_sandbox_options(self.settings)), meanwhile)
        except ConfinementUnavailable as exc:
            _unconfined_consent(self.settings, exc.message)
            self.settings = self.settings.replace(confine=False)
            return open_sandbox(self.settings.sandbox, **_sandbox_options(self.settings))

    def open_protocol(self) -> AgentProtocol:
        if self.protocol is None:
            from oc_repl import protocols
            from oc_repl.deviations import Deviations

            s = self.settings
            self.protocol = protocols.create(
                s.protocol,
                Deviations.from_settings(s),
                history=s.history,
                observation_limit=s.observation_limit,
                system=s.system,
            )
            if s.exact:
                protocols.require_upstream(s.protocol, self.protocol.assets())
        return self.protocol

    def new_conversation(self) -> None:
        if self.protocol is not None:
            with contextlib.suppress(SandboxError):
                self.protocol.close()
        self.protocol, self.tasks_run, self.thread_id = None, 0, uuid.uuid4().hex[:12]

    def close(self) -> str:
        """Stop what the session left running; returns the name of a container kept on purpose (--keep)."""
        self.new_conversation()
        sandbox, self.sandbox, self.probe = self.sandbox, None, None
        if sandbox is None:
            return ""
        with contextlib.suppress(SandboxError, KeyboardInterrupt):
            sandbox.close()
        return getattr(sandbox, "name", "") if getattr(sandbox, "keep", False) else ""

    # --- running -----------------------------------------------------------------------------------------------

    def run(self, instruction: str, close_after: bool = False) -> TaskResult:
        """One task in the current conversation, then the verifier, then `thread.completed`. With `close_after` the
        conversation ends here: what the agent left running is stopped before the verifier."""
        outcome, verify, kept, findings = Outcome(), None, "", []
        calls_before = (self.client.native_calls, self.client.salvaged_calls)
        with signals.stoppable():
            try:
                outcome = self._run(instruction, close_after)
                if self.verifier is not None and outcome.status in VERIFIABLE:
                    verify = self.verify_now(final_run=close_after)
                    findings = verify.findings
                elif outcome.status in self.judged_after:
                    findings, _ = self._evidence(self.open_sandbox(), stop=True)
            except OcReplError as exc:
                self.emit(ev.Error(kind=exc.kind, message=exc.message, hint=exc.hint))
                outcome.status = exc.status
            except Deadline:
                outcome.status = Status.AGENT_TIMEOUT
            except KeyboardInterrupt as exc:
                outcome.status = Status.INTERRUPTED
                self.terminated = isinstance(exc, Terminated)
            except Exception as exc:  # a bug: still end the transcript properly, with the traceback in it
                self.emit(ev.Error(kind="internal", message=f"internal error: {exc!r}", hint=traceback.format_exc()))
                outcome.status = Status.INTERNAL_ERROR
            finally:
                if close_after:  # cleanup runs to its end; a second Ctrl-C or a SIGTERM now is only remembered
                    with signals.deferred() as late:
                        kept = self.close()
                    if late.interrupted:
                        outcome.status = Status.INTERRUPTED
                        self.terminated = self.terminated or late.terminated
            tampered = any(f.affects_tests for f in findings)
            status = final(outcome.status, verify.passed if verify is not None else None, tampered)
            self.emit(
                ev.ThreadCompleted(
                    status=status.value,
                    exit_code=exit_code(status),
                    final_answer=outcome.final_answer,
                    turns=outcome.turns,
                    tool_calls_native=self.client.native_calls - calls_before[0],
                    tool_calls_salvaged=self.client.salvaged_calls - calls_before[1],
                    kept_container=kept,
                    transcript=self.transcript_path,
                    attempt=self.attempt,
                    attempts=self.attempts,
                )
            )
        return TaskResult(status, outcome.final_answer, verify, outcome.turns, self.attempt, findings)

    def _run(self, instruction: str, close_after: bool) -> Outcome:
        task = self._task(instruction)
        protocol = self.open_protocol()
        # plain chat (raw) runs nothing, so it needs no sandbox and no consent; httpx loads while a sandbox starts
        needed = getattr(protocol, "needs_sandbox", True)
        sandbox = self.open_sandbox(meanwhile=self.client.connect) if needed else None
        # something judges this run, or may (the shell's /verify, later in the conversation): a baseline first
        judged = self.verifier is not None or bool(self.judged_after) or not close_after
        if sandbox is not None and judged and (self.probe is None or self.probe.sandbox is not sandbox):
            self.probe = self._baseline(sandbox)
        model = self.client.resolve_model()
        self.emit(self._thread_started(model, task, sandbox, protocol))
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
        with signals.deadline(self.agent_timeout()):
            outcome = agent.run(task, follow_up=self.tasks_run > 0)
        self.tasks_run += 1
        return outcome

    def agent_timeout(self) -> float | None:
        """The agent's time: --timeout, and a task directory's own agent timeout, whichever is shorter."""
        limits = [self.settings.timeout, self.task_agent_timeout]
        found = [limit for limit in limits if limit]
        return min(found) if found else None

    def verify_now(self, verifier: Verifier | None = None, final_run: bool = False) -> ev.VerifyCompleted:
        """The verifier's verdict, with the evidence gathered just before it. In the `final_run` of a sandbox what
        the agent left running is stopped first; mid-conversation (the shell) it is listed and left running, and the
        sandbox as the verdict leaves it becomes the baseline for the next one."""
        verifier = verifier or self.verifier
        if verifier is None:
            raise UsageError("no verifier set", hint="give one: --verify CMD, --verify-file F, or /verify CMD")
        sandbox = self.open_sandbox()
        findings, stopped = self._evidence(sandbox, stop=final_run)
        result = verifier.run(sandbox)
        result.findings, result.processes_stopped = findings, stopped
        if not final_run and self.probe is not None and self.probe.sandbox is sandbox:
            self.probe.rebaseline()
        self.emit(result)
        return result

    def _baseline(self, sandbox: Sandbox) -> TamperProbe:
        from oc_repl.tasks.tamper import TamperProbe

        # where the verifier runs: a task's in the image's WORKDIR, Harbor's too, --verify in the sandbox's workdir
        image_workdir = getattr(sandbox, "image_workdir", None) if self.judged_after else None
        return TamperProbe.opened(
            sandbox, getattr(self.verifier, "cwd", None) or image_workdir or sandbox.workdir, self.emit
        )

    def _evidence(self, sandbox: Sandbox, stop: bool) -> tuple[list[ev.Finding], bool]:
        from oc_repl.tasks.tamper import gather

        keep = self.protocol.own_processes() if self.protocol is not None else frozenset()
        probe = self.probe if self.probe is not None and self.probe.sandbox is sandbox else None
        return gather(sandbox, probe, keep, stop)

    def _task(self, instruction: str) -> Task:
        if self.settings.task is not None and self.sandbox is None:
            from oc_repl.tasks.model import open_task

            task, self.sandbox, self.verifier, task_dir = open_task(self.settings, instruction)
            self.task_agent_timeout = task_dir.agent_timeout_sec
            return task
        if not instruction.strip():
            raise UsageError("no task given", hint='oc-repl run "what to do"  (or --task DIR)')
        return Task(name=self.settings.task_name or task_name_for(instruction), instruction=instruction)

    def _thread_started(
        self, model: str, task: Task, sandbox: Sandbox | None, protocol: AgentProtocol
    ) -> ev.ThreadStarted:
        from oc_repl.deviations import Deviations
        from oc_repl.sandbox.isolation import isolation_of

        s = self.settings
        return ev.ThreadStarted(
            thread_id=self.thread_id,
            model=model,
            protocol=s.protocol,
            sandbox=sandbox.spec if sandbox else "none",
            api_base=s.api_base,
            task_name=task.name,
            task=task.instruction,
            workdir=protocol.working_directory(sandbox) if sandbox is not None else "",
            assets=[ev.AssetInfo(**vars(a)) for a in protocol.assets()],
            exact=s.exact,
            deviations=Deviations.from_settings(s).names(),
            options={
                "sampling": s.sampling_options(),
                "history": s.history,
                "stream": s.stream,
                "max_turns": s.max_turns,
                "follow_up": self.tasks_run > 0,
            },
            attempt=self.attempt,
            isolation=isolation_of(sandbox) if sandbox is not None else ev.Isolation(),
        )
