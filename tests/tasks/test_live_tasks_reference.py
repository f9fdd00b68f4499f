"""The live tasks (tests/fixtures/live_tasks): tasks whose tests look at what the agent left running (a server, a
growing log, a daemon, a process found by name), each in both task formats.

Both formats hold the same task, and oc-repl reads them alike. terminal-bench 0.2.18 itself resolves every one with
its oracle and none with its nop agent, and oc-repl gives the same verdicts (tests/tasks/test_live_tasks.py); Harbor
0.25 rewards them alike (tests/integrations/test_live_tasks_harbor.py, in Harbor's virtualenv).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from oc_repl.tasks.model import load_task
from tests.reference_harnesses import LIVE_TASKS, capture_lost, task_names

NAMES = ["daemon", "growing-log", "http-server", "process-by-name"]
TB_TASKS = LIVE_TASKS / "terminal-bench"
HARBOR_TASKS = LIVE_TASKS / "harbor"
SLOW = os.environ.get("OC_REPL_SLOW_TESTS") == "1"


def test_both_formats_hold_the_same_four_live_tasks():
    assert task_names(TB_TASKS) == task_names(HARBOR_TASKS) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_a_live_task_has_one_instruction_image_test_and_solution_in_both_formats(name):
    tb, harbor = TB_TASKS / name, HARBOR_TASKS / name
    instruction = yaml.safe_load((tb / "task.yaml").read_text())["instruction"]
    assert instruction.strip() == (harbor / "instruction.md").read_text().strip()
    assert (tb / "Dockerfile").read_bytes() == (harbor / "environment" / "Dockerfile").read_bytes()
    assert (tb / "tests" / "test_outputs.py").read_bytes() == (harbor / "tests" / "test_outputs.py").read_bytes()
    assert (tb / "solution.sh").read_bytes() == (harbor / "solution" / "solve.sh").read_bytes()
    scripts = [tb / "solution.sh", tb / "run-tests.sh", harbor / "solution" / "solve.sh", harbor / "tests" / "test.sh"]
    assert all(os.access(script, os.X_OK) for script in scripts)


@pytest.mark.parametrize("name", NAMES)
def test_oc_repl_reads_a_live_task_alike_in_both_formats(name):
    tb, harbor = load_task(TB_TASKS / name), load_task(HARBOR_TASKS / name)
    assert (tb.name, tb.instruction.strip(), tb.network) == (harbor.name, harbor.instruction.strip(), "none")
    assert (tb.agent_timeout_sec, tb.test_timeout_sec) == (harbor.agent_timeout_sec, harbor.test_timeout_sec)
    assert tb.network == "none" and tb.dockerfile is not None and harbor.dockerfile is not None


def test_tb_loses_a_verdict_only_where_the_tests_printed_a_summary_it_did_not_read(tmp_path):
    # what a loaded daemon did to one oracle trial: the tests passed, tb's capture of their pane came back empty
    printed = "=== short test summary info ===\nPASSED ../tests/test_outputs.py::test_a\n=== 1 passed in 1.99s ===\n"
    never = "bash: /tests/run-tests.sh: No such file or directory\n"
    trials = [("lost", "parse_error", printed), ("never-printed", "parse_error", never), ("parsed", "unset", printed)]
    lost = []
    for task, mode, log in trials:
        sessions = tmp_path / task / f"{task}.1-of-1.r" / "sessions"
        sessions.mkdir(parents=True)
        (sessions / "tests.log").write_text(log)
        if capture_lost(tmp_path, {"task_id": task, "trial_name": f"{task}.1-of-1.r", "failure_mode": mode}):
            lost.append(task)
    assert lost == ["lost"]


def summary(runs: Path) -> str:
    """What tb wrote of each trial of each run (for a failing assertion's message)."""
    keys = ("task_id", "trial_name", "is_resolved", "failure_mode", "parser_results")
    found = [trial for path in sorted(runs.glob("*/results.json")) for trial in json.loads(path.read_text())["results"]]
    return json.dumps([{k: t.get(k) for k in keys} for t in found], indent=1) + f"\n(the runs are in {runs})"
