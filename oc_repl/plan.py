"""A run, planned once from its settings; the runner (oc_repl/session.py) executes the plan.

`plan(settings, instruction)` decides everything a run is made of before anything starts: the task as the model gets
it (the instruction, or a task directory's), where its sandboxes come from (`Sandboxes`: a driver with the options it
reads from the settings, a task's own network, limits and container lifetime over them, and the consent a sandbox on
this host needs), the verifier, the agent's time, the number of attempts and the served model's files
(`--tokenizer`). This is the one place that constructs a run's sandboxes, chooses its verifier and reads its task
directory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from oc_repl.config import RunSettings
from oc_repl.errors import ConfinementUnavailable, SandboxError, UsageError
from oc_repl.sandbox.kinds import CONTAINERS, KINDS, SandboxKind, image_kind, image_spec, kind_of, target_of
from oc_repl.types import Consent, Sandbox, Task

if TYPE_CHECKING:
    from oc_repl.client.model_files import ModelFiles
    from oc_repl.tasks.model import TaskDir
    from oc_repl.tasks.verify import Verifier


@dataclass(frozen=True)
class RunPlan:
    """What one thread runs: settled before it starts, never changed under it (the shell's changes make the next
    plan: conversation.py)."""

    settings: RunSettings
    task: Task | None  # None: each message is a task of its own (the interactive shell)
    sandboxes: Sandboxes
    verifier: Verifier | None = None
    agent_timeout: float | None = None  # seconds: --timeout, or a task's own agent timeout, whichever is shorter
    attempts: int = 1
    harness_judges: bool = False  # a verifier outside oc-repl (Harbor's) judges the sandbox once the run ends
    model_files: ModelFiles | None = None  # --tokenizer's chat template and tokenizer

    def task_for(self, instruction: str | None) -> Task:
        """The planned task, or (the shell) one made of the message."""
        if instruction is None and self.task is not None:
            return self.task
        return task_for(self.settings, instruction or "")


def plan(
    settings: RunSettings,
    instruction: str | None = None,
    *,
    attempts: int = 1,
    sandbox: Sandbox | None = None,
) -> RunPlan:
    """The plan of a run of `instruction` (None: the shell's, whose messages come later) or of `settings.task`.
    `sandbox`: the one sandbox a harness gives (Harbor's environment), judged by the harness's own verifier.
    UsageError when the settings do not make a run."""
    check_attempts(settings, attempts)
    planned = _planned(settings, instruction, attempts, sandbox)
    return dataclasses.replace(planned, model_files=model_files_for(settings))


def model_files_for(settings: RunSettings) -> ModelFiles | None:
    """The served model's files a run renders and counts with; under --exact a protocol trained on token ids needs
    the tokenizer itself."""
    if settings.tokenizer is None:
        return None
    from oc_repl.client.model_files import load_model_files

    return load_model_files(settings.tokenizer, need_tokenizer=settings.exact and settings.protocol_kind().token_ids)


def _planned(settings: RunSettings, instruction: str | None, attempts: int, sandbox: Sandbox | None) -> RunPlan:
    if settings.task is not None:
        return _task_plan(settings, instruction, attempts)
    return RunPlan(
        settings,
        None if instruction is None else task_for(settings, instruction),
        sandboxes_for(settings) if sandbox is None else Given(sandbox),
        verifier_for(settings),
        agent_timeout=settings.timeout or None,
        attempts=attempts,
        harness_judges=sandbox is not None,
    )


def known(settings: RunSettings, instruction: str | None, sandbox: Sandbox | None = None) -> RunPlan:
    """What is known of a run that could not be planned: its thread still starts, with this, and says why."""
    if settings.task is not None:  # a task is named by its folder; its container was never named
        task, spec = Task(name=settings.task_name or settings.task.name, instruction=""), "none"
    else:
        task = Task(name=settings.task_name or task_name_for(instruction or ""), instruction=instruction or "")
        spec = settings.sandbox
    return RunPlan(settings, task, Sandboxes(spec, {}) if sandbox is None else Given(sandbox))


def _task_plan(settings: RunSettings, instruction: str | None, attempts: int) -> RunPlan:
    """A task dir brings the instruction, the image to run in (built unless --image names one) and its tests.

    The container gets the network the task declares (--docker-network chooses another), oc-repl's process limit, and
    the task's own memory and CPUs where it names them (oc-repl's memory limit where it does not)."""
    from oc_repl.sandbox.docker_lifetime import for_run
    from oc_repl.tasks.model import load_task

    assert settings.task is not None
    if instruction or settings.verify or settings.verify_file:
        raise UsageError("--task brings its own instruction and tests; drop the instruction and --verify")
    task_dir = load_task(settings.task)
    agent_time = min(filter(None, (settings.timeout, task_dir.agent_timeout_sec)))
    options = {
        **sandbox_options(settings, image_kind(settings.task_sandbox)),
        "lifetime": for_run(agent_time, task_dir.test_timeout_sec),
        "memory_mb": task_dir.memory_mb or settings.memory_mb,
        "cpus": task_dir.cpus,
    }
    if not settings.docker_network:
        options.pop("docker_network", None)  # the task's own, found when its image is ready
    return RunPlan(
        settings,
        Task(name=settings.task_name or task_dir.name, instruction=task_dir.instruction),
        TaskSandboxes(settings, task_dir, options),
        task_dir.verifier(),
        agent_timeout=agent_time,
        attempts=attempts,
    )


def task_name_for(instruction: str) -> str:
    words = re.findall(r"[a-z0-9]+", instruction.lower())[:4]
    return "-".join(words) or "task"


def task_for(settings: RunSettings, instruction: str) -> Task:
    if not instruction.strip():
        raise UsageError("no task given", hint='oc-repl run "what to do"  (or --task DIR)')
    return Task(name=settings.task_name or task_name_for(instruction), instruction=instruction)


def verifier_for(settings: RunSettings) -> Verifier | None:
    """`--verify CMD` or `--verify-file F`; a task directory's verifier comes with its plan."""
    if not (settings.verify or settings.verify_file):
        return None
    from oc_repl.tasks.verify import CommandVerifier

    return CommandVerifier(settings.verify or "", settings.verify_file, settings.verify_timeout)


def check_attempts(settings: RunSettings, attempts: int) -> None:
    """Repeating needs a verdict to repeat for and a sandbox that starts afresh each time."""
    if attempts < 1:
        raise UsageError(f"attempts must be at least 1, not {attempts}")
    if attempts == 1:
        return
    if settings.task is None and not (settings.verify or settings.verify_file):
        raise UsageError("--attempts repeats a run until it is verified: give --task, --verify or --verify-file")
    if settings.task is None and not kind_of(settings.sandbox).fresh:
        fresh = " or ".join(f"--sandbox {kind.form}" for kind in KINDS.values() if kind.fresh)
        raise UsageError(
            f"--attempts needs a sandbox that starts afresh for every attempt, which {settings.sandbox} does not",
            hint=f"use --task DIR or {fresh} (a new one per attempt)",
        )


# --- sandboxes -------------------------------------------------------------------------------------------------------


def sandbox_options(settings: RunSettings, kind: SandboxKind) -> dict[str, Any]:
    """What a driver of `kind` opens a sandbox with: its kind's own settings, and those of the core's sandbox facts
    its kind takes (the limits of what it runs, the client's private files, a container's workdir and lifetime)."""
    from oc_repl.sandbox import docker_lifetime
    from oc_repl.sandbox.limits import Limits

    facts: dict[str, Any] = {
        "workdir": settings.workdir,
        "max_processes": settings.max_processes,
        "memory_mb": settings.memory_mb,
        "limits": Limits(processes=settings.max_processes, memory_mb=settings.memory_mb),
        "private_files": [path for path in (settings.config_file, settings.api_key_file) if path is not None],
    }
    if settings.timeout:  # else the driver's default (a day): long enough for a working session in the shell
        facts["lifetime"] = docker_lifetime.for_run(settings.timeout, settings.verify_timeout)
    return {**{name: facts[name] for name in kind.takes if name in facts}, **settings.own(kind.options)}


def sandboxes_for(settings: RunSettings) -> Sandboxes:
    """The sandboxes `settings.sandbox` names, with the options its driver opens them with."""
    return Sandboxes(settings.sandbox, sandbox_options(settings, kind_of(settings.sandbox)), settings.yes)


class Sandboxes:
    """Where a run's sandboxes come from: `spec` (what `thread.started` names before one opens) and the driver's
    options. Each `open` makes a fresh one, after consent when it runs model-chosen commands on this host."""

    def __init__(self, spec: str, options: dict[str, Any], yes: bool = False) -> None:
        self.spec, self.options, self.yes = spec, options, yes  # yes: --yes, consent given beforehand

    def open(self, consent: Consent, meanwhile: Callable[[], None] | None = None) -> Sandbox:
        """A sandbox ready to run commands; `meanwhile` runs while it starts (a confined one starts a process of its
        own). bubblewrap unable to confine here falls back to no confinement only on a yes to that question."""
        from oc_repl.sandbox import open_sandbox

        self._consent(consent)
        try:
            return _started(open_sandbox(self.spec, **self.options), meanwhile)
        except ConfinementUnavailable as exc:
            self._unconfined_consent(consent, exc.message)
            self.options["confine"] = False
            return open_sandbox(self.spec, **self.options)

    @property
    def where(self) -> str:
        """The host directory an on-host sandbox runs in, as a person must read it in a question: absolute."""
        return os.path.abspath(os.path.expanduser(target_of(self.spec)))

    def _consent(self, consent: Consent) -> None:
        """Nothing the model chooses runs on this host without a yes: --yes, or one the consent hook gives."""
        if not kind_of(self.spec).on_host or self.yes:
            return
        where = self.where
        network = "the network on" if self.options.get("network") else "no network"
        confined = self.options.get("confine", True)
        how = f"confined to it (the rest of the host read-only, {network})" if confined else "UNCONFINED"
        if consent(f"Let the model run commands on this host in {where}, {how}?"):
            return
        raise UsageError(
            f"refusing to run model-chosen commands on this host (in {where}) without consent",
            hint=f"pass --yes, or use a container sandbox ({CONTAINERS})",
        )

    def _unconfined_consent(self, consent: Consent, why: str) -> None:
        """Running unconfined is the user's choice, never a default (and never what --yes alone consents to)."""
        where = self.where
        question = (
            f"bubblewrap cannot confine commands here ({why}). Let the model run them UNCONFINED on this host in "
            f"{where}?"
        )
        if not self.yes and consent(question):
            return
        raise UsageError(
            f"local: cannot be confined here: {why}",
            hint="install bubblewrap (apt-get install bubblewrap), use a container sandbox, or pass --no-confine to "
            "run the model's commands unconfined on this host",
        )


class TaskSandboxes(Sandboxes):
    """A task's containers: its image is built when the first is due (once, for every attempt) unless --image names
    one, and each gets the task's network unless --docker-network chose another."""

    def __init__(self, settings: RunSettings, task_dir: TaskDir, options: dict[str, Any]) -> None:
        from oc_repl.tasks.image import image_tag

        self.task_dir, self.image_ready = task_dir, settings.image is not None
        self.scheme = settings.task_sandbox
        super().__init__(image_spec(settings.image or image_tag(task_dir), self.scheme), options)

    def open(self, consent: Consent, meanwhile: Callable[[], None] | None = None) -> Sandbox:
        from oc_repl.tasks.image import build_image, task_network

        if not self.image_ready:
            self.spec, self.image_ready = image_spec(build_image(self.task_dir), self.scheme), True
        if "docker_network" not in self.options:
            self.options["docker_network"] = task_network(self.task_dir)
        return super().open(consent, meanwhile)


class Given(Sandboxes):
    """The one sandbox a harness hands the run (Harbor's environment): opened by the harness, closed by the run."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox
        super().__init__(sandbox.spec, {})

    def open(self, consent: Consent, meanwhile: Callable[[], None] | None = None) -> Sandbox:
        return self.sandbox


def _started(sandbox: Sandbox, meanwhile: Callable[[], None] | None) -> Sandbox:
    """`sandbox` once it is ready to run commands, `meanwhile` done while it got there; closed if either fails."""
    try:
        if meanwhile is not None:
            meanwhile()
        sandbox.ready()
    except BaseException:
        with contextlib.suppress(SandboxError):
            sandbox.close()
        raise
    return sandbox
