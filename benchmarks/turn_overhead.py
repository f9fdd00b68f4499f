"""Per-turn client overhead: a full oc-repl turn (request, parse, one `shell_exec` of `true`, events, transcript)
against the bare parts measured in the same run: one HTTP round trip to the same server with the same body (for
the streamed turn, the same streamed request read to its end) + one `bash -c true`.

The server answers instantly, so everything above the bare parts is oc-repl's own cost. Goal: <= 5 ms.
Run: python benchmarks/turn_overhead.py [--turns 200]
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from oc_repl.agent import Agent  # noqa: E402
from oc_repl.client.chat import ChatClient  # noqa: E402
from oc_repl.protocols import create  # noqa: E402
from oc_repl.render.jsonl import JsonlRenderer  # noqa: E402
from oc_repl.sandbox.local import LocalSandbox  # noqa: E402
from oc_repl.session import Fanout  # noqa: E402
from oc_repl.transcript import TranscriptWriter  # noqa: E402
from oc_repl.types import Task  # noqa: E402
from tests.fakeserver import FakeServer, call_text  # noqa: E402

CALL = {"text": call_text("shell_exec", {"id": "s1", "command": "true", "block": True, "timeout": None})}


def bare_parts(url: str, body: dict, turns: int, stream: bool) -> float:
    import httpx

    if stream:
        body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    with httpx.Client() as http:
        http.post(f"{url}/chat/completions", json=body).read()
        start = time.perf_counter()
        for _ in range(turns):
            with http.stream("POST", f"{url}/chat/completions", json=body) as response:
                for _line in response.iter_lines():
                    pass
            subprocess.run(["bash", "-c", "true"], check=True)
        return (time.perf_counter() - start) / turns


def oc_repl_turns(url: str, turns: int, stream: bool, work: Path) -> float:
    client = ChatClient(url, "EMPTY", "qwen3-8b-oc", stream=stream, retries=0)
    protocol = create("camel-terminal-toolkit")
    sandbox = LocalSandbox(work)
    transcript = TranscriptWriter(work / "t.jsonl")
    emit = Fanout(transcript, JsonlRenderer(io.StringIO()))
    agent = Agent(client, protocol, sandbox, emit, max_turns=turns, loop_limit=0, sampling={"max_tokens": 4096})
    start = time.perf_counter()
    outcome = agent.run(Task("bench", "run true"))
    elapsed = time.perf_counter() - start
    assert outcome.status == "turn_cap", outcome
    protocol.close()
    sandbox.close()
    transcript.close()
    return elapsed / turns


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=200)
    turns = parser.parse_args().turns
    with FakeServer({"replies": [CALL], "cycle": True}).start() as server, tempfile.TemporaryDirectory() as tmp:
        oc_repl_turns(server.url, 5, False, Path(tmp))  # warm-up: imports, connection
        body = server.chat_requests()[-1]["body"]  # the same request oc-repl sends (one turn of history)
        rows = []
        for stream, name in ((False, "not streamed"), (True, "streamed")):
            bare = bare_parts(server.url, body, turns, stream)
            ours = oc_repl_turns(server.url, turns, stream, Path(tmp))
            rows.append((name, bare, ours))
    for name, bare, ours in rows:
        print(f"bare round trip + bash -c true, {name:13s} {bare * 1000:7.2f} ms/turn")
        print(
            f"oc-repl turn, {name:31s} {ours * 1000:7.2f} ms/turn   overhead {(ours - bare) * 1000:+6.2f} ms"
            f"   ratio {ours / bare:.2f}x"
        )
    print("goal: overhead <= 5 ms per turn; history grows each turn, so late turns carry more JSON")


if __name__ == "__main__":
    main()
