"""Test support for Harbor: its local docker environment here, a `harbor run` helper, and what a job leaves behind.

Harbor's local docker environment runs here on a daemon with no network bridge and no Compose v2 plugin, through the
environment oc-repl ships for such machines: `harbor run ... -e oc_repl.harbor:OfflineComposeV1Environment`
(oc_repl/integrations/harbor/compose_v1.py).
"""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

# Before Harbor loads: no telemetry, and litellm's bundled cost map (a remote fetch would be retried offline).
os.environ.update(HARBOR_TELEMETRY="0", LITELLM_LOCAL_MODEL_COST_MAP="True")

from oc_repl.integrations.harbor.compose_v1 import OfflineComposeV1Environment

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "harbor"
TASK = FIXTURES / "write-hi"
ENVIRONMENT = "oc_repl.harbor:OfflineComposeV1Environment"
AGENT = "oc_repl.harbor:OcRepl"


async def started(task_dir: Path, trial_dir: Path, name: str) -> OfflineComposeV1Environment:
    """The environment of a Harbor task, started as a trial starts it, for tests that drive it without a trial."""
    from harbor.models.task.task import Task
    from harbor.models.trial.paths import TrialPaths

    task = Task(task_dir)
    paths = TrialPaths(trial_dir)
    paths.mkdir()
    environment = OfflineComposeV1Environment(
        environment_dir=task.paths.environment_dir,
        environment_name=task.short_name,
        session_id=f"{name}__env",
        trial_paths=paths,
        task_env_config=task.config.environment,
    )
    await environment.start(force_build=False)
    return environment


def harbor_env() -> dict[str, str]:
    """What `harbor run` runs with: no telemetry, no remote cost map, a 1 s stop timeout, this checkout importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "OC_REPL_"))}
    env.update(
        HARBOR_TELEMETRY="0",
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        COMPOSE_V1_STOP_TIMEOUT="1",
        PYTHONPATH=str(ROOT),
        NO_COLOR="1",
    )
    return env


def harbor_run(
    jobs: Path,
    name: str,
    *args: str,
    timeout: float = 900,
    env: dict[str, str] | None = None,
    environment: str = ENVIRONMENT,
) -> tuple[subprocess.CompletedProcess, Path]:
    """`harbor run` (the one beside this interpreter) on the local docker environment (or `environment`, an import
    path of one made from it), with `env` added to harbor_env(); its job directory."""
    command = [str(Path(sys.executable).parent / "harbor"), "run", "-e", environment, "-o", str(jobs)]
    command += ["--job-name", name, "-y", *args]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**harbor_env(), **(env or {})},
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )
    return done, jobs / name


def trial_results(job: Path) -> list[dict[str, Any]]:
    """Each trial's result.json, with its directory under the key `dir`."""
    found = []
    for path in sorted(job.glob("*/result.json")):
        found.append({**json.loads(path.read_text()), "dir": str(path.parent)})
    return found
