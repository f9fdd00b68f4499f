"""What a turn costs the client on the generate wire (the prompt rendered with the Qwen3 template, tokenized, cut past
8192 tokens, posted as ids) beside the chat wire, in the same run, against the loopback fake server.

- client: `ChatClient.complete()` on a camel conversation of `--tokens` tokens that grows by one tool result a turn,
  each wire against a bare httpx round trip of the same body: the overhead is the difference;
- whole turn: the agent loop (request, parse, one `shell_exec` printing some 3 000 characters, events, transcript)
  on each wire, the history growing the same way, against the fake server in a process of its own: the CPU time this
  process spends a turn is the client's whole per-turn cost (the server's work and the command's are not in it).

The tokenizer is the test tokenizer (Qwen's BPE, tests/tokenizer_support.py) and the template the pinned Qwen3 one.
Goal: the generate wire's client CPU per whole turn <= 2x the chat wire's. Figures are medians over the turns.
Run: python benchmarks/wire_overhead.py [--turns 30] [--tokens 16000] [--rows FILE]
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.rows import Row, add_option, write  # noqa: E402
from benchmarks.tokenize_cost import conversation, model_folder, template_source, tool_output  # noqa: E402

ANSWER = {"text": "<think>\n\n</think>\n\nDone."}


def client_for(url: str, wire: str, files: Any, stream: bool = True) -> Any:
    from oc_repl.client.chat import ChatClient
    from oc_repl.client.prompt import TextPrompts

    prompts = TextPrompts(wire, files, cut=True) if wire != "chat" else None
    return ChatClient(url, "EMPTY", "qwen3-8b-oc", stream=stream, retries=0, prompts=prompts)


def client_turns(
    url: str, wire: str, files: Any, messages: list[dict], tools: list, turns: int, stream: bool
) -> tuple[float, float]:
    """(median ms of complete(), median ms of the bare round trip of the same body, read to its end), per turn."""
    import httpx

    from oc_repl.client.wires import WIRES

    client = client_for(url, wire, files, stream)
    options = {"tools": tools, "tool_choice": "auto", "temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_tokens": 8192}
    route = WIRES[wire].url(url)
    history = list(messages)
    ours, bare = [], []
    with httpx.Client() as http:
        for turn in range(turns + 2):  # two warm-up turns: imports, connections, the tokenizer's first encode
            history.append({"role": "tool", "tool_call_id": f"t{turn}", "content": tool_output(turn)})
            started = time.perf_counter()
            client.complete(history, options)
            spent = time.perf_counter() - started
            body = client.last_request
            if stream and wire == "chat":  # the chat client sets the stream switches as it sends
                body = {**body, "stream": True, "stream_options": {"include_usage": True}}
            started = time.perf_counter()
            with http.stream("POST", route, json=body) as response:
                for _piece in response.iter_bytes():
                    pass
            if turn >= 2:
                ours.append(spent * 1000)
                bare.append((time.perf_counter() - started) * 1000)
    client.close()
    return statistics.median(ours), statistics.median(bare)


def whole_turns(url: str, wire: str, files: Any, turns: int, work: Path) -> tuple[float, float]:
    """(median wall ms, median CPU ms of this process) of a whole agent turn, a tool result of some 3 000 characters
    a turn."""
    from oc_repl.agent import Agent
    from oc_repl.protocols import create
    from oc_repl.render.jsonl import JsonlRenderer
    from oc_repl.sandbox.local import LocalSandbox
    from oc_repl.session import Fanout
    from oc_repl.transcript import TranscriptWriter
    from oc_repl.types import Task

    client = client_for(url, wire, files)
    protocol = create("camel-terminal-toolkit", count_tokens=files.tokenizer.count)
    sandbox = LocalSandbox(work / wire, confine=False)
    transcript = TranscriptWriter(work / f"{wire}.jsonl")
    walls: list[float] = []
    cpus: list[float] = []
    last = [time.perf_counter(), time.process_time()]

    def emit(event: Any) -> None:
        sink(event)
        if event.type == "turn.completed":
            now = [time.perf_counter(), time.process_time()]
            walls.append((now[0] - last[0]) * 1000)
            cpus.append((now[1] - last[1]) * 1000)
            last[:] = now

    sink = Fanout(transcript, JsonlRenderer(io.StringIO()))
    agent = Agent(client, protocol, sandbox, emit, max_turns=turns, loop_limit=0, sampling={"max_tokens": 8192})
    agent.run(Task("bench", "read the readme"))
    protocol.close()
    sandbox.close()
    transcript.close()
    client.close()
    return statistics.median(walls[2:]), statistics.median(cpus[2:])


@contextmanager
def served_apart(script: dict[str, Any], scratch: Path) -> Iterator[str]:
    """The fake server in a process of its own (so that its work is not this process's CPU time): its URL."""
    path = scratch / "script.json"
    path.write_text(json.dumps(script))
    command = [sys.executable, "-m", "tests.fakeserver", str(path)]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().strip() if proc.stdout else ""
        if not url:
            raise SystemExit(f"the fake server did not start (exit {proc.wait(30)})")
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--tokens", type=int, default=16000, help="the conversation's size at the first turn")
    add_option(parser)
    args = parser.parse_args()
    from oc_repl.client.chat_template import ChatTemplates, Template
    from oc_repl.client.model_files import ModelFiles
    from oc_repl.client.tokenizer import load_tokenizer
    from tests.fakeserver import FakeServer

    with tempfile.TemporaryDirectory() as scratch:
        folder = model_folder(None, Path(scratch))
        tok = load_tokenizer(folder)
        templates = ChatTemplates({"default": Template("default", template_source(folder), "qwen3")})
        files = ModelFiles(folder, templates, tok)
        from oc_repl.protocols.camel.protocol import CamelProtocol

        tools = CamelProtocol().request().options["tools"]

        def render(messages: list[dict]) -> str:
            return templates.render(messages, tools, add_generation_prompt=True)

        messages = conversation(tok, render, args.tokens)
        script = {"tokenizer": str(folder / "tokenizer.json"), "replies": [ANSWER], "cycle": True}
        with FakeServer(script).start() as server:
            client = {
                (wire, stream): client_turns(server.url, wire, files, list(messages), tools, args.turns, stream)
                for wire in WIRES
                for stream in (True, False)
            }
        found: dict[str, tuple[float, float]] = {}
        reading = {"text": call_text("shell_exec", {"id": "s1", "command": f"head -c 3000 {ROOT / 'README.md'}"})}
        for wire in WIRES:
            with served_apart({**script, "replies": [reading]}, Path(scratch)) as url:
                found[wire] = whole_turns(url, wire, files, args.turns, Path(scratch))
    over = {key: ours - bare for key, (ours, bare) in client.items()}
    print(f"a camel conversation of {args.tokens}+ tokens, growing by one tool result a turn; {args.turns} turns")
    print("                                      complete() ms   bare ms   overhead ms")
    for (wire, stream), (ours, bare) in client.items():
        print(f"{wire + (', streamed' if stream else ''):36s} {ours:12.2f} {bare:9.2f} {over[wire, stream]:12.2f}")
    print("                                      wall ms    client CPU ms")
    for wire in WIRES:
        print(f"whole turn, {wire + ' (streamed)':26s} {found[wire][0]:10.2f} {found[wire][1]:12.2f}")
    (_, mine), (_, chat) = found["generate"], found["chat"]
    ratio = mine / chat if chat > 0 else float("inf")
    print(f"goal: the generate wire's client CPU per whole turn <= 2x the chat wire's: {ratio:.2f}x")
    rows = [Row("generate wire: client CPU per whole turn", mine, "ms", "the chat wire's", chat, "<= 2x", ratio <= 2)]
    for stream, how in ((True, "streamed"), (False, "not streamed")):
        figure = f"generate wire: complete() over the bare round trip, {how} (render, tokenize, cut)"
        rows.append(Row(figure, over["generate", stream], "ms", "the chat wire's", over["chat", stream]))
    rows.append(Row("generate wire: whole turn, wall", found["generate"][0], "ms", "the chat wire's", found["chat"][0]))
    write(rows, args.rows)


WIRES = ("chat", "generate")
ROOT = Path(__file__).resolve().parent.parent


def call_text(name: str, arguments: dict) -> str:
    from tests.fakemodel import call_text as written

    return written(name, arguments)


if __name__ == "__main__":
    main()
