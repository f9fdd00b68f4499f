"""Completion detection vs upstream's full sleeps: an episode of 20 quick commands, each with duration 1.0.

Both runs use the same scripted replies, the same directory and a local terminal (tmux, or the pty with
`--terminal pty`); the observations the model would read must be equal. Goal: detection >= 10x faster.
The pane's shell starts with an empty HOME, so that the figures measure the waiting, not the hooks of the user's
own shell start-up files (a prompt hook that runs a program after every command); `--user-home` keeps them.
Run: python benchmarks/terminus_wait.py [--commands 20] [--terminal tmux|pty] [--user-home]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from oc_repl.agent import Agent  # noqa: E402
from oc_repl.client.chat import ChatClient  # noqa: E402
from oc_repl.protocols import create  # noqa: E402
from oc_repl.sandbox.local import LocalSandbox  # noqa: E402
from oc_repl.types import Task  # noqa: E402
from tests.fakeserver import FakeServer  # noqa: E402


def reply(keys: list[str], complete: bool = False) -> dict:
    body = {
        "analysis": "a",
        "plan": "p",
        "commands": [{"keystrokes": k, "duration": 1.0} for k in keys],
        "task_complete": complete,
    }
    return {"text": json.dumps(body)}


def episode(n: int, wait: str, work: Path) -> tuple[float, list[str]]:
    replies = [reply([f"echo step-{i}\n"]) for i in range(n)] + [reply([], True), reply([], True)]
    with FakeServer({"replies": replies}).start() as server:
        client = ChatClient(server.url, "EMPTY", "m", retries=0)
        protocol = create("terminus-json", wait=wait)
        sandbox = LocalSandbox(work)
        agent = Agent(client, protocol, sandbox, lambda e: None, max_turns=n + 2, loop_limit=0)
        start = time.perf_counter()
        outcome = agent.run(Task("bench", "print the steps"))
        elapsed = time.perf_counter() - start
        assert outcome.status == "done", outcome
        observations = [m["content"] for m in protocol.request().messages if m["role"] == "user"]
        protocol.close()
        sandbox.close()
    return elapsed, observations


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--commands", type=int, default=20)
    parser.add_argument("--terminal", choices=["tmux", "pty"], default="tmux")
    parser.add_argument("--user-home", action="store_true")
    args = parser.parse_args()
    n = args.commands
    os.environ["OC_REPL_TERMINAL"] = args.terminal
    with tempfile.TemporaryDirectory() as tmp:
        if not args.user_home:
            os.environ["HOME"] = tmp
        work = Path(tmp) / "w"
        detect_s, detect_obs = episode(n, "detect", work)
        exact_s, exact_obs = episode(n, "exact", work)
    print(f"{n} commands, duration 1.0 each, {args.terminal}")
    print(f"--wait exact    {exact_s:7.2f} s")
    print(f"--wait detect   {detect_s:7.2f} s")
    print(f"speed-up        {exact_s / detect_s:7.1f}x   (goal >= 10x)")
    same = detect_obs == exact_obs
    print(f"observations equal: {same} ({len(detect_obs)} user messages each)")
    if not same:
        for a, b in zip(detect_obs, exact_obs, strict=False):
            if a != b:
                print("first difference:\n--- detect\n" + a[-400:] + "\n--- exact\n" + b[-400:])
                break
        sys.exit(1)


if __name__ == "__main__":
    main()
