"""`bench --seed N`: each trial asks the server for samples of its own seed, made from the bench's, its task, arm and
attempt, so a rerun of the bench asks for the very same samples."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from oc_repl.bench.runner import Trial
from oc_repl.tasks.model import load_task
from tests.bench_scripts import TASKS
from tests.conftest import run_cli
from tests.docker_support import answer, docker_session


def test_a_trials_seed_is_its_own_and_the_same_every_time():
    greeting, words = load_task(TASKS / "write-greeting"), load_task(TASKS / "count-words")
    trials = [Trial(task, arm, attempt) for task in (greeting, words) for arm in ("a", "b") for attempt in (1, 2)]
    seeds = [trial.seed(7) for trial in trials]
    assert len(set(seeds)) == len(trials) and all(0 <= seed < 2**31 for seed in seeds)
    assert seeds == [trial.seed(7) for trial in trials] and seeds != [trial.seed(8) for trial in trials]


@pytest.fixture
def docker_client() -> Iterator[Any]:
    yield from docker_session()


@pytest.mark.docker
def test_two_runs_of_a_seeded_bench_ask_the_same_seeds(serve, tmp_path, docker_client):
    asked = []
    for run in (1, 2):
        server = serve({"replies": [answer("I will not.")], "cycle": True})
        args = ["bench", str(TASKS / "write-greeting"), "-k", "2", "--seed", "7", "--api-base", server.url]
        proc = run_cli([*args, "--out", str(tmp_path / f"out{run}")], tmp_path, timeout=600, process=True)
        assert proc.returncode == 0, proc.stderr
        trials = [r["body"] for r in server.chat_requests() if r["body"].get("tools")]  # not the server check's
        asked.append(sorted(body["seed"] for body in trials))
    assert len(set(asked[0])) == 2 and asked[0] == asked[1]
