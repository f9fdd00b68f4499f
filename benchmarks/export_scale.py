"""`oc-repl export` of a bench of long trials: its peak memory at the full size next to a tenth of it, in one run.

One camel episode of `--turns` turns (the loopback fake server, a command each turn) is run once; a bench directory
of `--trials` finished trials then holds it as every trial's transcript (hard links: no disk), and `oc-repl export`
writes them all to a file, as a user runs it (its own process). Figures: the export's peak resident memory (goal:
under 300 MB at 1 000 trials of 200 turns) and its seconds, each next to the same export of a tenth of the trials:
a memory ratio near 1 is memory flat in the number of episodes. The output is large (every line holds each of its
turns' requests whole: a 200-turn camel episode is some MB), written to a temporary folder and removed.

Run: python benchmarks/export_scale.py [--trials 1000] [--turns 200]
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.rows import Row, add_option, write  # noqa: E402
from tests.fakeserver import FakeServer, call_text  # noqa: E402
from tests.test_export import bench_of  # noqa: E402

GOAL_MB = 300


def episode(tmp: Path, turns: int) -> Path:
    calls = [{"id": f"s{i}", "command": f"echo turn {i:04d} {'x' * 200}", "block": True} for i in range(turns)]
    transcript = tmp / "episode.jsonl"
    with FakeServer({"replies": [{"text": call_text("shell_exec", c)} for c in calls]}) as server:
        args = ["--api-base", server.url, "--sandbox", f"local:{tmp / 'work'}", "--yes", "--loop-limit", "0"]
        args += ["--max-turns", str(turns), "--transcript", str(transcript)]
        done = subprocess.run([sys.executable, "-m", "oc_repl", "run", *args, "go on"], capture_output=True, text=True)
    if done.returncode != 3:  # the turn cap
        raise SystemExit(f"the episode did not run its {turns} turns: {done.stderr[-500:]}")
    return transcript


def export(bench: Path, target: Path) -> tuple[float, float, int]:
    """Peak MB, seconds and bytes written of `oc-repl export BENCH -o TARGET` as its own process."""
    measure = (
        "import resource, subprocess, sys; "
        "proc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True); "
        "assert proc.returncode == 0, proc.stderr; "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    start = time.perf_counter()
    command = [sys.executable, "-c", measure, sys.executable, "-m", "oc_repl", "export", str(bench), "-o", str(target)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    seconds = time.perf_counter() - start
    size = target.stat().st_size
    target.unlink()
    return int(done.stdout) / 1024, seconds, size


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--turns", type=int, default=200)
    add_option(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        source = episode(tmp, args.turns)
        print(f"transcript of {args.turns} turns: {source.stat().st_size / 1e6:.1f} MB")
        tenth = max(1, args.trials // 10)
        small_mb, small_s, _ = export(bench_of(source, tmp / "small", tenth), tmp / "small.jsonl")
        mb, seconds, size = export(bench_of(source, tmp / "full", args.trials), tmp / "full.jsonl")
    print(
        f"export of {args.trials} trials of {args.turns} turns: {mb:.0f} MB peak, {seconds:.1f} s, {size / 1e9:.2f} GB"
    )
    print(f"export of {tenth} trials: {small_mb:.0f} MB peak, {small_s:.1f} s")
    rows = [
        Row(f"export peak memory, {args.trials} trials x {args.turns} turns", mb, "MB", f"{tenth} trials", small_mb,
            f"under {GOAL_MB} MB", mb < GOAL_MB),
        Row(f"export seconds, {args.trials} trials x {args.turns} turns", seconds, "s", f"{tenth} trials", small_s),
    ]  # fmt: skip
    write(rows, args.rows)
    print(f"peak RSS of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()
