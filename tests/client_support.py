"""What the ChatClient tests share: a scripted loopback server with a client pointed at it, the tools and
messages they send, and the chunk shape of a stream."""

from __future__ import annotations

from pathlib import Path

import pytest

from oc_repl.client.chat import ChatClient
from tests.fakeserver import FakeServer

ROOT = Path(__file__).resolve().parent.parent
USER = [{"role": "user", "content": "list the files"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "shell_exec",
            "description": "Run a command",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
]
LS = {"id": "s1", "command": "ls -la", "block": True, "timeout": None}
LONG = {"command": "for i in $(seq 1 100); do echo line $i; done > out.txt && wc -l out.txt"}
OVERFLOW_BODIES = {
    "vllm": {
        "object": "error",
        "message": "This model's maximum context length is 32768 tokens. However, you requested 40000 tokens "
        "(39000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    },
    "sglang": {
        "object": "error",
        "message": "The input (40000 tokens) is longer than the model's context length (32768 tokens).",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    },
    "llamacpp": {
        "error": {
            "code": 400,
            "message": "the request exceeds the available context size, try increasing it",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": 40000,
            "n_ctx": 32768,
        }
    },
}

both = pytest.mark.parametrize("stream", [True, False], ids=["stream", "plain"])


def _streamed_call_parts(reply) -> list[dict]:
    """Every tool-call delta exactly as the server streamed it."""
    return [p for c in reply.raw["chunks"] for ch in c["choices"] for p in ch["delta"].get("tool_calls") or []]


class Run:
    """One scripted server and a client pointed at it; deltas and retries recorded."""

    def __init__(self, script: dict, stream: bool = True, **kw) -> None:
        self.server = FakeServer(script).start()
        self.retries: list[tuple[str, int]] = []
        self.deltas: list[tuple[str, str]] = []
        kw.setdefault("backoff", 0.01)
        self.client = ChatClient(
            self.server.url, "sk-test", stream=stream, on_retry=lambda m, n: self.retries.append((m, n)), **kw
        )

    def complete(self, options: dict | None = None, messages: list | None = None):
        opts = {"tools": TOOLS} if options is None else options
        return self.client.complete(messages or USER, opts, on_delta=lambda k, t: self.deltas.append((k, t)))

    def text(self, kind: str) -> str:
        return "".join(t for k, t in self.deltas if k == kind)

    def chat_bodies(self) -> list[dict]:
        return [r["body"] for r in self.server.chat_requests()]


@pytest.fixture(name="run")
def run_fixture():
    made: list[Run] = []

    def make(script: dict, stream: bool = True, **kw) -> Run:
        made.append(Run(script, stream, **kw))
        return made[-1]

    yield make
    for r in made:
        r.server.stop()


def sse_chunk(delta: dict | None = None, finish: str | None = None) -> dict:
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}]}
