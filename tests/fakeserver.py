"""A loopback OpenAI-compatible chat server that answers like sglang, vLLM, llama-cpp-python or ollama; with a
tokenizer in the script it also speaks the text routes, sglang's `/generate` and `/v1/completions` (fakenative.py).

A script lists what the model generates; the server applies its flavour's parser rules to that text
and sends the result in the wire shapes of reference/wire-formats.md, streamed or not:

    {"flavour": "sglang" | "vllm" | "noparser" | "llamacpp-python" | "ollama",
     "reasoning_parser": False, "reasoning_field": "reasoning_content", "model": "qwen3-8b-oc",
     "cycle": False, "chunk_chars": 5, "strict": False, "replies": [REPLY, ...]}

REPLY = {"text": model text} plus any of: max_tokens_cut, finish_reason, http_error + body (+ headers),
stream_error, stall, keepalive / empty_deltas (a stall of that many seconds that still sends `: ping`
comments / chunks with empty deltas; unstreamed, keepalive sends spaces before the body), disconnect,
reset (the socket is reset mid-stream), drop_stream (200, then the socket closes with no data), usage
(fields to override), omit_usage, raw_stream / raw_body (chunks / a body sent exactly as given; bytes go
out byte for byte), delay. The script's `models_body` replaces the answer to GET /models (its first `models_busy` are
answered 503; `model_info` and `props`
answer sglang's GET /get_model_info and llama.cpp's GET /props); with `require_key` every request without that API
key is answered 401 (the Authorization header is never recorded). Each recorded request carries `received` (the
server's time.perf_counter() on arrival) and `client_port`.
Run `python -m tests.fakeserver SCRIPT.json [--requests-log F] [--port-file F]` to serve until killed.

Many conversations at once (bench trials, each its own process): `"routes": [ROUTE, ...]` picks the replies of a
request by what it holds, statelessly, so concurrent conversations never consume each other's replies.
ROUTE = {"match": text in the request's first user message (a task's name or instruction), "tools": true | false
(only requests that do / do not carry tools, i.e. camel vs terminus), "replies": [REPLY, ...]} serves
`replies[turn]`, turn being how many replies the model already gave in the request's history (its assistant
messages, or in camel's training history the `<tool_response>` blocks after the task: one call a reply). With
`"variants": [{"replies": [...], "marker": TEXT}, ...]` instead of "replies", the conversations that start on the
route take the variants in turn (round robin), and a later request continues the variant whose marker (text its
replies make appear in the history, e.g. an `echo`) it holds; the first variant needs no marker. A request no
route matches falls back to "replies".
"""

from __future__ import annotations

import argparse
import contextlib
import json
import secrets
import signal
import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests import fakenative
from tests.fakemodel import call_text, calls_text, full_message, generate, stream_deltas  # noqa: F401 (for tests)

# --- HTTP ----------------------------------------------------------------------------------------------


def _error_body(status: int, message: str) -> dict[str, Any]:
    kind = "InternalServerError" if status >= 500 else "BadRequestError"
    return {"object": "error", "message": message, "type": kind, "param": None, "code": status}


def _strict_failure(flavour: str, body: dict[str, Any]) -> str | None:
    """What a strict server of this flavour rejects with HTTP 500."""
    for msg in body.get("messages") or []:
        for call in msg.get("tool_calls") or []:
            args = (call.get("function") or {}).get("arguments")
            try:
                json.loads(args)
            except (TypeError, ValueError):
                return f"tool call arguments are not valid JSON: {args!r}"
        if flavour == "llamacpp-python" and msg.get("tool_calls") and msg.get("content") is None:
            return "assistant content must be a string"
    if flavour == "llamacpp-python" and body.get("tool_choice") == "required":
        return "tool_choice 'required' is not supported"
    return None


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence the stderr access log
        pass

    def setup(self) -> None:
        super().setup()
        # small SSE writes must leave at once, as from a real server, not wait on delayed ACKs
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.fake._connections.add(self.connection)

    def finish(self) -> None:
        self.server.fake._connections.discard(self.connection)
        super().finish()

    def _json(self, status: int, payload: Any, cut: bool = False, headers: dict[str, str] | None = None) -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if cut:  # the headers promise the whole body, half of it arrives
            self.close_connection = True
            data = data[: len(data) // 2]
        self.wfile.write(data)

    def _trickled_json(self, payload: Any, seconds: float) -> None:
        """200 at once, then a space every 0.1 s (JSON allows leading whitespace) before the body: bytes keep
        coming, so no read timeout fires, yet the answer takes `seconds` to arrive."""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        end = time.monotonic() + seconds
        try:
            while time.monotonic() < end:
                self._chunk(b" ")
                if self.server.fake._stopping.wait(0.1):
                    return
            self._chunk(json.dumps(payload).encode())
            self._chunk(b"")
        except OSError:  # the client gave up and closed its end
            self.close_connection = True

    def _authorized(self) -> bool:
        """With `require_key` in the script, only that key is served (the header itself is never recorded)."""
        wanted = self.server.fake.script.get("require_key")
        return wanted is None or self.headers.get("Authorization") == f"Bearer {wanted}"

    def do_GET(self) -> None:
        fake = self.server.fake
        fake._record("GET", self.path, None, self.headers, time.perf_counter(), self.client_address[1])
        if not self._authorized():
            return self._json(401, _error_body(401, "wrong API key"))
        if self.path.rstrip("/").endswith("/models"):
            if sum(r["method"] == "GET" and r["path"].rstrip("/").endswith("/models") for r in fake.requests) <= int(
                fake.script.get("models_busy", 0)
            ):
                return self._json(503, _error_body(503, "the server is busy"))
            model = fake.script.get("model", "qwen3-8b-oc")
            listed = {"object": "list", "data": [{"id": model, "object": "model", "owned_by": "fake"}]}
            self._json(200, fake.script.get("models_body", listed))
        elif self.path == "/get_model_info" and "model_info" in fake.script:  # sglang's
            self._json(200, fake.script["model_info"])
        elif self.path == "/props" and "props" in fake.script:  # llama.cpp's
            self._json(200, fake.script["props"])
        elif self.path in fake.script.get("gets", {}):  # any other server's own routes, as it answers them
            self._json(200, fake.script["gets"][self.path])
        else:
            self._json(404, _error_body(404, f"no route {self.path}"))

    def do_POST(self) -> None:
        fake, received = self.server.fake, time.perf_counter()
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = None
        text_route = fakenative.route(self.path)  # /generate, /v1/completions: a prompt the client rendered
        prompt_ids, prompt_text = fakenative.prompt_of(fake.script, text_route, body) if text_route else (None, None)
        extra = {"prompt_ids": prompt_ids, "prompt_text": prompt_text} if text_route else {}
        fake._record("POST", self.path, body, self.headers, received, self.client_address[1], **extra)
        if not self._authorized():
            return self._json(401, _error_body(401, "wrong API key"))
        if text_route:
            reply = fake._next_reply(body) if isinstance(body, dict) else None
            return fakenative.serve(self, text_route, body, reply, prompt_ids)
        if not self.path.rstrip("/").endswith("/chat/completions"):
            return self._json(404, _error_body(404, f"no route {self.path}"))
        if not isinstance(body, dict):
            return self._json(400, _error_body(400, "request body is not JSON"))
        reply, script = fake._next_reply(body), fake.script
        if reply is None:
            return self._json(500, _error_body(500, "script exhausted"))
        flavour, stream = script.get("flavour", "sglang"), bool(body.get("stream"))
        if fake._stopping.wait(reply.get("delay", 0)):
            return None
        if "http_error" in reply:
            status = reply["http_error"]
            body = reply.get("body") or _error_body(status, "Internal server error")
            return self._json(status, body, headers=reply.get("headers"))
        if "raw_body" in reply and not stream:
            return self._json(200, reply["raw_body"])
        if script.get("strict") and (why := _strict_failure(flavour, body)):
            return self._json(500, _error_body(500, why))
        if "stream_error" in reply and not stream:
            return self._json(500, _error_body(500, reply["stream_error"]))
        out = generate(script, reply, stream)
        usage = None if reply.get("omit_usage") else _usage(body, out, reply)
        envelope = {"id": "chatcmpl-" + secrets.token_hex(6), "created": int(time.time()), "model": body.get("model")}
        if not stream:
            choice = {"index": 0, "message": full_message(script, out), "finish_reason": out["finish"]}
            payload = {**envelope, "object": "chat.completion", "choices": [choice], "usage": usage}
            if reply.get("keepalive"):
                return self._trickled_json(payload, reply["keepalive"])
            return self._json(200, payload, cut=bool(reply.get("disconnect")))
        self._stream(script, reply, body, out, usage, envelope)
        return None

    def _stream(self, script: dict, reply: dict, body: dict, out: dict, usage: dict | None, envelope: dict) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        stopping = self.server.fake._stopping
        if script.get("strict") and script.get("flavour") == "llamacpp-python" and body.get("tool_choice") == "auto":
            self.close_connection = True  # its known failure: 200, then the connection closes with no data
            return self._chunk(b"")
        if reply.get("drop_stream"):  # 200 and SSE headers, then the socket closes: no data, no terminating chunk
            self.close_connection = True
            return None
        events: list[Any] = []
        for d in stream_deltas(script, out):
            choice = {"index": 0, "delta": d["delta"], "logprobs": None, "finish_reason": d.get("finish_reason")}
            events.append({**envelope, "object": "chat.completion.chunk", "choices": [choice]})
        if "stream_error" in reply:
            error = {"object": "error", "message": reply["stream_error"], "type": "BadRequestError", "param": None}
            events = events[:1] + [{"error": {**error, "code": 400}}]
        elif (body.get("stream_options") or {}).get("include_usage") and usage is not None:
            events.append({**envelope, "object": "chat.completion.chunk", "choices": [], "usage": usage})
        if "raw_stream" in reply:  # malformed shapes go out untouched
            events = list(reply["raw_stream"])
        events.append("[DONE]")
        try:
            for n, event in enumerate(events):
                data = event if isinstance(event, (str, bytes)) else json.dumps(event)
                self._chunk(data if isinstance(data, bytes) else f"data: {data}\n\n".encode())  # bytes: raw SSE
                if n == 0 and reply.get("stall") and stopping.wait(reply["stall"]):
                    return
                if n == 0 and self._trickle(reply, envelope):
                    return
                if reply.get("disconnect") and n == min(3, len(events) - 2):
                    self.close_connection = True  # no terminating chunk: the body is cut mid-way
                    return
                if reply.get("reset") and n == min(3, len(events) - 2):
                    self.close_connection = True  # a reset, not a close: the client reads ECONNRESET
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    return
            self._chunk(b"")
        except OSError:  # the client gave up (idle timeout) and closed its end
            self.close_connection = True

    def _trickle(self, reply: dict, envelope: dict) -> bool:
        """A stall that keeps bytes flowing, so a read timeout never fires. True when the server is stopping."""
        choice = {"index": 0, "delta": {}, "logprobs": None, "finish_reason": None}
        empty = json.dumps({**envelope, "object": "chat.completion.chunk", "choices": [choice]})
        for key, data in (("keepalive", b": ping\n\n"), ("empty_deltas", f"data: {empty}\n\n".encode())):
            end = time.monotonic() + reply.get(key, 0)
            while time.monotonic() < end:
                self._chunk(data)
                if self.server.fake._stopping.wait(0.1):
                    return True
        return False

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")


def _usage(body: dict[str, Any], out: dict[str, Any], reply: dict[str, Any]) -> dict[str, Any]:
    prompt = 10 + sum(len(json.dumps(m.get("content") or "")) for m in body.get("messages") or []) // 4
    completion = max(1, len(out["generated"]) // 4)
    cap = body.get("max_tokens") or body.get("max_completion_tokens")
    if reply.get("max_tokens_cut") is not None and cap:
        completion = cap
    usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    return {**usage, **(reply.get("usage") or {})}


def _text(content: Any) -> str:
    if isinstance(content, list):  # content parts
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")


def conversation_turn(body: dict[str, Any]) -> int:
    """How many replies the model already gave in this conversation, read off the request's history."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    said = sum(1 for m in messages if m.get("role") == "assistant")
    results = sum(_text(m.get("content")).count("<tool_response>") for m in messages if m.get("role") == "user")
    return said + results


def _route_matches(route: dict[str, Any], body: dict[str, Any]) -> bool:
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    first_user = next((_text(m.get("content")) for m in messages if m.get("role") == "user"), "")
    if "tools" in route and bool(body.get("tools")) != bool(route["tools"]):
        return False
    return str(route.get("match", "")) in first_user


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients dropping connections (timeouts, closed streams) are part of the tests


class FakeServer:
    """`with FakeServer(script) as srv:` then point a client at `srv.url`; `srv.requests` records traffic."""

    def __init__(self, script: dict[str, Any], requests_log: Path | None = None, port: int = 0) -> None:
        self.script = script
        self.requests: list[dict[str, Any]] = []
        self.requests_log = Path(requests_log) if requests_log else None
        self._port = port
        self._lock = threading.Lock()
        self._served = 0
        self._route_starts: dict[int, int] = {}
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._httpd: _HTTPServer | None = None

    def start(self) -> FakeServer:
        if self._httpd is None:
            self._httpd = _HTTPServer(("127.0.0.1", self._port), _Handler)
            self._httpd.fake = self
            threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    @property
    def port(self) -> int:
        assert self._httpd is not None, "start() first"
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        for conn in list(self._connections):  # wake handler threads parked on keep-alive reads
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        self._httpd = None

    def __enter__(self) -> FakeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _next_reply(self, body: dict[str, Any]) -> dict[str, Any] | None:
        for number, route in enumerate(self.script.get("routes") or []):
            if _route_matches(route, body):
                return self._route_reply(number, route, body)
        replies = self.script.get("replies") or []
        with self._lock:
            n = self._served
            self._served += 1
        if n < len(replies):
            return replies[n]
        return replies[-1] if replies and self.script.get("cycle") else None

    def _route_reply(self, number: int, route: dict[str, Any], body: dict[str, Any]) -> dict[str, Any] | None:
        turn = conversation_turn(body)
        variants = route.get("variants") or [{"replies": route.get("replies") or []}]
        if turn == 0:
            with self._lock:
                started = self._route_starts.get(number, 0)
                self._route_starts[number] = started + 1
            variant = variants[started % len(variants)]
        else:
            history = json.dumps(body.get("messages"), ensure_ascii=False)
            marked = [v for v in variants if v.get("marker") and v["marker"] in history]
            variant = marked[0] if marked else variants[0]
        replies = variant["replies"]
        if turn < len(replies):
            return replies[turn]
        return replies[-1] if replies and self.script.get("cycle") else None

    def _record(
        self, method: str, path: str, body: Any, headers: Any, received: float, port: int, **extra: Any
    ) -> None:
        entry = {
            **extra,
            "method": method,
            "path": path,
            "body": body,
            "received": received,
            "client_port": port,  # one port for several requests: the client reused its connection
            "headers": {k.lower(): v for k, v in headers.items() if k.lower() != "authorization"},
        }
        with self._lock:
            self.requests.append(entry)
            if self.requests_log is not None:
                with self.requests_log.open("a", encoding="utf-8") as f:
                    f.write(json.dumps(entry) + "\n")

    def chat_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["path"].rstrip("/").endswith("/chat/completions")]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.fakeserver", description="Serve a fake model script.")
    parser.add_argument("script", type=Path)
    parser.add_argument("--requests-log", type=Path)
    parser.add_argument("--port-file", type=Path)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    server = FakeServer(json.loads(args.script.read_text()), args.requests_log, args.port).start()
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    if args.port_file:
        tmp = args.port_file.with_name(args.port_file.name + ".tmp")
        tmp.write_text(str(server.port))
        tmp.replace(args.port_file)  # readers never see a half-written port
    print(server.url, flush=True)
    try:
        done.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
