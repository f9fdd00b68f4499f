"""Per-turn overhead against the bare parts measured in the same run, plain and streamed, against an instant server.

- client: `ChatClient.complete()` with one turn of history vs one bare httpx round trip with the same body (for
  streams, the same streamed request read to its end);
- whole turn: request, parse, one `shell_exec` of `true`, events, transcript (the agent loop) vs the bare round
  trip + one `bash -c true`; the sandbox is unconfined like the bare command, and, where bubblewrap works, the
  streamed turn again in the default confined sandbox (against the same bare parts: confinement included).

Everything above the bare parts is oc-repl's own cost. Each figure is wall time per turn and, beside it, the CPU
time of this process per turn (less disturbed by other load on the machine; it includes the loopback server's
threads, which do the same work for both sides). Goal: whole-turn overhead <= 5 ms.
Run: python benchmarks/turn_overhead.py [--turns 200] [--rows FILE]
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.rows import Row, add_option, write  # noqa: E402
from oc_repl.agent import Agent  # noqa: E402
from oc_repl.client.chat import ChatClient  # noqa: E402
from oc_repl.protocols import create  # noqa: E402
from oc_repl.render.jsonl import JsonlRenderer  # noqa: E402
from oc_repl.sandbox import confine  # noqa: E402
from oc_repl.sandbox.local import LocalSandbox  # noqa: E402
from oc_repl.session import Fanout  # noqa: E402
from oc_repl.transcript import TranscriptWriter  # noqa: E402
from oc_repl.types import Task  # noqa: E402
from tests.fakeserver import FakeServer, call_text  # noqa: E402

CALL = {"text": call_text("shell_exec", {"id": "s1", "command": "true", "block": True, "timeout": None})}
Cost = tuple[float, float]  # (wall, cpu) seconds per turn


def timed(turns: int, body: Callable[[], None]) -> Cost:
    wall, cpu = time.perf_counter(), time.process_time()
    body()
    return (time.perf_counter() - wall) / turns, (time.process_time() - cpu) / turns


def bare(url: str, body: dict, turns: int, stream: bool, command: bool) -> Cost:
    import httpx

    if stream:
        body = {**body, "stream": True, "stream_options": {"include_usage": True}}

    def loop() -> None:
        for _ in range(turns):
            with http.stream("POST", f"{url}/chat/completions", json=body) as response:
                for _line in response.iter_lines():
                    pass
            if command:
                subprocess.run(["bash", "-c", "true"], check=True)

    with httpx.Client() as http:
        http.post(f"{url}/chat/completions", json=body).read()
        return timed(turns, loop)


def client_only(url: str, body: dict, turns: int, stream: bool) -> Cost:
    client = ChatClient(url, "EMPTY", "qwen3-8b-oc", stream=stream, retries=0)
    options = {k: v for k, v in body.items() if k not in ("model", "messages")}
    client.complete(body["messages"], options)
    cost = timed(turns, lambda: [client.complete(body["messages"], options, lambda k, t: None) for _ in range(turns)])
    client.close()
    return cost


def whole_turns(url: str, turns: int, stream: bool, work: Path, confine: bool = False) -> Cost:
    client = ChatClient(url, "EMPTY", "qwen3-8b-oc", stream=stream, retries=0)
    protocol = create("camel-terminal-toolkit")
    sandbox = LocalSandbox(work, confine=confine)
    transcript = TranscriptWriter(work / "t.jsonl")
    emit = Fanout(transcript, JsonlRenderer(io.StringIO()))
    agent = Agent(client, protocol, sandbox, emit, max_turns=turns, loop_limit=0, sampling={"max_tokens": 4096})
    outcome = []
    cost = timed(turns, lambda: outcome.append(agent.run(Task("bench", "run true"))))
    assert outcome[0].status == "turn_cap", outcome
    protocol.close()
    sandbox.close()
    transcript.close()
    return cost


def row(name: str, cost: Cost, base: Cost | None = None) -> str:
    text = f"{name:44s} {cost[0] * 1000:7.2f} ms/turn wall {cost[1] * 1000:7.2f} cpu"
    if base is not None:
        text += f"   overhead {(cost[0] - base[0]) * 1000:+6.2f} wall {(cost[1] - base[1]) * 1000:+6.2f} cpu"
    return text


def measure(turns: int, confined: bool) -> list[tuple[str, Cost, Cost | None]]:
    """(name, cost, the bare cost it stands on or None) per figure."""
    found: list[tuple[str, Cost, Cost | None]] = []
    with FakeServer({"replies": [CALL], "cycle": True}).start() as server, tempfile.TemporaryDirectory() as tmp:
        whole_turns(server.url, 5, False, Path(tmp))  # warm-up: imports, connection
        body = server.chat_requests()[-1]["body"]  # the same request oc-repl sends (one turn of history)
        for stream, name in ((False, "not streamed"), (True, "streamed")):
            base = bare(server.url, body, turns, stream, command=False)
            found += [(f"bare round trip, {name}", base, None)]
            found += [(f"  ChatClient.complete, {name}", client_only(server.url, body, turns, stream), base)]
            base = bare(server.url, body, turns, stream, command=True)
            found += [(f"bare round trip + bash -c true, {name}", base, None)]
            found += [(f"  oc-repl whole turn, {name}", whole_turns(server.url, turns, stream, Path(tmp)), base)]
        if confined:  # the default local sandbox: the same turn with the command run in bubblewrap
            cost = whole_turns(server.url, turns, True, Path(tmp), confine=True)
            found += [("  oc-repl whole turn, streamed, confined", cost, base)]
    return found


def to_rows(found: list[tuple[str, Cost, Cost | None]]) -> list[Row]:
    rows = []
    for name, cost, base in found:
        if base is None:
            continue
        bare_name = next(n for n, c, _ in found if c is base).strip()
        for i, clock in ((0, "wall"), (1, "cpu")):
            goal = {}
            if "whole turn" in name:
                goal = {"goal": "overhead <= 5 ms", "met": (cost[i] - base[i]) * 1000 <= 5}
            rows.append(Row(f"{name.strip()} ({clock})", cost[i] * 1000, "ms", bare_name, base[i] * 1000, **goal))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=200)
    add_option(parser)
    args = parser.parse_args()
    found = measure(args.turns, confine.check()[0])
    print("\n".join(row(name, cost, base) for name, cost, base in found))
    print("goal: whole-turn overhead <= 5 ms; history grows each turn, so late turns carry more JSON")
    write(to_rows(found), args.rows)


if __name__ == "__main__":
    main()
