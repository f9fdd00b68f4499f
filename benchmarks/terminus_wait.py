"""Completion detection vs upstream's full sleeps: an episode of N quick commands, each with duration 1.0.

Both episodes (`--wait detect`, oc-repl's default, and `--wait exact`, upstream's sleeps) use the same scripted
replies and the same sandbox: a local directory with a local terminal (tmux, or the pty with `--terminal pty`), or
with `--sandbox docker-image:IMAGE` one container for both episodes (tmux inside it), so that the prompt's host name
is the same. The screens must be equal: the observations oc-repl sent to the model, read back from each episode's
transcript (its `request.sent` events). Goal: detection >= 10x faster.
The local pane's shell starts with an empty HOME, so that the figures measure the waiting, not the hooks of the user's
own shell start-up files (a prompt hook that runs a program after every command); `--user-home` keeps them.
Run: python benchmarks/terminus_wait.py [--commands 20] [--terminal tmux|pty] [--user-home]
     DOCKER_HOST=... python benchmarks/terminus_wait.py --sandbox docker-image:oc-repl-test:bookworm --commands 10
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

from benchmarks.rows import Row, add_option, skip, write  # noqa: E402
from oc_repl import deviations  # noqa: E402
from oc_repl.agent import Agent  # noqa: E402
from oc_repl.client.chat import ChatClient  # noqa: E402
from oc_repl.errors import SandboxError  # noqa: E402
from oc_repl.protocols import create  # noqa: E402
from oc_repl.sandbox import open_sandbox  # noqa: E402
from oc_repl.transcript import TranscriptWriter, read_events  # noqa: E402
from oc_repl.types import Sandbox, Task  # noqa: E402
from tests.fakeserver import FakeServer  # noqa: E402


def reply(keys: list[str], complete: bool = False) -> dict:
    body = {
        "analysis": "a",
        "plan": "p",
        "commands": [{"keystrokes": k, "duration": 1.0} for k in keys],
        "task_complete": complete,
    }
    return {"text": json.dumps(body)}


def sent_observations(transcript: Path) -> list[str]:
    """The user messages of the last request the transcript records: every screen the model was shown."""
    requests = [e for e in read_events(transcript) if e.type == "request.sent"]
    return [m["content"] for m in requests[-1].request["messages"] if m["role"] == "user"]


def episode(n: int, wait: str, sandbox: Sandbox, transcript: Path) -> tuple[float, list[str]]:
    replies = [reply([f"echo step-{i}\n"]) for i in range(n)] + [reply([], True), reply([], True)]
    with FakeServer({"replies": replies}).start() as server:
        client = ChatClient(server.url, "EMPTY", "m", retries=0)
        # `exact`: upstream's full sleeps (the returns_when_idle deviation off)
        protocol = create("terminus-json", deviations=deviations.defaults().replace(returns_when_idle=wait == "detect"))
        writer = TranscriptWriter(transcript)
        agent = Agent(client, protocol, sandbox, writer, max_turns=n + 2, loop_limit=0)
        start = time.perf_counter()
        outcome = agent.run(Task("bench", "print the steps"))
        elapsed = time.perf_counter() - start
        assert outcome.status == "done", outcome
        protocol.close()
        writer.close()
    return elapsed, sent_observations(transcript)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--commands", type=int, default=20)
    parser.add_argument("--terminal", choices=["tmux", "pty"], default="tmux")
    parser.add_argument("--sandbox", default="local", help="local (default) or docker-image:IMAGE")
    parser.add_argument("--user-home", action="store_true")
    add_option(parser)
    args = parser.parse_args()
    n = args.commands
    os.environ["OC_REPL_TERMINAL"] = args.terminal
    with tempfile.TemporaryDirectory() as tmp:
        if not args.user_home:
            os.environ["HOME"] = tmp
        spec = f"local:{Path(tmp) / 'w'}" if args.sandbox == "local" else args.sandbox
        try:
            sandbox = open_sandbox(spec)
        except SandboxError as exc:
            skip(f"{spec}: {exc.message}")
        try:
            detect_s, detect_obs = episode(n, "detect", sandbox, Path(tmp) / "detect.jsonl")
            exact_s, exact_obs = episode(n, "exact", sandbox, Path(tmp) / "exact.jsonl")
        finally:
            sandbox.close()
    where = "local" if args.sandbox == "local" else args.sandbox
    print(f"{n} commands, duration 1.0 each, {args.terminal}, {where}")
    print(f"--wait exact    {exact_s:7.2f} s")
    print(f"--wait detect   {detect_s:7.2f} s")
    print(f"speed-up        {exact_s / detect_s:7.1f}x   (goal >= 10x)")
    same = detect_obs == exact_obs
    print(f"screens sent to the model equal: {same} ({len(detect_obs)} user messages each)")
    place = f"{args.terminal}, {'local' if args.sandbox == 'local' else 'docker'}"
    speed = {"goal": ">= 10x faster (<= 0.10x)", "met": exact_s >= 10 * detect_s}
    figure = f"{n} commands --wait detect ({place})"
    write([Row(figure, detect_s, "s", f"--wait exact, same screens: {same}", exact_s, **speed)], args.rows)
    if not same:
        for a, b in zip(detect_obs, exact_obs, strict=False):
            if a != b:
                print("first difference:\n--- detect\n" + a[-400:] + "\n--- exact\n" + b[-400:])
                break
        sys.exit(1)


if __name__ == "__main__":
    main()
