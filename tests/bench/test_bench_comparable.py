"""Comparisons that check what they compare: a bench records each task's content, a comparison names the settings its
arms did not share and refuses runs of a task whose content changed between them unless told."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from oc_repl.bench.benchplan import write_plan
from oc_repl.bench.results import TrialResult, trial_dir, write_result
from oc_repl.tasks.model import load_task
from tests.conftest import ROOT, run_cli

TASK = ROOT / "examples" / "tasks" / "write-greeting"


def run_of(out: Path, task: Path, options: dict, solved: int) -> None:
    """A finished bench of one task (four trials, `solved` of them resolved), planned as `bench` plans it."""
    write_plan(out, [load_task(task)], 4, {"camel-terminal-toolkit": options})
    for attempt in range(1, 5):
        ok = attempt <= solved
        mode = "resolved" if ok else "unresolved"
        result = TrialResult(
            task.name, "camel-terminal-toolkit", attempt, "verified" if ok else "verify_failed", mode, ok, 0
        )
        directory = trial_dir(out, task.name, "camel-terminal-toolkit", attempt)
        directory.mkdir(parents=True, exist_ok=True)
        write_result(directory, result)


def test_a_bench_records_what_a_trial_of_each_task_meets_and_not_its_solution(tmp_path):
    task = tmp_path / "write-greeting"
    shutil.copytree(TASK, task)
    before = load_task(task).content_hash()
    write_plan(tmp_path / "b", [load_task(task)], 1, {"camel-terminal-toolkit": {}})
    (planned,) = json.loads((tmp_path / "b" / "bench.json").read_text())["tasks"]
    assert planned["sha256"] == before
    (task / "solution.sh").write_text("#!/bin/sh\necho another way\n")
    assert load_task(task).content_hash() == before  # no trial sees the solution
    tests = next(p for p in (task / "tests").iterdir() if p.suffix == ".py")
    tests.write_text(tests.read_text() + "\n# edited\n")
    assert load_task(task).content_hash() != before


def test_compare_names_the_settings_the_runs_did_not_share(tmp_path):
    run_of(tmp_path / "A", TASK, {"max_turns": 2, "max_tokens": 200}, 1)
    run_of(tmp_path / "B", TASK, {"max_turns": 12}, 3)
    proc = run_cli(["bench", "compare", str(tmp_path / "A"), str(tmp_path / "B")], tmp_path)
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert "run with different settings (A vs B): --max-turns: 2 vs 12; --max-tokens: 200 vs None" in text
    data = json.loads(
        run_cli(["bench", "compare", "--json", str(tmp_path / "A"), str(tmp_path / "B")], tmp_path).stdout
    )
    assert data["comparisons"][0]["settings_differ"] == ["--max-turns: 2 vs 12", "--max-tokens: 200 vs None"]


def test_compare_refuses_runs_of_a_task_edited_between_them_unless_told(tmp_path):
    task = tmp_path / "tasks" / "write-greeting"
    shutil.copytree(TASK, task)
    run_of(tmp_path / "A", task, {}, 1)
    (task / "task.yaml").write_text((task / "task.yaml").read_text() + "\n# the instruction's file, edited\n")
    run_of(tmp_path / "B", task, {}, 4)
    runs = [str(tmp_path / "A"), str(tmp_path / "B")]
    refused = run_cli(["bench", "compare", *runs], tmp_path)
    assert refused.returncode == 2 and "different versions of 1 tasks: write-greeting" in " ".join(
        refused.stderr.split()
    )
    assert "--allow-different-tasks" in refused.stderr
    told = run_cli(["bench", "compare", "--allow-different-tasks", *runs], tmp_path)
    assert told.returncode == 0 and "tasks whose content differs between the two: write-greeting" in told.stdout
    same = run_cli(["bench", "compare", str(tmp_path / "A"), str(tmp_path / "A")], tmp_path)
    assert same.returncode == 0 and "differs" not in same.stdout


def test_arms_on_two_servers_are_named_by_the_models_they_serve_when_those_differ(serve):
    from oc_repl.bench.arms import arm_specs
    from oc_repl.bench.probe import served_models

    one, two = serve({"model": "ckpt-iter200", "replies": []}), serve({"model": "ckpt-iter215", "replies": []})
    served = served_models([one.url, two.url], "")
    assert served == {one.url: "ckpt-iter200", two.url: "ckpt-iter215"}
    assert [s.label for s in arm_specs(["camel-terminal-toolkit"], [], [one.url, two.url], served)] == [
        "ckpt-iter200",
        "ckpt-iter215",
    ]
    same = serve({"model": "ckpt-iter200", "replies": []})  # two servers of one model: told apart by address
    labels = [s.label for s in arm_specs(["p"], [], [one.url, same.url], served_models([one.url, same.url], ""))]
    assert labels == [one.url.split("//")[1].removesuffix("/v1"), same.url.split("//")[1].removesuffix("/v1")]
