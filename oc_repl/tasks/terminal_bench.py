"""terminal-bench 1.x task directories: instruction and limits from task.yaml, tests run after the agent."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from oc_repl.errors import UsageError
from oc_repl.events import VerifyCompleted
from oc_repl.tasks.image import build_image
from oc_repl.tasks.model import Network, TaskDir, seconds
from oc_repl.tasks.verify import TAIL_BYTES, Verifier, parse_pytest_summary
from oc_repl.types import Sandbox

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


@dataclass
class TaskVerifier(Verifier):
    """Copies run-tests.sh and tests/ to a fresh /tests after the agent and runs them, in the image's WORKDIR;
    resolved = every test passed."""

    task: TaskDir
    timeout: float | None = None

    def working_directory(self, sandbox: Sandbox) -> str:
        return sandbox.image_workdir or sandbox.workdir

    def describe(self) -> str:
        return f"bash {TESTS_DEST}/run-tests.sh ({self.task.name})"

    def run(self, sandbox: Sandbox) -> VerifyCompleted:
        # Whatever the agent left in /tests (a conftest.py of its own) goes: the tests run as the task ships them.
        sandbox.exec(f"rm -rf {TESTS_DEST} && mkdir -p {TESTS_DEST}", timeout=30, user="root")
        sandbox.put(self.task.path / "run-tests.sh", f"{TESTS_DEST}/run-tests.sh")
        for item in sorted((self.task.path / "tests").iterdir()):  # flattened into /tests, as upstream does
            sandbox.put(item, f"{TESTS_DEST}/{item.name}")
        command = f"TEST_DIR={TESTS_DEST} bash {shlex.quote(TESTS_DEST + '/run-tests.sh')}"
        timeout = self.timeout or self.task.test_timeout_sec
        result = sandbox.exec(command, timeout=timeout, cwd=self.working_directory(sandbox), user="root")
        text = result.output.decode("utf-8", "replace")
        summary = parse_pytest_summary(text)
        resolved = bool(summary and summary.total and summary.passed == summary.total and not result.timed_out)
        return VerifyCompleted(
            command=self.describe(),
            passed=resolved,
            exit_code=result.exit_code,
            tests_passed=summary.passed if summary else 0,
            tests_total=summary.total if summary else 0,
            failed_tests=summary.failed if summary else [],
            output_tail=text[-TAIL_BYTES:],
            timed_out=result.timed_out,
        )
