"""Harbor 0.25 on the live tasks (tests/fixtures/live_tasks/harbor): tasks whose tests look at what the agent left
running. Its oracle gets reward 1 on every one and its nop agent 0: the tasks are honest, and Harbor runs its
verifier beside everything the agent left running (it stops nothing in between). oc-repl's agent, a scripted model
running the same solutions (or nothing), gets the same rewards on the same tasks and images, leaving what the model
started running as Harbor's own agents do. The terminal-bench side of this is tests/tasks/test_live_tasks.py.

Runs in Harbor's virtualenv (skipped without Harbor), on its docker environment over compose v1
(tests/harbor_support.py), with the docker daemon and the test image.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("harbor")

from tests.bench_scripts import CAMEL, route, scripted  # noqa: E402
from tests.docker_support import docker_session  # noqa: E402
from tests.harbor_support import AGENT, harbor_run, trial_results  # noqa: E402
from tests.reference_harnesses import LIVE_TASKS, harbor_verdicts  # noqa: E402

NAMES = ["daemon", "growing-log", "http-server", "process-by-name"]
SLOW = os.environ.get("OC_REPL_SLOW_TESTS") == "1"
pytestmark = [
    pytest.mark.reference,
    pytest.mark.docker,
    pytest.mark.skipif(not SLOW, reason="runs a Harbor job of four tasks; set OC_REPL_SLOW_TESTS=1"),
    pytest.mark.timeout(1800),
]


@pytest.fixture(scope="module", autouse=True)
def docker_up():
    yield from docker_session()


def pytest_outputs(job: Path) -> str:
    """The verifier's output of each trial (for a failing assertion's message)."""
    found = [f"--- {path.parent.parent.name}\n{path.read_text()[-1500:]}" for path in job.glob("*/*/verifier/*.txt")]
    return "\n".join(found) + f"\n(the job is in {job})"


def oc_repls_rewards(serve, tasks: Path, plays: str, jobs: Path) -> dict[str, float | None]:
    """The reward of each task for oc-repl's agent, its model running each task's solution ("good") or nothing."""
    server = serve(scripted(*(route(tasks / name, CAMEL, plays) for name in NAMES)))
    args = ["-p", str(tasks), "--agent", AGENT, "-m", "openai/qwen3-8b-oc", "--ak", f"api_base={server.url}", "-n", "2"]
    done, job = harbor_run(jobs, f"oc-repl-{plays}", *args)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    found = {t["task_name"]: t for t in trial_results(job)}
    assert all(t["agent_result"]["metadata"]["tampered"] is False for t in found.values())
    return {n: ((found[n].get("verifier_result") or {}).get("rewards") or {}).get("reward") for n in NAMES}


@pytest.mark.parametrize(
    ("agent", "plays", "reward"), [("oracle", "good", 1.0), ("nop", "bad", 0.0)], ids=["solved", "unsolved"]
)
def test_oc_repls_agent_earns_harbors_own_rewards_on_the_live_tasks(serve, tmp_path, agent, plays, reward):
    tasks = LIVE_TASKS / "harbor"
    verdicts = harbor_verdicts(tasks, agent, concurrency=4, out=tmp_path / "reference")
    assert verdicts == dict.fromkeys(NAMES, reward), pytest_outputs(tmp_path / "reference")
    assert oc_repls_rewards(serve, tasks, plays, tmp_path / "oc-repl") == verdicts
