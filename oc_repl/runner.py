"""One run, assembled: settings -> client, protocol, sandbox, renderers, transcript -> loop -> verify -> exit code."""

from __future__ import annotations

import contextlib
import re
import signal
import sys
import uuid
from collections.abc import Callable
from typing import Any

from oc_repl import events as ev
from oc_repl.agent import Agent, Outcome
from oc_repl.config import RunSettings
from oc_repl.errors import OcReplError, SandboxError, UsageError
from oc_repl.types import AgentProtocol, Sandbox, Task
from oc_repl.verify import Verifier

# The verifier decides the outcome whenever the loop ended in a state worth checking.
VERIFIABLE = {"done", "turn_cap", "loop", "parse_errors"}
EXIT_CODES = {
    "done": 0,
    "turn_cap": 3,
    "loop": 4,
    "parse_errors": 4,
    "server_error": 5,
    "sandbox_error": 6,
    "interrupted": 130,
    "usage": 2,
}


def exit_status(outcome: Outcome, verify: ev.VerifyCompleted | None) -> tuple[str, int]:
    if verify is not None and verify.passed:
        return "verified", 0
    if verify is not None and outcome.status == "done":
        return "verify_failed", 1
    return outcome.status, EXIT_CODES.get(outcome.status, 1)


def task_name_for(instruction: str) -> str:
    words = re.findall(r"[a-z0-9]+", instruction.lower())[:4]
    return "-".join(words) or "task"


class Fanout:
    def __init__(self, *sinks: Callable[[Any], None]) -> None:
        self.sinks = list(sinks)

    def __call__(self, event: Any) -> None:
        for sink in self.sinks:
            sink(event)


def _interrupt_on_sigterm() -> None:
    # A terminated run cleans up like an interrupted one: sessions killed, transcript closed.
    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def _consent(settings: RunSettings) -> None:
    if not settings.sandbox.startswith("local:") or settings.yes:
        return
    where = settings.sandbox.removeprefix("local:")
    if sys.stdin.isatty():
        import click

        if click.confirm(f"Let the model run commands on this host in {where}?", err=True, default=False):
            return
    raise UsageError(
        f"refusing to run model-chosen commands on this host ({settings.sandbox}) without consent",
        hint="pass --yes, or use a container sandbox (docker:<name>)",
    )


def _sandbox_options(settings: RunSettings) -> dict[str, Any]:
    if settings.sandbox.startswith("docker-image:"):
        return {"workdir": settings.workdir, "network": settings.docker_network, "keep": settings.keep}
    if settings.sandbox.startswith("docker:"):
        return {"workdir": settings.workdir}
    return {}


def _prepare(settings: RunSettings, instruction: str) -> tuple[Task, Sandbox, Verifier | None]:
    """The task, the sandbox it runs in, and what checks it, from the settings (a task dir brings all three)."""
    from oc_repl.sandbox import open_sandbox

    if settings.task is not None:
        from oc_repl.tasks import TaskVerifier, build_image, load_task_dir

        if instruction or settings.verify or settings.verify_file:
            raise UsageError("--task brings its own instruction and tests; drop the instruction and --verify")
        task_dir = load_task_dir(settings.task)
        image = settings.image or build_image(task_dir)
        sandbox = open_sandbox(
            f"docker-image:{image}", workdir=settings.workdir, network=settings.docker_network, keep=settings.keep
        )
        verifier: Verifier | None = TaskVerifier(task_dir, cwd=sandbox.image_workdir)  # type: ignore[attr-defined]
        return Task(name=settings.task_name or task_dir.name, instruction=task_dir.instruction), sandbox, verifier
    if not instruction.strip():
        raise UsageError("no task given", hint='oc-repl run "what to do"  (or --task DIR)')
    _consent(settings)
    sandbox = open_sandbox(settings.sandbox, **_sandbox_options(settings))
    verifier = None
    if settings.verify or settings.verify_file:
        from oc_repl.verify import CommandVerifier

        verifier = CommandVerifier(settings.verify or "", settings.verify_file, settings.verify_timeout)
    return Task(name=settings.task_name or task_name_for(instruction), instruction=instruction), sandbox, verifier


def run_task(settings: RunSettings, instruction: str) -> int:
    from oc_repl import protocols
    from oc_repl.client import ChatClient
    from oc_repl.transcript import TranscriptWriter, default_path

    _interrupt_on_sigterm()
    thread_id = uuid.uuid4().hex[:12]
    if settings.json_output:
        from oc_repl.render.jsonl import JsonlRenderer

        renderer: Callable[[Any], None] = JsonlRenderer()
    else:
        from oc_repl.render.human import HumanRenderer

        renderer = HumanRenderer()
    transcript = TranscriptWriter(settings.transcript or default_path(thread_id), secrets=(settings.api_key,))
    emit = Fanout(transcript, renderer)

    def on_retry(message: str, attempt: int) -> None:
        emit(ev.Error(kind="server", message=f"{message} (attempt {attempt} of {settings.retries + 1})", retrying=True))

    client = ChatClient(
        settings.api_base,
        settings.api_key,
        settings.model,
        stream=settings.stream,
        retries=settings.retries,
        idle_timeout=settings.idle_timeout,
        on_retry=on_retry,
    )
    outcome, verify, kept = Outcome(status="error"), None, ""
    protocol: AgentProtocol | None = None
    sandbox: Sandbox | None = None
    try:
        protocol = protocols.create(
            settings.protocol, history=settings.history, observation_limit=settings.observation_limit
        )
        task, sandbox, verifier = _prepare(settings, instruction)
        model = client.resolve_model()
        emit(
            ev.ThreadStarted(
                thread_id=thread_id,
                model=model,
                protocol=settings.protocol,
                sandbox=sandbox.spec,
                api_base=settings.api_base,
                task_name=task.name,
                assets=[ev.AssetInfo(**vars(a)) for a in protocol.assets()],
                options={
                    "sampling": settings.sampling_options(),
                    "history": settings.history,
                    "stream": settings.stream,
                    "max_turns": settings.max_turns,
                    "transcript": str(transcript.path),
                },
            )
        )
        agent = Agent(
            client,
            protocol,
            sandbox,
            emit,
            max_turns=settings.max_turns,
            loop_limit=settings.loop_limit,
            sampling=settings.sampling_options(),
        )
        outcome = agent.run(task)
        if verifier is not None and outcome.status in VERIFIABLE:
            verify = verifier.run(sandbox)
            emit(verify)
    except OcReplError as exc:
        emit(ev.Error(kind=exc.kind, message=exc.message, hint=exc.hint))
        outcome.status = {2: "usage", 6: "sandbox_error", 5: "server_error"}.get(exc.exit_code, "error")
    except KeyboardInterrupt:
        outcome.status = "interrupted"
    finally:
        kept = _close(protocol, sandbox)
    status, code = exit_status(outcome, verify)
    emit(
        ev.ThreadCompleted(
            status=status,
            exit_code=code,
            final_answer=outcome.final_answer,
            turns=outcome.turns,
            tool_calls_native=client.native_calls,
            tool_calls_salvaged=client.salvaged_calls,
            kept_container=kept,
        )
    )
    transcript.close()
    if not settings.json_output and outcome.final_answer:
        sys.stdout.write(outcome.final_answer.rstrip("\n") + "\n")
    return code


def _close(protocol: AgentProtocol | None, sandbox: Sandbox | None) -> str:
    """Stop what the run left running; a sandbox that is already gone is not a second error.

    Returns the name of a container kept on purpose (--keep), for the user to find it.
    """
    for closing in (protocol and protocol.close, sandbox and sandbox.close):
        if not closing:
            continue
        with contextlib.suppress(SandboxError, KeyboardInterrupt):
            closing()
    return getattr(sandbox, "name", "") if getattr(sandbox, "keep", False) else ""
