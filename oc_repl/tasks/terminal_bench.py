"""terminal-bench 1.x task directories: instruction and limits from task.yaml, tests run after the agent."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from oc_repl.errors import UsageError
from oc_repl.tasks import pytest_record
from oc_repl.tasks.image import build_image
from oc_repl.tasks.model import Network, TaskDir, seconds
from oc_repl.tasks.verify import NO_RECORD, Judged, Verifier, counts
from oc_repl.types import Sandbox, VerifierJob, VerifierRun

__all__ = ["TESTS_DEST", "TaskDir", "TaskVerifier", "build_image", "load_task_dir"]

TESTS_DEST = "/tests"


def _network(path: Path) -> Network:
    """The network terminal-bench gives the task's container: its docker-compose.yaml's `client` service has the
    compose project's network unless it says `network_mode: none`. Without a compose file (which terminal-bench
    requires) the container gets none."""
    import yaml

    compose = path / "docker-compose.yaml"
    if not compose.is_file():
        return "none"
    try:
        data = yaml.safe_load(compose.read_text(encoding="utf-8")) or {}
    except (yaml.YAMLError, OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {compose}: {exc}") from exc
    services = data.get("services") if isinstance(data, dict) else None
    client = services.get("client") if isinstance(services, dict) else None
    mode = client.get("network_mode") if isinstance(client, dict) else None
    if mode is None or mode in ("bridge", "default"):
        return "public"
    if mode == "none":
        return "none"
    raise UsageError(f"{compose}: network_mode {mode!r} is not supported here", hint="use none, or leave it out")


def load_task_dir(path: Path) -> TaskDir:
    import yaml

    spec = path / "task.yaml"
    if not spec.is_file():
        raise UsageError(f"{path} is not a terminal-bench task directory: it has no task.yaml")
    try:
        data = yaml.safe_load(spec.read_text(encoding="utf-8")) or {}
    except (yaml.YAMLError, OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {spec}: {exc}") from exc
    if not isinstance(data, dict):
        raise UsageError(f"{spec} must be a mapping of keys (instruction, max_agent_timeout_sec, ...)")
    instruction = data.get("instruction")
    if not isinstance(instruction, str) or not instruction.strip():
        raise UsageError(f"{spec} has no instruction")
    for needed in ("run-tests.sh", "tests"):
        if not (path / needed).exists():
            raise UsageError(f"task {path.name} has no {needed}")
    path = path.resolve()
    return TaskDir(
        path=path,
        name=path.name,
        instruction=instruction,
        format="terminal-bench",
        agent_timeout_sec=seconds(data.get("max_agent_timeout_sec"), str(spec), "max_agent_timeout_sec", 360.0),
        test_timeout_sec=seconds(data.get("max_test_timeout_sec"), str(spec), "max_test_timeout_sec", 60.0),
        context=path,
        dockerfile=path / "Dockerfile",
        network=_network(path),
    )


def task_files(source: Path, dest: str) -> list[tuple[str, bytes, int]]:
    """Every file under `source` (a file or a directory), as (path under `dest`, content, mode): how docker's copy
    of a directory puts it, modes kept."""
    if source.is_file():
        return [(dest, source.read_bytes(), source.stat().st_mode & 0o7777)]
    found = []
    for path in sorted(source.rglob("*")):
        if path.is_file():
            found.append(
                (f"{dest}/{path.relative_to(source).as_posix()}", path.read_bytes(), path.stat().st_mode & 0o7777)
            )
    return found


@dataclass
class TaskVerifier(Verifier):
    """run-tests.sh and tests/ in a fresh /tests of the verifier's own after the agent, run in the image's WORKDIR as
    root beside what the agent left running, as terminal-bench runs them; resolved = every test passed, as pytest's
    record of the session says."""

    task: TaskDir
    timeout: float | None = None

    def working_directory(self, sandbox: Sandbox) -> str:
        return sandbox.image_workdir or sandbox.workdir

    def describe(self) -> str:
        return f"bash {TESTS_DEST}/run-tests.sh ({self.task.name})"

    def job(self, sandbox: Sandbox, tools: str) -> VerifierJob:
        files = task_files(self.task.path / "run-tests.sh", f"{TESTS_DEST}/run-tests.sh")
        for item in sorted((self.task.path / "tests").iterdir()):  # flattened into /tests, as upstream does
            files += task_files(item, f"{TESTS_DEST}/{item.name}")
        return VerifierJob(
            command=f"bash {shlex.quote(TESTS_DEST + '/run-tests.sh')}",
            cwd=self.working_directory(sandbox),
            timeout=self.timeout or self.task.test_timeout_sec,
            user="root",
            env={"TEST_DIR": TESTS_DEST},
            private=[TESTS_DEST],
            files=files,
        )

    def judge(self, run: VerifierRun, sessions: list[pytest_record.Session]) -> Judged:
        found = counts(run, sessions)
        verdict = pytest_record.verdict(sessions)
        if verdict is not None:
            found.passed = verdict.passed
            if not verdict.finished:
                found.note = "[oc-repl] a pytest session started and never finished: no verdict of its tests counts"
        else:
            found.passed = bool(found.tests_total) and found.tests_passed == found.tests_total
            found.note = NO_RECORD if found.tests_total is not None else ""
        if found.tests_total is None:
            found.tests_passed = found.tests_total = 0
        return found
