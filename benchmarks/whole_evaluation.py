"""Whole evaluations of the same work, in one run: `oc-repl bench` against `harbor run` with Harbor's own terminus-2
and with oc-repl's Harbor agent.

The work: the three tasks of benchmarks/harbor_vs_terminus2.py (count-words, fix-json-config, write-hi) x `-k`
attempts, `-j` trials at once, every reply the same scripted terminus JSON after `--latency` seconds (the loopback fake
server, chosen by the task and the turn), every agent speaking terminus-json (oc-repl's protocol in bench and in its
Harbor agent, Harbor's terminus-2). Each evaluation runs as a user runs it, as its own process tree, on this machine's
docker (Harbor through the Compose v1 environment the tests use; `--exec compose` sends its execs through compose's
own front end, `docker exec` otherwise); images are built by an untimed first evaluation of each, so that neither
pays for builds. Figures per evaluation: wall seconds, trials per hour, the CPU seconds of its whole process tree
(harness, agents, compose front ends; not the docker daemon's), the peak memory of its largest process; the rewards
must agree, trial for trial. Goal: `oc-repl bench` at least 2.5 times sooner than Harbor with terminus-2.

Run in Harbor's virtualenv: DOCKER_HOST=... python benchmarks/whole_evaluation.py [-k 3] [-j 4] [--latency 0.5]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.rows import Row, add_option, harbor_imports, write  # noqa: E402

with harbor_imports(__name__):
    from benchmarks.harbor_vs_terminus2 import AGENTS, KEY, MODEL, TASKS, dataset, server_script
    from tests.harbor_support import ENVIRONMENT, harbor_env

GOAL = 2.5
# a wrapper that runs the evaluation and reports its whole tree's CPU and its largest process's peak memory
MEASURE = (
    "import json, resource, subprocess, sys; "
    "proc = subprocess.run(sys.argv[1:], stdin=subprocess.DEVNULL, capture_output=True, text=True); "
    "use = resource.getrusage(resource.RUSAGE_CHILDREN); "
    "print(json.dumps({'code': proc.returncode, 'cpu': use.ru_utime + use.ru_stime, 'peak_mb': use.ru_maxrss / 1024, "
    "'tail': (proc.stdout + proc.stderr)[-3000:]}))"
)


def measured(command: list[str], env: dict[str, str], cwd: Path) -> dict[str, Any]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", MEASURE, *command], capture_output=True, text=True, env=env, cwd=cwd)
    figures = json.loads(done.stdout)
    if figures["code"] != 0:
        raise SystemExit(f"{command[:4]} failed:\n{figures['tail']}")
    return {**figures, "wall": time.perf_counter() - started}


def bench(tasks: Path, url: str, k: int, jobs: int, out: Path) -> tuple[dict[str, Any], dict[str, float]]:
    command = [sys.executable, "-m", "oc_repl", "bench", "run", *sorted(str(p) for p in tasks.iterdir())]
    command += ["--protocol", "terminus-json", "-k", str(k), "-j", str(jobs), "--api-base", url, "--model", "m"]
    command += ["--retries", "0", "--out", str(out)]
    env = {**os.environ, "XDG_STATE_HOME": str(out.parent), "XDG_CONFIG_HOME": str(out.parent), "NO_COLOR": "1"}
    figures = measured(command, env, out.parent)
    results = [json.loads(p.read_text()) for p in out.glob("trials/*/*/*/result.json")]
    rewards = {f"{r['task']}#{r['attempt']}": float(r["resolved"]) for r in results}
    return figures, rewards


def harbor(tasks: Path, url: str, agent: str, k: int, jobs: int, out: Path, exec_by: str) -> tuple[dict, dict]:
    command = [str(Path(sys.executable).parent / "harbor"), "run", "-e", ENVIRONMENT, "-o", str(out.parent)]
    command += ["--job-name", out.name, "-y", "-p", str(tasks), *AGENTS[agent], "-m", MODEL]
    command += ["--ak", f"api_base={url}", "-n", str(jobs), "-k", str(k)]
    env = {**harbor_env(), **KEY, "COMPOSE_V1_EXEC": exec_by}
    figures = measured(command, env, ROOT)
    rewards: dict[str, float] = {}
    for path in sorted(out.glob("*/result.json")):
        result = json.loads(path.read_text())
        task = result["task_name"].split("/")[-1]
        n = sum(key.startswith(f"{task}#") for key in rewards) + 1
        rewards[f"{task}#{n}"] = float(((result.get("verifier_result") or {}).get("rewards") or {}).get("reward", 0))
    return figures, rewards


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-k", type=int, default=3, help="attempts per task (default 3)")
    parser.add_argument("-j", "--jobs", type=int, default=4, help="trials at once (default 4)")
    parser.add_argument("--latency", type=float, default=0.5, help="seconds the fake model takes per reply")
    parser.add_argument("--exec", dest="exec_by", choices=("docker", "compose"), default="docker")
    add_option(parser)
    args = parser.parse_args()
    from tests.fakeserver import FakeServer

    runs = {
        "oc-repl bench": lambda where, k: bench(tasks, server.url, k, args.jobs, where / "bench"),
        "harbor + terminus-2": lambda where, k: harbor(
            tasks, server.url, "terminus-2", k, args.jobs, where / "terminus-2", args.exec_by
        ),
        "harbor + oc-repl agent": lambda where, k: harbor(
            tasks, server.url, "oc-repl", k, args.jobs, where / "oc-repl", args.exec_by
        ),
    }
    load = os.getloadavg()[0]
    found: dict[str, tuple[dict[str, Any], dict[str, float]]] = {}
    # a request no task's route matches is the bench's check of the server before its first trial: one word
    script = {**server_script(args.latency), "replies": [{"text": "ready"}], "cycle": True}
    with FakeServer(script) as server, tempfile.TemporaryDirectory() as tmp:
        tasks = dataset(Path(tmp) / "tasks")
        for name, run in runs.items():  # the images built, untimed
            where = Path(tmp) / "warm" / name.replace(" ", "-")
            where.mkdir(parents=True)
            run(where, 1)
        for name, run in runs.items():
            where = Path(tmp) / "timed" / name.replace(" ", "-")
            where.mkdir(parents=True)
            found[name] = run(where, args.k)
            print(f"{name}: {found[name][0]['wall']:.1f} s", flush=True)
    trials = len(TASKS) * args.k
    rewards = {name: sorted(r.items()) for name, (_, r) in found.items()}
    if len({json.dumps(r) for r in rewards.values()}) != 1:
        raise SystemExit(f"the rewards differ: {rewards}")
    print(f"{len(TASKS)} tasks x {args.k} attempts, {args.jobs} at once, model latency {args.latency:g} s, exec via "
          f"{args.exec_by}; load (1 min) {load:.2f} at the start, {os.getloadavg()[0]:.2f} at the end, "
          f"{os.cpu_count()} cpus")  # fmt: skip
    for name, (f, _) in found.items():
        print(
            f"{name:24s} wall {f['wall']:6.1f} s  {3600 * trials / f['wall']:6.0f} trials/h  CPU {f['cpu']:6.1f} s "
            f"({f['cpu'] / trials:.2f} s a trial)  peak {f['peak_mb']:5.0f} MB"
        )
    ours, theirs = found["oc-repl bench"][0], found["harbor + terminus-2"][0]
    ratio = theirs["wall"] / ours["wall"]
    print(f"harbor + terminus-2 / oc-repl bench: {ratio:.2f}x sooner (goal >= {GOAL}x); the same rewards: True")
    rows = [
        Row(f"oc-repl bench wall, {trials} trials", ours["wall"], "s", "harbor + terminus-2", theirs["wall"],
            f">= {GOAL}x sooner", ratio >= GOAL),
        Row("oc-repl bench CPU a trial", ours["cpu"] / trials, "s", "harbor + terminus-2", theirs["cpu"] / trials),
        Row("oc-repl bench peak memory", ours["peak_mb"], "MB", "harbor + terminus-2", theirs["peak_mb"]),
        Row(f"harbor + oc-repl agent wall, {trials} trials", found["harbor + oc-repl agent"][0]["wall"], "s",
            "harbor + terminus-2", theirs["wall"]),
    ]  # fmt: skip
    write(rows, args.rows)


if __name__ == "__main__":
    main()
