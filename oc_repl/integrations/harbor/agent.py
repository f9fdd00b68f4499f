"""oc-repl as a Harbor agent: `harbor run --agent oc_repl.harbor:OcRepl -m MODEL -e docker|daytona|... -n 64`.

The agent runs in Harbor's own process, on the one asyncio loop all its concurrent trials share, so the loop must never
block. oc-repl's Session is synchronous: each trial runs it on a worker thread of its own, and its sandbox
(oc_repl/integrations/harbor/environment.py) hands every environment call back to Harbor's loop.

Settings come from Harbor's agent options (`--ak key=value`, listed by `harbor agent schema oc_repl.harbor:OcRepl`);
the API base falls back to OPENAI_BASE_URL, and the key is read from Harbor's own environment (`api_key_env`, default
OPENAI_API_KEY) and never taken as an option: Harbor writes options into its job files and puts `--ae` variables into
the task container's commands.

Harbor, not oc-repl, judges the trial: oc-repl's verifier never runs. The agent returns normally whenever the task may
be done (the model finished, the turn cap, a loop, too many unreadable replies, a context overflow), so Harbor's
verifier runs; it raises only when something outside the model failed (the model server after oc-repl's retries, the
environment, the settings), which Harbor records as the trial's exception. It leaves everything the agent started
running, as Harbor's own agents do (a server the task asked for is part of the solution Harbor's verifier checks); what
it left running and what it changed (the evidence, tasks/evidence.py: its base taken at the start, its look at the end)
go to `context.metadata` as findings, with `tampered` true when one of them can sway tests (the status is then
`tampered`).

When Harbor stops the agent (its timeout, or a cancelled job), the worker cannot be interrupted by a signal (only the
main thread gets those), so it is stopped cooperatively: the environment call it is waiting on is cancelled, and the
next call, turn, request or streamed token raises oc-repl's own Deadline. oc-repl then ends the run as it ends one that
ran out of time: the running command's process group is killed, the turn is recorded as failed, camel's sessions or
the terminus terminal are closed, every process the sandbox started is killed, and the transcript ends with
`thread.completed` (status `agent_timeout`). The agent waits for that up to STOP_GRACE seconds; a worker still inside
a model request then (a server that sends nothing) is abandoned: its later environment calls are refused, the
processes it started are killed from the loop, and it ends on its own when the request returns or times out.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
from pathlib import Path
from typing import Annotated, Any, Literal

from harbor.agents.base import BaseAgent
from harbor.agents.options import AgentOptions, Env
from harbor.environments.base import BaseEnvironment
from harbor.models.agent.context import AgentContext
from pydantic import Field, ValidationError, create_model

from oc_repl import __version__
from oc_repl.apikey import KEY_ENV
from oc_repl.config import HARBOR, RunSettings, options_on, validate, with_plugins
from oc_repl.errors import OcReplError, SandboxError
from oc_repl.integrations.harbor.environment import HarborSandbox, LoopBridge
from oc_repl.integrations.harbor.record import CHECKPOINTS, RunRecord, trajectory
from oc_repl.outcome import Status
from oc_repl.private import write_atomic
from oc_repl.redact import Redactor, redactor
from oc_repl.session import Fanout, TaskResult, run_attempts
from oc_repl.sources import resolve
from oc_repl.transcript import TranscriptWriter

TRANSCRIPT = "oc-repl.jsonl"
STOP_GRACE = 15.0  # seconds a stopped worker gets to end its run before it is abandoned


# What the agent fills in when these are not given (`run`), in place of the table's defaults.
HARBOR_DEFAULTS = {"model": "-m without its provider prefix", "task_name": "the Harbor task's name"}


def _options_model() -> type[AgentOptions]:
    """The settings the table offers Harbor, as Harbor's options model. Each shows the table's default; only those
    given (by `--ak`, or for `api_base` by Harbor's fallback to OPENAI_BASE_URL) reach the run, so that `--exact`
    can tell a `max_turns` asked for from the default it replaces. The kinds installed packages register bring their
    rows too."""
    with_plugins()
    kinds = {"str": str, "int": int, "float": float, "bool": bool, "Path": str}
    fields: dict[str, Any] = {}
    for option in options_on(HARBOR):
        kind: Any = Literal[option.choices] if option.choices else kinds[option.kind]
        annotation: Any = kind | None
        if option.env:
            annotation = Annotated[annotation, Env(option.env, fallback=option.env)]
        described = option.described(HARBOR_DEFAULTS.get(option.name))
        fields[option.name] = (annotation, Field(option.default, description=described, **option.bounds))
    fields["api_key_env"] = (
        str,
        Field(KEY_ENV, description="The variable of Harbor's environment holding the API key."),
    )
    return create_model(
        "OcReplOptions",
        __base__=AgentOptions,
        __doc__="oc-repl's run settings, as `--ak key=value` (see `oc-repl run --help` for what each does).",
        __module__=__name__,
        **fields,
    )


OcReplOptions = _options_model()
RUN_KEYS = {option.name for option in options_on(HARBOR)}


def run_settings(options: AgentOptions, model: str | None) -> RunSettings:
    """The settings of one run; a ValueError (Harbor's kind of option error) when they do not go together."""
    given = {key: getattr(options, key) for key in options.model_fields_set & RUN_KEYS}
    if model and given.get("model") is None:
        given["model"] = model
    try:
        # Harbor put its `--ak` over its fallbacks; the key comes from the variable `api_key_env` names
        values = resolve(given, {}, {KEY_ENV: os.environ.get(options.api_key_env, "")})
        # checked as any run's settings are; the sandbox is Harbor's environment, which no spec names
        return validate(values).replace(sandbox="harbor:environment")
    except OcReplError as exc:
        raise ValueError(f"{exc.message} ({exc.hint})" if exc.hint else exc.message) from None


class ApiError(RuntimeError):
    """The model server failed after oc-repl's own retries. Harbor files exceptions by class name; under this one it
    counts a failed model provider and retries the trial (`--max-retries`)."""


class ApiConnectionError(ApiError):
    """The model server could not be reached (same filing as ApiError)."""


class OcReplEnvironmentError(RuntimeError):
    """The environment failed under oc-repl's commands: a failure of the trial, not of the model."""


class OcRepl(BaseAgent):
    options_model = OcReplOptions

    @staticmethod
    def name() -> str:
        return "oc-repl"

    def version(self) -> str:
        return __version__

    @classmethod
    def preflight(cls, kwargs: dict[str, Any] | None = None, env: Any = None) -> None:
        """Refuse settings that cannot work before any trial starts."""
        options = cls.parse_options(kwargs, env)
        assert isinstance(options, OcReplOptions)
        run_settings(options, None)
        if options.api_key_env in (env or {}):
            raise ValueError(
                f"{options.api_key_env} is set with --ae, which puts it into the task container's commands; "
                "set it in Harbor's own environment instead (the shell, or --env-file)"
            )

    async def set_web_tools_disabled(self, disabled: bool, environment: BaseEnvironment) -> None:
        """oc-repl has no web tools of its own: the model reaches a network only through commands in the environment,
        which the environment's network policy governs."""

    async def setup(self, environment: BaseEnvironment) -> None:
        """Nothing to install: oc-repl runs here, in Harbor's process, and reaches the environment through exec."""

    async def run(self, instruction: str, environment: BaseEnvironment, context: AgentContext) -> None:
        assert isinstance(self.options, OcReplOptions)
        settings = run_settings(self.options, self._parsed_model_name)
        if settings.task_name is None and getattr(environment, "environment_name", None):
            settings = settings.replace(task_name=environment.environment_name)
        logs = Path(self.logs_dir).resolve()
        logs.mkdir(parents=True, exist_ok=True)
        loop = asyncio.get_running_loop()
        bridge = LoopBridge(loop)
        redact = redactor(settings.api_key)  # the transcript's own: every record of the trial redacts alike
        record = RunRecord(on_turn=lambda: loop.call_soon_threadsafe(_fill, context, record, redact))
        try:
            sandbox = await HarborSandbox.open(environment, bridge, workdir=settings.workdir)
        except SandboxError as exc:
            raise OcReplEnvironmentError(f"{exc.message} ({exc.hint})" if exc.hint else exc.message) from None
        done: asyncio.Future[TaskResult | BaseException] = loop.create_future()
        worker = threading.Thread(
            target=_work,
            args=(settings, sandbox, instruction, logs / TRANSCRIPT, record, done),
            name=f"oc-repl-{self.session_id or 'trial'}",
            daemon=True,  # a worker abandoned in a model request must not keep Harbor's process alive
        )
        worker.start()
        stopped: asyncio.CancelledError | None = None
        try:
            outcome = await asyncio.shield(done)
        except asyncio.CancelledError as exc:
            stopped = exc
            bridge.stop("Harbor stopped the agent")
            try:
                outcome = await asyncio.wait_for(asyncio.shield(done), STOP_GRACE)
            except TimeoutError:
                self.logger.warning("oc-repl did not stop within %ss; killing its processes from here", STOP_GRACE)
                bridge.abandon()
                await sandbox.aclose()
                outcome = None
        finally:
            _fill(context, record, redact)
            self._write_trajectory(logs, record, redact)
        if stopped is not None:
            raise stopped
        _raise_for(outcome, record)

    def _write_trajectory(self, logs: Path, record: RunRecord, redact: Redactor) -> None:
        try:
            found = trajectory(record, self.session_id or "oc-repl", __version__)
        except ValidationError as exc:  # a summary that does not fit ATIF must not cost the trial
            self.logger.warning("no trajectory.json: %s", exc)
            return
        if found is not None:
            text = json.dumps(redact.data(found.to_json_dict()), indent=2, ensure_ascii=False)
            write_atomic(logs / "trajectory.json", text)


def _work(
    settings: RunSettings,
    sandbox: HarborSandbox,
    instruction: str,
    path: Path,
    record: RunRecord,
    done: asyncio.Future[Any],
) -> None:
    """The worker thread: one oc-repl run, closed at its end (sessions, terminal, the sandbox's processes)."""
    bridge = sandbox.bridge
    bridge.worker = threading.current_thread()

    def checkpoint(event: Any) -> None:
        if event.type in CHECKPOINTS:
            bridge.checkpoint()

    outcome: TaskResult | BaseException
    try:
        writer = TranscriptWriter(path, secrets=(settings.api_key,))
        try:
            # Harbor's environment is the sandbox and Harbor's verifier judges it next, beside what the agent left: the
            # run leaves that running, with the evidence of what the agent tried
            emit = Fanout(writer, record, checkpoint)
            outcome = run_attempts(settings, instruction, emit, sandbox=sandbox, transcript=str(path))
            record.findings = outcome.findings
        finally:
            writer.close()
    except BaseException as exc:  # handed to the loop, which raises it as the trial's exception
        outcome = exc
    with contextlib.suppress(RuntimeError):  # the loop is gone: Harbor ended while this worker was abandoned
        bridge.loop.call_soon_threadsafe(_settle, done, outcome)


def _settle(done: asyncio.Future[Any], outcome: Any) -> None:
    if not done.done():
        done.set_result(outcome)


def _fill(context: AgentContext, record: RunRecord, redact: Redactor) -> None:
    """Harbor's agent context, as the run has gone so far (kept as it is if Harbor stops the agent)."""
    context.n_input_tokens = record.input_tokens
    context.n_output_tokens = record.output_tokens
    context.metadata = redact.data(record.metadata())


def _raise_for(outcome: TaskResult | BaseException | None, record: RunRecord) -> None:
    """Nothing when the verifier should judge; otherwise the failure, as an exception Harbor records."""
    if isinstance(outcome, BaseException):
        raise outcome
    if outcome is None or outcome.status.graded_by_harness:
        return
    error = record.last_error
    message = f"oc-repl ended with {outcome.status.value}" + (f": {error.message}" if error else "")
    failed = outcome.status.exit_code  # what failed, as the exit codes group it: the model server, the sandbox, ...
    if failed == Status.SERVER_ERROR.exit_code:
        unreachable = error is not None and error.kind == "server_unreachable"
        raise (ApiConnectionError if unreachable else ApiError)(message)
    if failed == Status.SANDBOX_ERROR.exit_code:
        raise OcReplEnvironmentError(message)
    if failed == Status.USAGE.exit_code:
        raise ValueError(message)
    raise RuntimeError(message)
