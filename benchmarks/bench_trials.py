"""What a bench trial costs beyond its work, and how many trials a minute this machine runs, in one run.

A one-command task (write-greeting: one `echo` solves it) and a zero-latency model (the loopback fake server,
answering with the solution and then "Done."), so that nothing but the harness is measured:
- by hand     the same steps with the docker CLI: `docker run -d` (create + start), `docker exec` of the command,
              `docker cp` of run-tests.sh and tests/, `docker exec` of the tests, `docker rm -f`
- bench       `oc-repl bench TASK -k N -j J`: per trial a fresh `oc-repl run` process (the agent loop, two model
              turns, the transcript), a fresh container, the tests, the removal, and the result.json
Reported: seconds per trial sequentially (-j 1) and their ratio (the overhead), and trials per minute at -j 1, 2, 4
for both (the by-hand steps run in J threads). Rounds alternate between the two so drift hits both alike. The
image is built once before timing (bench builds once per task; the by-hand steps reuse it).

With --latency S the model takes S seconds per reply (two replies a trial), as a served model does: the by-hand
steps have no model, so only the bench figures change.

Run: DOCKER_HOST=... python benchmarks/bench_trials.py [-n 8] [--jobs 1,2,4] [--latency 0]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from oc_repl.tasks.image import build_image  # noqa: E402
from oc_repl.tasks.model import load_task  # noqa: E402
from tests.bench_scripts import scripted  # noqa: E402
from tests.fakeserver import FakeServer, call_text  # noqa: E402

TASK = ROOT / "examples" / "tasks" / "write-greeting"
COMMAND = "echo 'Hello from oc-repl' > /app/greeting.txt"


def script(latency: float = 0.0) -> dict:
    call = call_text("shell_exec", {"id": "s1", "command": COMMAND, "block": True})
    done = "<think>\n\n</think>\n\nDone."
    replies = [{"text": call, "delay": latency}, {"text": done, "delay": latency}]
    return scripted({"match": "Task name:write-greeting\n", "replies": replies})  # the bench's server check too


def docker(*args: str) -> str:
    return subprocess.run(["docker", *args], check=True, capture_output=True, text=True).stdout.strip()


def by_hand(image: str) -> None:
    """One trial's steps with the docker CLI; raises unless the tests pass."""
    container = docker("run", "-d", "--network", "none", image, "sleep", "infinity")
    try:
        docker("exec", container, "bash", "-c", COMMAND)
        docker("exec", container, "mkdir", "-p", "/tests")
        docker("cp", str(TASK / "run-tests.sh"), f"{container}:/tests/run-tests.sh")
        docker("cp", f"{TASK / 'tests'}/.", f"{container}:/tests/")
        out = docker("exec", "-w", "/app", "-e", "TEST_DIR=/tests", container, "bash", "/tests/run-tests.sh")
        if "2 passed" not in out:
            raise RuntimeError(out)
    finally:
        docker("rm", "-f", container)


def by_hand_batch(image: str, trials: int, jobs: int) -> float:
    started = time.perf_counter()
    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(lambda _: by_hand(image), range(trials)))
    return time.perf_counter() - started


def bench_batch(url: str, trials: int, jobs: int) -> tuple[float, float]:
    """Wall time of `oc-repl bench` for `trials` trials, and the mean of the trials' own wall times."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        args = [sys.executable, "-m", "oc_repl", "bench", str(TASK), "-k", str(trials), "-j", str(jobs)]
        args += ["--api-base", url, "--retries", "0", "--out", str(out)]
        env = {**os.environ, "XDG_STATE_HOME": tmp, "XDG_CONFIG_HOME": tmp, "NO_COLOR": "1"}
        started = time.perf_counter()
        proc = subprocess.run(args, capture_output=True, text=True, env=env, cwd=tmp)
        wall = time.perf_counter() - started
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr)
        results = [json.loads(p.read_text()) for p in out.glob("trials/*/*/*/result.json")]
        if len(results) != trials or not all(r["resolved"] for r in results):
            raise RuntimeError(f"not every trial was resolved: {proc.stdout}")
        return wall, sum(r["wall_time_s"] for r in results) / trials


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=8, help="trials per measurement")
    parser.add_argument("--jobs", default="1,2,4")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds the model takes per reply (bench only)")
    opts = parser.parse_args()
    if not shutil.which("docker"):
        sys.exit("the docker CLI is needed for the by-hand baseline")
    image = build_image(load_task(TASK))
    jobs = [int(j) for j in opts.jobs.split(",")]
    hand: dict[int, list[float]] = {j: [] for j in jobs}
    bench: dict[int, list[float]] = {j: [] for j in jobs}
    trial_walls: list[float] = []
    with FakeServer(script(opts.latency)) as server:
        by_hand(image)  # warm both paths once: page cache, image layers
        bench_batch(server.url, 1, 1)
        for _ in range(opts.rounds):
            for j in jobs:
                hand[j].append(by_hand_batch(image, opts.n, j))
                wall, per_trial = bench_batch(server.url, opts.n, j)
                bench[j].append(wall)
                if j == 1:
                    trial_walls.append(per_trial)
    load = os.getloadavg()[0]
    per_hand = min(hand[1]) / opts.n if 1 in hand else float("nan")
    per_bench = min(bench[1]) / opts.n if 1 in bench else float("nan")
    cores = os.cpu_count()
    print(f"machine: {cores} cores, load average {load:.1f}; {opts.n} trials a measurement, best of {opts.rounds}")
    print(f"trial overhead (-j 1): bench {per_bench:.2f} s/trial (a trial's own process: {min(trial_walls):.2f} s) vs")
    ratio = f"ratio {per_bench / per_hand:.2f}x" if not opts.latency else "no ratio: the bench trials wait on the model"
    print(f"  docker CLI by hand {per_hand:.2f} s/trial: {ratio}")
    print(f"throughput (trials per minute; the model takes {opts.latency:g} s per reply in bench trials):")
    for j in jobs:
        print(f"  -j {j}: bench {60 * opts.n / min(bench[j]):6.1f}   by hand {60 * opts.n / min(hand[j]):6.1f}")


if __name__ == "__main__":
    main()
