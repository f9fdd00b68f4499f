"""Start-up cost of a one-shot run against a loopback server, beside the bare interpreter measured in the same run.

Rows (medians of --runs, each a fresh process):
- `python -c pass`, `python -c "import httpx"` and `import httpcore`: the floor, the HTTP stack alone, and its
  transport layer alone (httpx also imports its command-line client when click, rich and pygments are installed);
- importing the chat client, and making one (what a run pays before its first request);
- `oc-repl --version`;
- `oc-repl run` (human output and --json): the time from process start until the first chat request reaches the
  server (GET /models comes first, as in a run without --model), and the wall time of the whole run; the model
  answers at once with no tool call, so the run is one turn on a `local:` sandbox.

Goals: a whole one-turn run <= 0.25 s (its first request sooner still).
Run: python benchmarks/startup.py [--runs 10] [--rows FILE]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.rows import Row, add_option, write  # noqa: E402
from tests.fakeserver import FakeServer  # noqa: E402

ANSWER = {"text": "<think>\n\n</think>\n\nok"}
MAKE_CLIENT = "from oc_repl.client.chat import ChatClient; ChatClient({!r}, 'EMPTY', 'm')"


def isolated_env(home: Path) -> dict[str, str]:
    """This environment without the user's server, key, oc-repl settings and state: all of those under `home`."""
    # An installed oc-repl runs from byte-code (pip compiles it; an editable checkout writes it on first import), so
    # a PYTHONDONTWRITEBYTECODE of this shell's would time the compiler, not oc-repl: the warm-up run writes it.
    skip = ("OPENAI_", "OC_REPL_", "PYTHONDONTWRITEBYTECODE")
    env = {k: v for k, v in os.environ.items() if not k.startswith(skip)}
    env.update(XDG_STATE_HOME=str(home / "state"), XDG_CONFIG_HOME=str(home / "config"), NO_COLOR="1")
    return env


def wall(argv: list[str], env: dict[str, str], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True, env=env, stdin=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def one_shot(server: FakeServer, argv: list[str], env: dict[str, str], runs: int) -> tuple[float, float]:
    """(median time to the first chat request, median wall time of the run)."""
    first, whole = [], []
    for _ in range(runs):
        seen = len(server.chat_requests())
        start = time.perf_counter()  # the server runs in this process, so its `received` clock is this one
        proc = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True)
        whole.append(time.perf_counter() - start)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
        first.append(server.chat_requests()[seen]["received"] - start)
    return statistics.median(first), statistics.median(whole)


def measure(runs: int) -> list[Row]:
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp, FakeServer({"replies": [ANSWER], "cycle": True}) as server:
        home, work = Path(tmp), Path(tmp) / "work"
        work.mkdir()
        env = isolated_env(home)
        run = [py, "-m", "oc_repl", "run", "--api-base", server.url, "--sandbox", f"local:{work}", "--yes", "hello"]
        wall(run, env, 1)  # warm the file cache and byte-code before anything is timed
        found: list[tuple[str, float, float | None]] = [
            ("python -c pass", wall([py, "-c", "pass"], env, runs), None),
            ('python -c "import httpx"', wall([py, "-c", "import httpx"], env, runs), None),
            ('python -c "import httpcore"', wall([py, "-c", "import httpcore"], env, runs), None),
            ("import oc_repl.client.chat", wall([py, "-c", "import oc_repl.client.chat"], env, runs), None),
            ("... and make a ChatClient", wall([py, "-c", MAKE_CLIENT.format(server.url)], env, runs), None),
            ("oc-repl --version", wall([py, "-m", "oc_repl", "--version"], env, runs), None),
        ]
        for name, argv in (("oc-repl run", run), ("oc-repl run --json", [*run[:4], "--json", *run[4:]])):
            first, whole = one_shot(server, argv, env, runs)
            found += [(f"{name}: first request", first, None), (f"{name}: whole run", whole, 0.25)]
    base = found[0][1] * 1000
    rows = [Row(found[0][0], base, "ms")]
    for name, value, goal in found[1:]:
        ms = value * 1000
        verdict = {} if goal is None else {"goal": f"<= {goal * 1000:.0f} ms", "met": value <= goal}
        rows.append(Row(name, ms, "ms", "python -c pass", base, **verdict))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    add_option(parser)
    args = parser.parse_args()
    rows = measure(args.runs)
    print(f"median of {args.runs} runs, loopback server in this process")
    for row in rows:
        ratio = row.ratio or 1.0
        verdict = f"   goal {row.goal}: {'met' if row.met else 'NOT met'}" if row.goal else ""
        print(f"{row.figure:34s} {row.value:7.1f} ms   {ratio:5.1f}x python -c pass{verdict}")
    write(rows, args.rows)


if __name__ == "__main__":
    main()
