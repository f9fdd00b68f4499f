"""Harbor (terminal-bench 2.0) task directories: task.toml, instruction.md, environment/, tests/test.sh.

After the agent, tests/ is copied to /tests and `/tests/test.sh` runs as the verifier's user in the image's WORKDIR
within the verifier timeout; its verdict is the reward it writes to /logs/verifier/reward.txt (a number) or
reward.json (`{"reward": number}`): 1 is resolved. solution/ never reaches the agent's sandbox. Defaults for keys a
task.toml leaves out are Harbor's: 600 s for the agent, the verifier and the build, and a public network.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oc_repl import tomlfile
from oc_repl.errors import UsageError
from oc_repl.tasks import pytest_record
from oc_repl.tasks.model import Network, TaskDir, seconds
from oc_repl.tasks.verify import Judged, Verifier, counts
from oc_repl.types import Sandbox, VerifierJob, VerifierRun

TESTS_DEST = "/tests"
VERIFIER_DIR = "/logs/verifier"
DEFAULT_TIMEOUT = 600.0
COMPOSE_FILES = ("docker-compose.yaml", "docker-compose.yml", "compose.yaml", "compose.yml")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.I)
_MB = {"": 1 / (1 << 20), "k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}


def _table(data: dict[str, Any], key: str, spec: Path) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise UsageError(f"{spec}: [{key}] must be a table")
    return value


def _memory_mb(env: dict[str, Any], spec: Path) -> int | None:
    """`memory_mb = 2048`, or the older `memory = "2G"`."""
    if "memory_mb" in env:
        value = env["memory_mb"]
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise UsageError(f"{spec}: memory_mb must be a positive number, not {value!r}")
        return int(value)
    if "memory" in env:
        match = _SIZE.match(str(env["memory"]))
        if not match:
            raise UsageError(f'{spec}: memory must be a size such as "2G", not {env["memory"]!r}')
        return max(1, int(float(match.group(1)) * _MB[match.group(2).lower()]))
    return None


def _network(env: dict[str, Any], agent: dict[str, Any], spec: Path) -> Network:
    """The agent's network as Harbor reads it: `[agent] network_mode`, else `[environment] network_mode`, else the
    older `allow_internet`, else public. An allowlist cannot be kept by a plain container, so it is refused."""
    mode = agent.get("network_mode") or env.get("network_mode")
    if mode is None and env.get("allow_internet") is not None:
        mode = "public" if env["allow_internet"] else "no-network"
    mode = mode or "public"
    if mode == "allowlist":
        raise UsageError(
            f'{spec}: network_mode = "allowlist" is not supported: a task container has a network or none',
            hint="run it with Harbor itself (see 'Running at scale with Harbor'), or pass --docker-network NAME",
        )
    if mode not in ("public", "no-network"):
        raise UsageError(f"{spec}: network_mode must be public, no-network or allowlist, not {mode!r}")
    return "none" if mode == "no-network" else "public"


def load_harbor_dir(path: Path) -> TaskDir:
    path = path.resolve()
    spec = path / "task.toml"
    data = tomlfile.read(spec)
    instruction_file = path / "instruction.md"
    try:
        instruction = instruction_file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"task {path.name} has no readable instruction.md: {exc}") from exc
    if not instruction.strip():
        raise UsageError(f"{instruction_file} is empty")
    if not (path / "tests" / "test.sh").is_file():
        raise UsageError(f"task {path.name} has no tests/test.sh")
    agent, verifier = _table(data, "agent", spec), _table(data, "verifier", spec)
    env = _table(data, "environment", spec)
    context = path / "environment"
    compose = [name for name in COMPOSE_FILES if (context / name).is_file()]
    if compose:
        raise UsageError(
            f"task {path.name} defines its environment with environment/{compose[0]}: "
            "multi-container (compose) tasks are not supported yet",
            hint="only tasks whose environment is one environment/Dockerfile run here",
        )
    dockerfile = context / "Dockerfile"
    image = env.get("docker_image")
    if not dockerfile.is_file() and not image:
        raise UsageError(f"task {path.name} has no environment/Dockerfile and names no docker_image")
    cpus = env.get("cpus")
    if cpus is not None and (isinstance(cpus, bool) or not isinstance(cpus, int | float) or cpus <= 0):
        raise UsageError(f"{spec}: cpus must be a positive number, not {cpus!r}")
    user = verifier.get("user") or "root"
    return TaskDir(
        path=path,
        name=path.name,
        instruction=instruction,
        format="harbor",
        agent_timeout_sec=seconds(agent.get("timeout_sec"), str(spec), "agent.timeout_sec", DEFAULT_TIMEOUT),
        test_timeout_sec=seconds(verifier.get("timeout_sec"), str(spec), "verifier.timeout_sec", DEFAULT_TIMEOUT),
        context=context,
        dockerfile=dockerfile if dockerfile.is_file() else None,
        image=str(image) if image else None,
        build_timeout_sec=seconds(env.get("build_timeout_sec"), str(spec), "build_timeout_sec", DEFAULT_TIMEOUT),
        cpus=float(cpus) if cpus is not None else None,
        memory_mb=_memory_mb(env, spec),
        verifier_user=str(user),
        network=_network(env, agent, spec),
    )


def parse_reward(text: str, json_file: bool) -> float | None:
    """The reward test.sh wrote: a number in reward.txt, or reward.json's `reward` (or its only number)."""
    try:
        if not json_file:
            return float(text.strip())
        data = json.loads(text)
    except ValueError:
        return None
    if isinstance(data, dict):
        numbers = [v for v in data.values() if isinstance(v, int | float) and not isinstance(v, bool)]
        value = data.get("reward", numbers[0] if len(numbers) == 1 else None)
    else:
        value = data
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


@dataclass
class HarborVerifier(Verifier):
    """tests/ in a fresh /tests, and a fresh /logs/verifier, both the verifier's own, after the agent; test.sh run by
    its own shebang in the image's WORKDIR as the verifier's user, beside what the agent left running, as Harbor runs
    it; the reward it wrote is the verdict: resolved = a reward of 1."""

    task: TaskDir

    def working_directory(self, sandbox: Sandbox) -> str:
        return sandbox.image_workdir or sandbox.workdir

    def describe(self) -> str:
        return f"{TESTS_DEST}/test.sh ({self.task.name})"

    def job(self, sandbox: Sandbox, tools: str) -> VerifierJob:
        # readable by the verifier's user whoever it is, test.sh executable (Harbor: chmod +x, as root)
        files = [(p, data, mode | 0o444 | (0o111 if mode & 0o111 else 0)) for p, data, mode in self._tests()]
        files = [(p, data, mode | (0o111 if p == f"{TESTS_DEST}/test.sh" else 0)) for p, data, mode in files]
        return VerifierJob(
            command=shlex.quote(f"{TESTS_DEST}/test.sh"),
            cwd=self.working_directory(sandbox),
            timeout=self.task.test_timeout_sec,
            user=self.task.verifier_user,
            private=[TESTS_DEST, VERIFIER_DIR],
            files=files,
            collect=[f"{VERIFIER_DIR}/reward.json", f"{VERIFIER_DIR}/reward.txt"],
        )

    def _tests(self) -> list[tuple[str, bytes, int]]:
        from oc_repl.tasks.terminal_bench import task_files

        return task_files(self.task.path / "tests", TESTS_DEST)

    def judge(self, run: VerifierRun, sessions: list[pytest_record.Session]) -> Judged:
        found = counts(run, sessions)
        reward = None if run.timed_out else self._reward(run)
        found.passed, found.reward = reward is not None and reward >= 1, reward
        if reward is None and not run.timed_out:
            found.note = f"[oc-repl] test.sh wrote no readable reward to {VERIFIER_DIR}/reward.txt or reward.json"
        return found

    @staticmethod
    def _reward(run: VerifierRun) -> float | None:
        """reward.json wins where both exist, as in Harbor."""
        for name, is_json in (("reward.json", True), ("reward.txt", False)):
            data = run.collected.get(f"{VERIFIER_DIR}/{name}")
            if data is not None and data.strip():
                return parse_reward(data.decode("utf-8", "replace"), is_json)
        return None
