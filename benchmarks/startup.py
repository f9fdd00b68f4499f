"""Cold start of `oc-repl --version` against a bare `python -c pass`, measured in the same run.

Run: python benchmarks/startup.py [--runs 20]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time


def best_of(argv: list[str], runs: int) -> tuple[float, float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    runs = parser.parse_args().runs
    base_min, base_med = best_of([sys.executable, "-c", "pass"], runs)
    ours_min, ours_med = best_of([sys.executable, "-m", "oc_repl", "--version"], runs)
    print(f"python -c pass        min {base_min * 1000:7.1f} ms  median {base_med * 1000:7.1f} ms")
    print(f"oc-repl --version     min {ours_min * 1000:7.1f} ms  median {ours_med * 1000:7.1f} ms")
    print(
        f"ratio (median)        {ours_med / base_med:.2f}x   goal: oc-repl --version <= 150 ms "
        f"({'met' if ours_med <= 0.15 else 'NOT met'})"
    )


if __name__ == "__main__":
    main()
