"""Start-up cost of a one-shot run against a loopback server, beside the bare interpreter measured in the same run.

Rows (medians of --runs, each a fresh process):
- `python -c pass`, `python -c "import httpx"` and `import httpcore`: the floor, the HTTP stack alone, and its
  transport layer alone (httpx also imports its command-line client when click, rich and pygments are installed);
- importing the chat client, and making one (what a run pays before its first request);
- `oc-repl --version`;
- `oc-repl run` (human output and --json): the time from process start until the first chat request reaches the
  server (GET /models comes first, as in a run without --model), and the wall time of the whole run; the model
  answers at once with no tool call, so the run is one turn on a `local:` sandbox.

Goals (issue 12): first request <= 0.25 s, whole one-turn run <= 0.35 s.
Run: python benchmarks/startup.py [--runs 10]
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

from tests.fakeserver import FakeServer  # noqa: E402

ANSWER = {"text": "<think>\n\n</think>\n\nok"}
MAKE_CLIENT = "from oc_repl.client.chat import ChatClient; ChatClient({!r}, 'EMPTY', 'm')"


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "OC_REPL_"))}
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    runs = parser.parse_args().runs
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp, FakeServer({"replies": [ANSWER], "cycle": True}) as server:
        home, work = Path(tmp), Path(tmp) / "work"
        work.mkdir()
        env = _env(home)
        run = [py, "-m", "oc_repl", "run", "--api-base", server.url, "--sandbox", f"local:{work}", "--yes", "hello"]
        wall(run, env, 1)  # warm the file cache and byte-code before anything is timed
        rows = [
            ("python -c pass", wall([py, "-c", "pass"], env, runs), None),
            ('python -c "import httpx"', wall([py, "-c", "import httpx"], env, runs), None),
            ('python -c "import httpcore"', wall([py, "-c", "import httpcore"], env, runs), None),
            ("import oc_repl.client.chat", wall([py, "-c", "import oc_repl.client.chat"], env, runs), None),
            ("... and make a ChatClient", wall([py, "-c", MAKE_CLIENT.format(server.url)], env, runs), None),
            ("oc-repl --version", wall([py, "-m", "oc_repl", "--version"], env, runs), None),
        ]
        for name, argv in (("oc-repl run", run), ("oc-repl run --json", [*run[:4], "--json", *run[4:]])):
            first, whole = one_shot(server, argv, env, runs)
            rows += [(f"{name}: first request", first, 0.25), (f"{name}: whole run", whole, 0.35)]
    base = rows[0][1]
    print(f"median of {runs} runs, loopback server in this process")
    for name, value, goal in rows:
        verdict = "" if goal is None else f"   goal <= {goal * 1000:.0f} ms: {'met' if value <= goal else 'NOT met'}"
        print(f"{name:34s} {value * 1000:7.1f} ms   {value / base:5.1f}x python -c pass{verdict}")


if __name__ == "__main__":
    main()
