"""Harbor's job directories read by `bench report | compare | tasks | export` as bench directories: real `harbor run`
jobs (Harbor's oracle, oc-repl's agent against a loopback model, tasks whose environment or verifier fails) on
Harbor's local docker environment, checked against the result.json files Harbor wrote.

Needs Harbor beside this interpreter (skipped without it) and the docker daemon and test image.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("harbor")

from oc_repl.bench import harbor_jobs  # noqa: E402
from oc_repl.bench.results import trial_dir, write_result  # noqa: E402
from tests.docker_support import docker_session  # noqa: E402
from tests.fakeserver import FakeServer, call_text  # noqa: E402
from tests.harbor_support import AGENT, ENVIRONMENT, ROOT, TASK, harbor_env, harbor_run, trial_results  # noqa: E402

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]
MODEL = "openai/qwen3-8b-oc"


def writes(word: str) -> list[dict[str, Any]]:
    command = f"echo {word} > /srv/out.txt"
    call = call_text("shell_exec", {"id": "s1", "command": command, "block": True, "timeout": None})
    return [{"text": call}, {"text": "<think>\n\n</think>\n\nDone."}]


def tasks_folder(root: Path) -> Path:
    """Two tasks in one folder (Harbor runs a folder of tasks as a dataset): write-hi and a twin of it."""
    folder = root / "tasks"
    shutil.copytree(TASK, folder / "write-hi")
    shutil.copytree(TASK, folder / "write-hi-twin")
    return folder


def broken_tasks(root: Path) -> Path:
    """A task whose image does not exist (its environment cannot start) and one whose tests outlast the verifier."""
    folder = root / "broken"
    shutil.copytree(TASK, folder / "no-image")
    toml = folder / "no-image" / "task.toml"
    toml.write_text(toml.read_text().replace("oc-repl-test:bookworm", "oc-repl-test:no-such-image"))
    shutil.copytree(TASK, folder / "slow-tests")
    toml = folder / "slow-tests" / "task.toml"
    toml.write_text(toml.read_text().replace("[verifier]\ntimeout_sec = 120.0", "[verifier]\ntimeout_sec = 3.0"))
    slow = "#!/bin/bash\nsleep 60\necho 1 > /logs/verifier/reward.txt\n"
    (folder / "slow-tests" / "tests" / "test.sh").write_text(slow)
    return folder


@pytest.fixture(scope="module", autouse=True)
def docker_up():
    yield from docker_session()


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """The jobs every test reads: Harbor's oracle and oc-repl's agent on the same two tasks (k = 2), and a job of
    broken tasks."""
    root = tmp_path_factory.mktemp("harbor-jobs")
    tasks, out = tasks_folder(root), root / "jobs"
    done, oracle = harbor_run(out, "oracle", "-p", str(tasks), "--agent", "oracle", "-k", "2", "-n", "2")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # one trial at a time, so the model's replies alternate: a right answer, then a wrong one
    with FakeServer({"cycle": True, "replies": writes("hi") + writes("no")}) as server:
        args = ["-p", str(tasks), "--agent", AGENT, "-m", MODEL, "--ak", f"api_base={server.url}", "-k", "2"]
        done, ours = harbor_run(out, "ocrepl", *args, "-n", "1")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    done, broken = harbor_run(out, "broken", "-p", str(broken_tasks(root)), "--agent", "oracle", "-n", "2")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return {"oracle": oracle, "ocrepl": ours, "broken": broken, "root": root}


def oc_repl(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "oc_repl", *args], capture_output=True, text=True, timeout=300, cwd=cwd
    )


def report(job: Path) -> dict[str, Any]:
    done = oc_repl("bench", "report", "--json", str(job), cwd=job.parent)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def rewards(job: Path) -> dict[str, list[float]]:
    """Harbor's own rewards, by task."""
    found: dict[str, list[float]] = {}
    for trial in trial_results(job):
        found.setdefault(trial["task_name"], []).append(trial["verifier_result"]["rewards"]["reward"])
    return found


def test_a_job_reads_as_a_bench_with_harbors_own_rewards(jobs):
    job = jobs["ocrepl"]
    by_task = rewards(job)
    assert sorted(by_task) == ["write-hi", "write-hi-twin"] and sum(map(len, by_task.values())) == 4
    (arm,) = report(job)["arms"]
    assert arm["label"] == "oc-repl:camel-terminal-toolkit@" + MODEL
    assert arm["resolved"] == sum(r == 1.0 for rs in by_task.values() for r in rs)
    assert 0 < arm["resolved"] < 4  # the alternating model solved some, not all
    # each trial is oc-repl's record too: its transcript read, its turns and tokens counted
    results, plan = harbor_jobs.load(job)
    assert plan["k"] == 2 and [t["name"] for t in plan["tasks"]] == ["write-hi", "write-hi-twin"]
    harbors = {Path(t["dir"]).name: t for t in trial_results(job)}
    for r in results:
        context = harbors[r.directory]["agent_result"]
        assert (r.turns, r.tokens_in) == (context["metadata"]["n_turns"], context["n_input_tokens"]) and r.turns > 0
        assert r.reward == harbors[r.directory]["verifier_result"]["rewards"]["reward"]
        assert r.transcript and r.signatures is not None


def test_a_jobs_scores_equal_those_of_the_same_trials_in_a_local_bench(jobs, tmp_path):
    job = jobs["ocrepl"]
    results, plan = harbor_jobs.load(job)
    local = tmp_path / "local"
    for result in results:  # the same records where a local bench keeps them
        folder = trial_dir(local, result.task, "ocrepl", result.attempt)  # a model's "/" is no folder name here
        folder.mkdir(parents=True)
        write_result(folder, replace(result, arm="ocrepl", directory="", transcript=""))
    (local / "bench.json").write_text(json.dumps({"tasks": plan["tasks"], "protocols": ["ocrepl"], "k": plan["k"]}))
    (harbor,), (ours,) = report(job)["arms"], report(local)["arms"]
    for key in ("pass1", "pass1_planned", "partial", "partial_planned", "pass_at", "pass_at_planned", "resolved"):
        assert harbor[key] == ours[key], key


def test_harbors_oracle_and_oc_repls_agent_compare_with_a_verdict_and_the_tasks_lost(jobs):
    done = oc_repl("bench", "compare", "--json", str(jobs["oracle"]), str(jobs["ocrepl"]), cwd=jobs["root"])
    assert done.returncode == 0, done.stderr
    (comparison,) = json.loads(done.stdout)["comparisons"]
    assert (comparison["baseline"], comparison["other"]) == ("oracle", "ocrepl")
    assert comparison["verdict"] and comparison["tasks"] == 2
    never = sorted(t for t, rs in rewards(jobs["ocrepl"]).items() if 1.0 not in rs)
    assert comparison["lost"] == never  # the oracle solved every task
    assert comparison["baseline_resolved"] == 4
    done = oc_repl("bench", "tasks", "--json", str(jobs["oracle"]), str(jobs["ocrepl"]), cwd=jobs["root"])
    assert done.returncode == 0, done.stderr
    assert {t["task"] for t in json.loads(done.stdout)["tasks"]} == {"write-hi", "write-hi-twin"}


def test_infrastructure_failures_land_on_the_infrastructure_side_with_their_cause(jobs):
    (arm,) = report(jobs["broken"])["arms"]
    assert arm["infrastructure"] == 2 and arm["resolved"] == 0
    assert arm["infra_modes"] == {"sandbox_error": 1, "verifier_error": 1}
    assert "before the agent ran" in arm["infra_errors"]["sandbox_error"]
    assert "VerifierTimeoutError" in arm["infra_errors"]["verifier_error"]


def test_a_trial_harbor_has_not_finished_is_missing_from_the_planned_denominator(jobs, tmp_path):
    job = tmp_path / "ocrepl"
    shutil.copytree(jobs["ocrepl"], job)
    running = sorted(p for p in job.iterdir() if (p / "result.json").is_file())[0]
    (running / "result.json").unlink()  # as Harbor leaves a trial while it runs: its folder and config, no result
    (arm,) = report(job)["arms"]
    assert arm["trials"] == 3 and arm["planned"] == 4


def test_export_reads_the_transcripts_oc_repls_agent_left_in_a_job(jobs, tmp_path):
    out = tmp_path / "episodes.jsonl"
    done = oc_repl("export", str(jobs["ocrepl"]), "-o", str(out), cwd=jobs["root"])
    assert done.returncode == 0, done.stderr
    episodes = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(episodes) == 4 and all(e["metadata"]["bench"]["task"].startswith("write-hi") for e in episodes)


def test_watch_follows_a_job_while_harbor_runs_it(tmp_path):
    slow = [{**reply, "delay": 4} for reply in writes("hi")]  # each reply takes 4 s: the trial runs a while
    with FakeServer({"cycle": True, "replies": slow}) as server:
        args = ["-p", str(TASK), "--agent", AGENT, "-m", MODEL, "--ak", f"api_base={server.url}", "-k", "2", "-n", "1"]
        command = [str(Path(sys.executable).parent / "harbor"), "run", "-e", ENVIRONMENT, "-o", str(tmp_path)]
        job = tmp_path / "watched"
        harbor = subprocess.Popen(
            [*command, "--job-name", "watched", "-y", *args],
            env=harbor_env(),
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 300
            while not any((t / harbor_jobs.TRANSCRIPT).is_file() for t in harbor_jobs.running(job) if job.is_dir()):
                assert time.monotonic() < deadline and harbor.poll() is None, "no trial started"
                time.sleep(0.2)
            seen = oc_repl("bench", "watch", "--once", str(job), cwd=tmp_path)
            assert seen.returncode == 0, seen.stderr
            assert "trials 0/2" in seen.stderr and "running 1" in seen.stderr and "write-hi__" in seen.stderr
            followed = oc_repl("bench", "watch", "--interval", "0.5", str(job), cwd=tmp_path)  # until Harbor is done
            assert followed.returncode == 0, followed.stderr
            assert harbor.wait(120) == 0
        finally:
            harbor.kill()
    # each trial said once as it finished, with Harbor's own verdict
    said = [line for line in followed.stderr.splitlines() if line.startswith("[")]
    assert [line.split("]")[0] for line in said] == ["[1/2", "[2/2"]
    solved = sum(r == 1.0 for r in rewards(job)["write-hi"])
    assert sum(": resolved (" in line for line in said) == solved


def two_arms(delay: float = 0) -> dict[str, Any]:
    """camel writes the right word, terminus-json the wrong one: routed by whether a request carries tools."""
    keys = {"keystrokes": "echo no > /srv/out.txt\n", "duration": 0.5}
    terminus = {"analysis": "a", "plan": "p", "commands": [keys], "task_complete": True}
    return {
        "routes": [
            {"tools": True, "replies": [{**r, "delay": delay} for r in writes("hi")]},
            {"tools": False, "replies": [{"text": json.dumps(terminus), "delay": delay}] * 3},
        ],
        "replies": [{"text": "unrouted"}],
    }


def bench_on_harbor(out: Path, server: FakeServer, *more: str) -> subprocess.Popen:
    argv = [sys.executable, "-m", "oc_repl", "bench", "--harbor", ENVIRONMENT, "--api-base", server.url, "--out"]
    return subprocess.Popen(
        [*argv, str(out), *more],
        env=harbor_env(),
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_bench_on_harbors_engine_makes_a_job_every_bench_command_reads(tmp_path):
    arms = ["--protocol", "camel-terminal-toolkit,terminus-json", "-k", "2", "-j", "2"]
    with FakeServer(two_arms()) as server:
        bench = bench_on_harbor(tmp_path / "job", server, str(TASK), *arms)
        out, err = bench.communicate(timeout=600)
    assert bench.returncode == 0, err[-3000:]
    job = tmp_path / "job"
    assert harbor_jobs.is_job(job) and len(trial_results(job)) == 4
    said = [line for line in err.splitlines() if line.startswith("[")]  # the bench's progress, a line a trial
    assert sorted(line.split("]")[0] for line in said) == ["[1/4", "[2/4", "[3/4", "[4/4"]
    by_arm: dict[str, list[float]] = {}
    for trial in trial_results(job):  # Harbor's own verdicts, by the protocol its agent ran
        protocol = trial["agent_result"]["metadata"]["protocol"]
        by_arm.setdefault(protocol, []).append(trial["verifier_result"]["rewards"]["reward"])
    assert by_arm == {"camel-terminal-toolkit": [1.0, 1.0], "terminus-json": [0.0, 0.0]}
    found = {a["label"]: a["resolved"] for a in report(job)["arms"]}
    assert found == {"oc-repl:camel-terminal-toolkit": 2, "oc-repl:terminus-json": 0}
    assert "lost (resolved only by oc-repl:camel-terminal-toolkit): write-hi" in out  # the bench's own report


def test_a_bench_on_harbor_interrupted_and_run_again_resumes_the_job_without_counting_a_trial_twice(tmp_path):
    job = tmp_path / "job"
    with FakeServer(two_arms(delay=2)) as server:
        bench = bench_on_harbor(job, server, str(TASK), "-k", "4", "-j", "1")
        try:
            deadline = time.monotonic() + 300
            while not list(job.glob("*/result.json")):
                assert time.monotonic() < deadline and bench.poll() is None, "no trial finished"
                time.sleep(0.2)
            bench.send_signal(signal.SIGINT)
            _, err = bench.communicate(timeout=120)
        finally:
            bench.kill()
        assert bench.returncode == 130, err[-3000:]
        assert "re-run with --harbor" in err and len(list(job.glob("*/result.json"))) < 4
        again = bench_on_harbor(job, server)  # the same --out: Harbor's own resume
        _, err = again.communicate(timeout=600)
    assert again.returncode == 0, err[-3000:]
    assert "resuming Harbor's job" in err
    trials = trial_results(job)
    assert len(trials) == 4 and all(t["verifier_result"]["rewards"]["reward"] == 1.0 for t in trials)
    (arm,) = report(job)["arms"]
    assert (arm["trials"], arm["planned"], arm["resolved"]) == (4, 4, 4)
