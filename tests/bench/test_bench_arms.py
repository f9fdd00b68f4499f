"""Benches that measure checkpoints, end to end on a real dockerd against loopback servers: two arms (two scripted
models with known per-task success rates) told apart only with enough trials; partial scores, both denominators
and the infrastructure split under scripted server and sandbox failures, and --retry-infra re-running exactly those;
the server checked before any trial; a server that dies mid-bench; fewer trials at once when the server says 429."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from oc_repl.outcome import infrastructure_mode
from tests.bench.test_bench import conversations, results
from tests.bench_scripts import CAMEL, TASKS, bench_script, episode, route, scripted, solution
from tests.conftest import cli_env, run_cli
from tests.docker_support import docker_session
from tests.fakeserver import FakeServer


@pytest.fixture(scope="module")
def docker_client() -> Iterator[Any]:
    yield from docker_session()


pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("docker_client")]

# Arm a solves two of the five tasks; arm b four at its first trial and all five after (count-words: b, g, g).
ARM_A = {
    (t, CAMEL): "good" if t in ("write-greeting", "fix-permissions") else "bad"
    for t in [p.name for p in TASKS.iterdir()]
}
ARM_B = {**{key: "good" for key in ARM_A}, ("count-words", CAMEL): "bgg"}


def settle(args: list[str], out: Path, tmp_path: Path) -> None:
    """The bench run again (as a user would, at most twice) while a trial failed on infrastructure: a loaded machine
    may fail a sandbox now and then, and what is measured here is the model's side."""
    for _ in range(2):
        if not any(infrastructure_mode(r["failure_mode"]) for r in results(out).values()):
            return
        proc = run_cli(args, tmp_path, timeout=600)
        assert proc.returncode == 0, proc.stderr


def report(out: Path, tmp_path: Path, *more: str) -> dict:
    proc = run_cli(["bench", "report", "--json", str(out), *more], tmp_path)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.timeout(900)
def test_two_arms_are_separable_with_enough_trials_and_the_flipping_tasks_are_named(serve, tmp_path):
    a, b = serve(bench_script(ARM_A)), serve(bench_script(ARM_B))
    out = tmp_path / "out"
    args = ["bench", str(TASKS), "--api-base", f"{a.url},{b.url}", "--retries", "0", "-j", "3", "--out", str(out)]
    proc = run_cli([*args, "-k", "1"], tmp_path, timeout=400)
    assert proc.returncode == 0, proc.stderr
    settle([*args, "-k", "1"], out, tmp_path)
    label_a, label_b = f"127.0.0.1:{a.port}", f"127.0.0.1:{b.port}"
    assert sorted(results(out)) == sorted((t, arm, 1) for t, _ in ARM_A for arm in (label_a, label_b))
    assert {r["model"] for r in results(out).values()} == {"qwen3-8b-oc"}
    assert {r["server"] for r in results(out).values()} == {a.url, b.url}

    small = json.loads(run_cli(["bench", "compare", str(out), "--json"], tmp_path).stdout)
    (c,) = small["comparisons"]
    assert (c["baseline"], c["other"]) == (f"out:{label_a}", f"out:{label_b}")
    ends = {key: (r["failure_mode"], r["error"][:200]) for key, r in results(out).items()}
    assert (c["baseline_resolved"], c["other_resolved"], c["tasks"]) == (2, 4, 5), ends
    assert c["gained"] == ["fix-json-config", "repair-module"] and c["lost"] == []
    assert c["test"].startswith("exact McNemar") and c["p_value"] == pytest.approx(0.5)
    assert not c["separable"] and "not separable at this sample size" in c["verdict"]
    text = " ".join(run_cli(["bench", "compare", str(out)], tmp_path).stdout.split())
    assert "not separable at this sample size: Fisher's test on" in text and "trials per task" in text
    assert "run with different settings" in text and "--api-base" in text  # two servers: the arms' one difference

    proc = run_cli([*args, "-k", "3"], tmp_path, timeout=600)  # the same bench, two more trials per task and arm
    assert proc.returncode == 0, proc.stderr
    assert "10 of 30 trials already finished in this directory: kept" in proc.stderr
    settle([*args, "-k", "3"], out, tmp_path)
    large = json.loads(run_cli(["bench", "compare", str(out), "--json"], tmp_path).stdout)
    (c,) = large["comparisons"]
    assert (c["baseline_resolved"], c["baseline_trials"], c["other_resolved"], c["other_trials"]) == (6, 15, 14, 15)
    assert c["test"].startswith("Fisher") and c["p_value"] < 0.05 and c["separable"]
    assert f"separable at the 5% level; out:{label_b} resolves more" in c["verdict"]
    assert c["gained"] == ["count-words", "fix-json-config", "repair-module"] and c["lost"] == []
    arms = {arm["label"]: arm for arm in large["arms"]}
    assert arms[f"out:{label_b}"]["pass1"]["value"] == pytest.approx(14 / 15)
    assert arms[f"out:{label_a}"]["pass_at"]["3"] == pytest.approx(2 / 5)


def cpu_hungry(tasks: Path) -> Path:
    """A Harbor task asking for more CPUs than any container here may have: its sandbox cannot be made."""
    task = tasks / "count-words"
    shutil.copytree(TASKS / "count-words", task)
    spec = task / "task.toml"
    spec.write_text(spec.read_text().replace("cpus = 1", "cpus = 512"))
    return task


@pytest.mark.timeout(900)
def test_infrastructure_failures_are_apart_from_the_score_and_retried_in_place(serve, tmp_path):
    tasks = tmp_path / "tasks"
    for name in ("write-greeting", "fix-permissions"):
        shutil.copytree(TASKS / name, tasks / name)
    cpu_hungry(tasks)
    greeting = route(tasks / "write-greeting", CAMEL, "bbg")  # by start: half the tests, a 503, then solved
    greeting["variants"][0]["replies"] = episode(CAMEL, "echo 'Hello' > /app/greeting.txt")
    greeting["variants"][1]["replies"] = [{"http_error": 503, "body": {"message": "overloaded, try later"}}]
    greeting["variants"][2]["replies"] = episode(CAMEL, f"echo variant-good\n{solution(tasks / 'write-greeting')}")
    server = serve(scripted(greeting, route(tasks / "fix-permissions", CAMEL, "good")))
    out = tmp_path / "out"
    args = ["bench", str(tasks), "-k", "2", "-j", "1", "--api-base", server.url, "--retries", "0", "--out", str(out)]
    proc = run_cli(args + ["--keep-failures"], tmp_path, timeout=400)
    assert proc.returncode == 0, proc.stderr  # not every trial failed on infrastructure
    found = results(out)
    modes = {key: r["failure_mode"] for key, r in found.items()}
    assert modes == {
        ("write-greeting", CAMEL, 1): "unresolved",
        ("write-greeting", CAMEL, 2): "server_error",
        ("count-words", CAMEL, 1): "sandbox_error",
        ("count-words", CAMEL, 2): "sandbox_error",
        ("fix-permissions", CAMEL, 1): "resolved",
        ("fix-permissions", CAMEL, 2): "resolved",
    }
    half = found[("write-greeting", CAMEL, 1)]
    assert (half["tests_passed"], half["tests_total"]) == (1, 2)
    assert "503" in found[("write-greeting", CAMEL, 2)]["error"]

    (arm,) = report(out, tmp_path)["arms"]
    assert (arm["planned"], arm["trials"], arm["infrastructure"], arm["scored"], arm["resolved"]) == (6, 6, 3, 3, 2)
    assert arm["pass1_planned"]["value"] == pytest.approx(2 / 6) and arm["pass1"]["value"] == pytest.approx(2 / 3)
    assert arm["partial_planned"]["value"] == pytest.approx(2.5 / 6) and arm["partial"]["value"] == pytest.approx(
        2.5 / 3
    )
    assert arm["infra_modes"] == {"server_error": 1, "sandbox_error": 2}
    (counted,) = report(out, tmp_path, "--count-infra")["arms"]
    assert (counted["scored"], counted["pass1"]["value"]) == (6, pytest.approx(2 / 6))
    text = " ".join(proc.stdout.split())
    assert (
        f"{CAMEL}: 3 of 6 trials failed on infrastructure (server_error 1, sandbox_error 2): left out of the score"
        in text
    )
    assert "33.3% [" in text and "66.7% [" in text  # pass@1 of planned trials, then of finished ones

    kept = {key: (out / "trials" / key[0] / key[1] / str(key[2]) / "result.json").read_bytes() for key in found}
    before = conversations(server)
    proc = run_cli([*args[:-2], "--retry-infra", "--out", str(out)], tmp_path, timeout=400)
    assert proc.returncode == 0, proc.stderr
    assert "3 trials that failed on infrastructure (round 1 of 1), at most 1 at once" in proc.stderr
    assert conversations(server) - before == 1  # only the trial the server had failed talked to it again
    after = results(out)
    for key, data in kept.items():
        rerun = key in (("write-greeting", CAMEL, 2), ("count-words", CAMEL, 1), ("count-words", CAMEL, 2))
        path = out / "trials" / key[0] / key[1] / str(key[2]) / "result.json"
        assert (path.read_bytes() == data) != rerun, key
    assert after[("write-greeting", CAMEL, 2)]["failure_mode"] == "resolved"
    assert after[("write-greeting", CAMEL, 2)]["infra_before"][0].startswith("server_error: ")
    assert after[("count-words", CAMEL, 1)]["infra_before"][0].startswith("sandbox_error: ")
    (arm,) = report(out, tmp_path)["arms"]
    assert (arm["scored"], arm["resolved"], arm["infrastructure"]) == (4, 3, 2)
    assert arm["pass1_planned"]["value"] == pytest.approx(3 / 6) and arm["pass1"]["value"] == pytest.approx(3 / 4)
    stderr = " ".join(proc.stderr.split())
    assert "2 trials still fail on infrastructure after 1 rounds: sandbox_error ×2" in stderr
    assert "cannot create a container" in stderr  # and why
    text = " ".join(proc.stdout.split())
    assert "3 trials were run again after an infrastructure failure; 1 of them then finished" in text


def test_a_bench_against_no_server_stops_before_any_trial(tmp_path):
    out = tmp_path / "out"
    args = ["bench", str(TASKS / "write-greeting"), "--api-base", "http://127.0.0.1:9/v1", "--retries", "0"]
    proc = run_cli([*args, "--out", str(out)], tmp_path, timeout=120)
    assert proc.returncode == 5, proc.stderr
    assert "server check failed, before any trial" in " ".join(proc.stderr.split())
    assert not out.exists()  # nothing recorded: no trial ran


@pytest.mark.timeout(600)
def test_trials_a_dying_server_failed_run_again_on_the_next_invocation(tmp_path):
    script = bench_script({("write-greeting", CAMEL): "good", ("fix-permissions", CAMEL): "good"})
    server = FakeServer(script).start()
    port = server.port
    out = tmp_path / "out"
    tasks = [str(TASKS / "write-greeting"), str(TASKS / "fix-permissions")]
    args = ["bench", *tasks, "-k", "2", "-j", "1", "--api-base", server.url, "--retries", "0", "--out", str(out)]
    try:
        bench = subprocess.Popen(
            [sys.executable, "-m", "oc_repl", *args],
            env=cli_env(tmp_path),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
        )
        deadline = time.monotonic() + 300
        while not results(out):
            assert bench.poll() is None and time.monotonic() < deadline, "no trial finished"
            time.sleep(0.05)
        server.stop()  # the server dies after the first trial
        stdout, stderr = bench.communicate(timeout=300)
    finally:
        server.stop()
    assert bench.returncode == 0, stderr
    failed = [key for key, r in results(out).items() if r["failure_mode"] == "server_error"]
    assert len(failed) == 3 and len(results(out)) == 4
    assert f"{CAMEL}: 3 of 4 trials failed on infrastructure (server_error 3)" in " ".join(stdout.split())

    revived = FakeServer(script, port=port).start()
    try:
        kept = run_cli([*args, "--keep-failures"], tmp_path, timeout=300)
        assert kept.returncode == 0, kept.stderr
        assert revived.chat_requests() == []  # nothing ran again, not even the server check
        assert sorted(k for k, r in results(out).items() if r["failure_mode"] == "server_error") == sorted(failed)
        assert "3 of 4 trials failed on infrastructure (server_error 3)" in " ".join(kept.stdout.split())
        proc = run_cli(args, tmp_path, timeout=300)
    finally:
        revived.stop()
    assert proc.returncode == 0, proc.stderr
    assert "3 trials that failed on infrastructure run again" in proc.stderr
    assert all(r["failure_mode"] == "resolved" for r in results(out).values())
    text = " ".join(proc.stdout.split())
    assert "3 trials were run again after an infrastructure failure; 3 of them then finished" in text


def test_fewer_trials_start_while_the_server_answers_429(serve, tmp_path):
    greeting = route(TASKS / "write-greeting", CAMEL, "bgggg")
    greeting["variants"][0]["replies"] = [{"http_error": 429, "headers": {"Retry-After": "0"}}]
    greeting["variants"][1:] = [
        {
            "replies": episode(CAMEL, f"echo variant-good\n{solution(TASKS / 'write-greeting')}"),
            "marker": "variant-good",
        }
    ] * 4
    server = serve(scripted(greeting))
    out = tmp_path / "out"
    args = ["bench", str(TASKS / "write-greeting"), "-k", "4", "-j", "4", "--api-base", server.url, "--retries", "1"]
    proc = run_cli([*args, "--out", str(out)], tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "the server answered HTTP 429: at most 2 trials at once (was 4)" in proc.stderr
    assert [r["failure_mode"] for r in results(out).values()] == ["resolved"] * 4
