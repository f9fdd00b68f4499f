"""terminal-bench 1.x task directories: instruction and limits from task.yaml, tests run after the agent."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from oc_repl.errors import UsageError
from oc_repl.events import VerifyCompleted
from oc_repl.tasks.image import build_image
from oc_repl.tasks.model import TaskDir, seconds
from oc_repl.tasks.verify import TAIL_BYTES, parse_pytest_summary
from oc_repl.types import Sandbox

__all__ = ["TESTS_DEST", "TaskDir", "TaskVerifier", "build_image", "load_task_dir"]

TESTS_DEST = "/tests"
_ARG_USE = re.compile(r"\$\{(\w+)\}|\$(\w+)")


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
    )


@dataclass
class TaskVerifier:
    """Copies run-tests.sh and tests/ to /tests after the agent and runs them; resolved = every test passed."""

    task: TaskDir
    cwd: str | None = None  # the image's WORKDIR
    timeout: float | None = None

    def describe(self) -> str:
        return f"bash {TESTS_DEST}/run-tests.sh ({self.task.name})"

    def run(self, sandbox: Sandbox) -> VerifyCompleted:
        sandbox.exec(f"mkdir -p {TESTS_DEST}", timeout=30, user="root")
        sandbox.put(self.task.path / "run-tests.sh", f"{TESTS_DEST}/run-tests.sh")
        for item in sorted((self.task.path / "tests").iterdir()):  # flattened into /tests, as upstream does
            sandbox.put(item, f"{TESTS_DEST}/{item.name}")
        command = f"TEST_DIR={TESTS_DEST} bash {shlex.quote(TESTS_DEST + '/run-tests.sh')}"
        timeout = self.timeout or self.task.test_timeout_sec
        result = sandbox.exec(command, timeout=timeout, cwd=self.cwd, user="root")
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
<<<<<<< HEAD
=======


def _base_images(dockerfile: Path) -> list[str]:
    bases, stages, defaults, seen_from = [], set(), {}, False
    for line in dockerfile.read_text(encoding="utf-8").splitlines():
        words = line.split()
        if len(words) >= 2 and words[0].upper() == "ARG" and not seen_from:  # an ARG that FROM lines can use
            name, _, value = words[1].partition("=")
            defaults[name] = value.strip("\"'")
        if len(words) >= 2 and words[0].upper() == "FROM":
            seen_from = True
            args = [w for w in words[1:] if not w.startswith("--")]
            # The build passes no build arguments, so `FROM ${BASE}` names ARG BASE's default; an ARG without one (or
            # `${BASE:-x}`) leaves a `$`, and the build itself checks that image.
            image = _ARG_USE.sub(lambda m: defaults.get(m[1] or m[2]) or m[0], args[0]) if args else ""
            if image and image not in stages and image.lower() != "scratch" and "$" not in image:
                bases.append(image)
            if len(args) >= 3 and args[1].upper() == "AS":
                stages.add(args[2])
    return bases


def build_image(task: TaskDir, pull: bool = False) -> str:
    """Build the task's Dockerfile with the Engine API; a base image that is not here is an error, not a hang."""
    import docker

    from oc_repl.errors import SandboxError
    from oc_repl.sandbox.docker import connect

    if not task.dockerfile.is_file():
        raise UsageError(f"task {task.name} has no Dockerfile", hint="pass --image to use an existing image")
    client = connect()
    if not pull:
        for base in _base_images(task.dockerfile):
            try:
                client.images.get(base)
            except docker.errors.ImageNotFound as exc:
                raise SandboxError(
                    f"task {task.name} builds FROM {base}, which is not available locally",
                    hint=f"make {base} available to this daemon first (docker build -t {base} ..., or docker load), "
                    "then run again: the task's Dockerfile builds on it",
                ) from exc
            except docker.errors.APIError as exc:  # e.g. a name the daemon cannot parse
                raise SandboxError(f"task {task.name} builds FROM {base}: {exc.explanation or exc}") from exc
    tag = f"oc-repl-task-{task.name.lower()}:latest"
    try:
        client.images.build(path=str(task.path), tag=tag, rm=True, pull=pull)
    except docker.errors.BuildError as exc:
        tail = "".join(str(chunk.get("stream") or chunk.get("error") or "") for chunk in list(exc.build_log)[-15:])
        raise SandboxError(f"building the image of task {task.name} failed: {exc.msg}", hint=tail.strip()) from exc
    except docker.errors.APIError as exc:
        raise SandboxError(f"building the image of task {task.name} failed: {exc.explanation or exc}") from exc
    return tag
>>>>>>> firsthour
