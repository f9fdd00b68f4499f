"""What confinement costs a local sandbox: `exec("true")` confined against unconfined, and a sandbox's whole life
(made, ready, one command, closed), measured in the same run. The bare `bash -c true` is the floor both stand on.

Run: python benchmarks/local_confine.py [--runs 200] [--rows FILE]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.rows import Row, add_option, skip, write  # noqa: E402
from oc_repl.sandbox import confine  # noqa: E402
from oc_repl.sandbox.local import LocalSandbox  # noqa: E402


def median_ms(action: Callable[[], object], runs: int) -> float:
    action()  # warm-up
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def exec_true(work: Path, confined: bool, runs: int) -> float:
    box = LocalSandbox(work / ("confined" if confined else "unconfined"), confine=confined)
    try:
        return median_ms(lambda: box.exec("true", timeout=30), runs)
    finally:
        box.close()


def life(work: Path, confined: bool, runs: int) -> float:
    """A sandbox's whole life: made, ready, one command, closed (a confined one starts in the background, so a
    start and close alone would time nothing of the confinement)."""

    def once() -> None:
        box = LocalSandbox(work / "life", confine=confined)
        box.ready()
        box.exec("true", timeout=30)
        box.close()

    return median_ms(once, runs)


def measure(runs: int) -> list[Row]:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        bare = median_ms(lambda: subprocess.run(["bash", "-c", "true"], check=True), runs)
        unconfined = exec_true(work, False, runs)
        confined = exec_true(work, True, runs)
        life_unconfined = life(work, False, max(5, runs // 10))
        life_confined = life(work, True, max(5, runs // 10))
    return [
        Row("exec('true') unconfined", unconfined, "ms", "bare subprocess bash -c true", bare),
        Row("exec('true') confined", confined, "ms", "exec('true') unconfined", unconfined),
        Row(
            "sandbox life (start, ready, one exec, close), confined",
            life_confined,
            "ms",
            "... unconfined",
            life_unconfined,
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=200)
    add_option(parser)
    args = parser.parse_args()
    ok, reason = confine.check()
    if not ok:
        skip(f"cannot measure confinement here: {reason}")
    rows = measure(args.runs)
    unconfined, confined, life = rows
    print(f"bare subprocess bash -c true       {unconfined.base_value:7.2f} ms")
    print(f"exec('true') unconfined            {unconfined.value:7.2f} ms")
    extra = confined.value - unconfined.value
    print(f"exec('true') confined              {confined.value:7.2f} ms   overhead {extra:+6.2f} ms")
    print(f"sandbox life, unconfined           {life.base_value:7.2f} ms")
    print(f"sandbox life, confined             {life.value:7.2f} ms   overhead {life.value - life.base_value:+6.2f} ms")
    print("medians; goal: confinement adds a few ms per command, far below a model turn")
    write(rows, args.rows)


if __name__ == "__main__":
    main()
