"""How the readers of a bench grow with its size: `bench report`, `bench tasks`, `bench compare` and the HTML report of
a synthetic bench (two arms, results written as a bench writes them), at a tenth of the size and at the size itself.

Figures: each command's seconds at the full size (goal for report, tasks and compare: under 5 s at 10 000 trials),
next to the same command at a tenth of the size: a ratio near 10 is linear growth. Each command runs as a user runs
it, as its own `oc-repl` process (start-up included).

Run: python benchmarks/report_scale.py [--trials 10000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.rows import Row, add_option, write  # noqa: E402
from oc_repl.bench.results import TrialResult, trial_dir, write_result  # noqa: E402

ATTEMPTS = 5
ARMS = {"p": 52, "q": 45}  # percent of trials each arm resolves
LIMIT = 5.0  # seconds


def synthetic(out: Path, tasks: int, attempts: int = ATTEMPTS, arms: dict[str, int] = ARMS) -> list[TrialResult]:
    """A finished bench of `tasks` x `attempts` trials per arm in `out`, each arm resolving its share of them (spread
    over tasks and attempts alike); its results."""
    names = [f"t{i:05}" for i in range(tasks)]
    results = []
    for i, task in enumerate(names):
        for arm, percent in arms.items():
            for attempt in range(1, attempts + 1):
                ok = (i * 7 + attempt * 3) % 100 < percent
                status, mode = ("verified", "resolved") if ok else ("verify_failed", "unresolved")
                result = TrialResult(task, arm, attempt, status, mode, ok, 0)
                directory = trial_dir(out, task, arm, attempt)
                directory.mkdir(parents=True, exist_ok=True)
                write_result(directory, result)
                results.append(result)
    plan = {"tasks": [{"name": t} for t in names], "protocols": list(arms), "k": attempts, "run_options": {}}
    (out / "bench.json").write_text(json.dumps(plan))
    return results


def seconds(*args: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "oc_repl", "bench", *args], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def timings(work: Path, trials: int) -> dict[str, float]:
    """Seconds of each reader over a bench of `trials` trials (compare: two runs of half as many each)."""
    tasks = max(1, trials // (ATTEMPTS * len(ARMS)))
    whole, first, second = work / f"whole-{trials}", work / f"first-{trials}", work / f"second-{trials}"
    synthetic(whole, tasks)
    synthetic(first, max(1, tasks // 2))
    synthetic(second, max(1, tasks // 2))
    return {
        "bench report": seconds("report", str(whole)),
        "bench tasks": seconds("tasks", str(whole)),
        "bench compare": seconds("compare", str(first), str(second)),
        "bench report --html": seconds("report", "--html", str(work / f"report-{trials}.html"), str(whole)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=10_000)
    add_option(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        small, full = timings(Path(tmp), args.trials // 10), timings(Path(tmp), args.trials)
    rows = []
    for figure, value in full.items():
        timed = "--html" not in figure
        rows.append(
            Row(
                f"{figure}, {args.trials} trials",
                value,
                "s",
                f"{args.trials // 10} trials",
                small[figure],
                goal=f"under {LIMIT:g} s at 10 000 trials" if timed else "",
                met=value < LIMIT if timed and args.trials >= 10_000 else None,
            )
        )
    for row in rows:
        print(f"{row.figure}: {row.value:.2f} s ({row.ratio:.1f}x {row.baseline})")
    write(rows, args.rows)


if __name__ == "__main__":
    main()
