"""Four Harbor trials of oc-repl one after another (`-n 1`, the baseline) and all at once (`-n 4`), in the same run.

Each trial is a real `harbor run` trial of tests/fixtures/harbor/write-hi on Harbor's docker environment (as the tests
run it: tests/harbor_support.py), with `--agent oc_repl.harbor:OcRepl` and the terminus-json protocol against the
loopback fake server, which "thinks" DELAY seconds per reply (two replies a trial), as a model server would. Printed:
each job's span (Harbor's own job start to end) and the ratio. Concurrency pays where trials wait: on the model, on
commands; the container start and stop of each trial share the machine's two cores.
Run in Harbor's virtualenv: python benchmarks/harbor_concurrency.py [--delay 2] [--rows FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.rows import Row, add_option, write  # noqa: E402
from tests.fakeserver import FakeServer  # noqa: E402
from tests.harbor_support import AGENT, TASK, harbor_run  # noqa: E402


def span(jobs: Path, name: str, url: str, concurrent: int) -> float:
    args = ["-p", str(TASK), "--agent", AGENT, "-m", "openai/qwen3-8b-oc", "--ak", f"api_base={url}"]
    args += ["--ak", "protocol=terminus-json", "-k", "4", "-n", str(concurrent)]
    done, job = harbor_run(jobs, name, *args)
    if done.returncode != 0:
        raise SystemExit(done.stdout[-2000:] + done.stderr[-2000:])
    result = json.loads((job / "result.json").read_text())
    rewards = [json.loads(p.read_text())["verifier_result"]["rewards"]["reward"] for p in job.glob("*/result.json")]
    assert rewards == [1.0] * 4, rewards
    started, finished = (datetime.fromisoformat(result[key]) for key in ("started_at", "finished_at"))
    return (finished - started).total_seconds()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--delay", type=float, default=2.0, help="seconds the fake model takes per reply")
    add_option(parser)
    args = parser.parse_args()
    answer = {
        "analysis": "The file is missing.",
        "plan": "Write it.",
        "commands": [{"keystrokes": "echo hi > /srv/out.txt\n", "duration": 0.5}],
        "task_complete": True,
    }
    script = {"cycle": True, "replies": [{"text": json.dumps(answer), "delay": args.delay}]}
    with FakeServer(script) as server, tempfile.TemporaryDirectory() as tmp:
        one = span(Path(tmp), "n1", server.url, 1)
        four = span(Path(tmp), "n4", server.url, 4)
    print(f"4 trials, -n 1 (baseline): {one:.1f} s")
    print(f"4 trials, -n 4:            {four:.1f} s  ({one / four:.2f}x faster; {four / (one / 4):.2f}x one trial)")
    write([Row("4 Harbor trials, -n 4", four, "s", "the same, -n 1", one)], args.rows)


if __name__ == "__main__":
    main()
