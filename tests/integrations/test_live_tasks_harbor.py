"""Harbor 0.25 on the live tasks (tests/fixtures/live_tasks/harbor): tasks whose tests look at what the agent left
running. Its oracle gets reward 1 on every one and its nop agent 0: the tasks are honest, and Harbor runs its
verifier beside everything the agent left running (it stops nothing in between). The terminal-bench side of this is
tests/tasks/test_live_tasks_reference.py.

Runs in Harbor's virtualenv (skipped without Harbor), on its docker environment over compose v1
(tests/harbor_support.py), with the docker daemon and the test image.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("harbor")

from tests.docker_support import docker_session  # noqa: E402
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


@pytest.mark.parametrize(("agent", "reward"), [("oracle", 1.0), ("nop", 0.0)], ids=["oracle", "nop"])
def test_harbor_rewards_a_live_task_only_beside_the_processes_the_agent_left(tmp_path, agent, reward):
    verdicts = harbor_verdicts(LIVE_TASKS / "harbor", agent, concurrency=4, out=tmp_path)
    assert verdicts == dict.fromkeys(NAMES, reward), pytest_outputs(tmp_path)
