"""Reading one reply off the wire: server-sent events for streams, one JSON body otherwise.

Bytes are read as UTF-8 with invalid sequences replaced by U+FFFD ("\\ufffd"), whatever charset the server
declares: JSON on the wire is UTF-8 (RFC 8259), and a stray byte from a misbehaving server then shows up as a visible
replacement character in the reply instead of ending the run. SSE lines are split on raw bytes before decoding,
which is safe because no UTF-8 sequence contains a CR or LF byte.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from oc_repl.calls import TooDeep, bounded_json
from oc_repl.client.failures import Incomplete, Malformed, NoStream, Reported, Stalled, readable
from oc_repl.client.think import Delta, ThinkRouter
from oc_repl.client.wire import StreamAccumulator, build_reply, read_finish_reason
from oc_repl.types import Reply

MAX_BODY = 64 * 2**20  # a 4096-token reply is some 20 KB, streamed perhaps 1 MB; more is a server gone wrong


class Events:
    """Server-sent events, as much of the format as chat streams use: `data:` lines make an event's payload and a
    blank line ends it; comments (`: ping`) and the other fields carry nothing a chat stream needs."""

    def __init__(self) -> None:
        self._tail: list[bytes] = []  # the start of a line still arriving, kept in pieces: no quadratic joins
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[str]:
        """The payloads of the events this chunk completes."""
        if b"\n" not in chunk and b"\r" not in chunk:
            self._tail.append(chunk)
            return []
        lines = b"".join([*self._tail, chunk]).splitlines(keepends=True)
        # a last line without LF is incomplete, or ends in a CR that the next chunk may turn into CRLF
        self._tail = [lines.pop()] if lines and not lines[-1].endswith(b"\n") else []
        return [payload for line in lines if (payload := self._line(line)) is not None]

    def end(self) -> list[str]:
        """What the stream's end completes: lenient, a last event without its blank line still counts."""
        found = self.feed(b"\n") if self._tail else []
        last = self._line(b"")
        return found if last is None else [*found, last]

    def _line(self, raw: bytes) -> str | None:
        line = raw.rstrip(b"\r\n")
        if not line:
            payload = "\n".join(self._data)
            self._data = []
            return payload if payload.strip() else None  # an event without data carries nothing to read
        if line.startswith(b"data:") or line == b"data":
            value = line[5:]
            self._data.append((value[1:] if value.startswith(b" ") else value).decode("utf-8", "replace"))
        return None


class StreamReader:
    """Folds one streamed reply while it arrives and sends its text on to `on_delta`.

    There is no watchdog thread: the read timeout (idle_timeout) ends a silent stream, and the loop itself, which
    gets control after every network read, ends one that keeps sending keepalive comments or empty deltas but
    nothing meaningful for idle_timeout seconds.
    """

    def __init__(self, on_delta: Delta | None, idle_timeout: float, started: float) -> None:
        self.acc = StreamAccumulator()
        self.router = ThinkRouter(on_delta) if on_delta else None
        self.chunks: list[dict[str, Any]] = []
        self.ttft: float | None = None
        self.done = False  # `data: [DONE]` seen: whatever follows is the response's tail, not the reply
        self._events, self._idle, self._started = Events(), idle_timeout, started
        self._progress, self._size = time.monotonic(), 0

    def read(self, pieces: Iterable[bytes]) -> None:
        for piece in pieces:
            self._size += len(piece)
            if self._size > MAX_BODY:
                raise Malformed(f"the stream grew past {MAX_BODY // 2**20} MiB")
            for payload in self._events.feed(piece):
                self._take(payload)
            if time.monotonic() - self._progress > self._idle:
                if self.done:
                    return  # the reply is whole; the response just does not end
                raise Stalled
        for payload in self._events.end():
            self._take(payload)

    def _take(self, payload: str) -> None:
        if self.done:
            return
        if payload.startswith("[DONE]"):
            self.done = True
            return
        chunk = _json(payload, "a chunk")
        if not isinstance(chunk, dict):
            raise Incomplete(f"a chunk is not a JSON object: {payload[:80]!r}")
        if chunk.get("error"):
            raise Reported(chunk["error"])
        self.chunks.append(chunk)
        acc = self.acc
        finish, usage = acc.finish_reason, acc.usage
        text, thought, moved = readable(acc.add, chunk)
        if text or thought or moved or acc.finish_reason is not finish or acc.usage is not usage:
            self._progress = time.monotonic()  # meaningful progress, not a keepalive or an empty delta
        if self.ttft is None and (text or thought or moved):
            self.ttft = self._progress - self._started
        if self.router is not None:
            if thought:
                self.router.reasoning(thought)
            if text:
                self.router.content(text)

    def reply(self, max_tokens: int | None, tools: bool) -> Reply:
        acc = self.acc
        if acc.finish_reason is None:
            if not self.chunks and tools:
                raise NoStream
            raise Incomplete("the stream ended before the reply was complete")
        if self.router is not None:
            self.router.flush()
        message = acc.message()
        reply = readable(build_reply, message, acc.finish_reason, acc.usage, max_tokens)
        reply.raw = {"chunks": self.chunks, "message": message, "finish_reason": acc.finish_reason, "usage": acc.usage}
        reply.ttft_s, reply.duration_s = self.ttft, time.monotonic() - self._started
        return reply


def read_payloads(
    pieces: Iterable[bytes], take: Callable[[str], None], idle_timeout: float, done: Callable[[], bool]
) -> None:
    """A text wire's stream, its events' payloads handed to `take`: bounded in size, and ended (Stalled) when
    idle_timeout seconds pass without an event while bytes still come; a text wire sends no keepalives."""
    events, size, progress = Events(), 0, time.monotonic()
    for piece in pieces:
        size += len(piece)
        if size > MAX_BODY:
            raise Malformed(f"the stream grew past {MAX_BODY // 2**20} MiB")
        payloads = events.feed(piece)
        for payload in payloads:
            take(payload)
        if payloads:
            progress = time.monotonic()
        elif time.monotonic() - progress > idle_timeout:
            if done():
                return
            raise Stalled
    for payload in events.end():
        take(payload)


def plain_reply(raw: Any, max_tokens: int | None, started: float) -> Reply:
    """The reply in an unstreamed answer."""
    choices = raw.get("choices") if isinstance(raw, dict) else None
    if isinstance(raw, dict) and raw.get("error") and not choices:
        raise Reported(raw["error"])
    if choices is not None and not isinstance(choices, list):
        raise Malformed(f"`choices` is {type(choices).__name__}, not a list")
    if not choices or not isinstance(choices[0], dict):
        raise Incomplete("the server answered without a choice")
    choice = choices[0]
    finish = readable(read_finish_reason, choice.get("finish_reason"))
    reply = readable(build_reply, choice.get("message") or {}, finish, raw.get("usage"), max_tokens)
    reply.raw = raw
    reply.duration_s = time.monotonic() - started
    return reply


def read_json(pieces: Iterable[bytes], started: float, timeout: float, what: str) -> Any:
    """A whole JSON body, bounded in size and in time: a body still arriving `timeout` seconds after `started`
    (time.monotonic()) is given up on, so a server that trickles bytes cannot hold an attempt open for ever."""
    parts, size = [], 0
    for piece in pieces:
        parts.append(piece)
        size += len(piece)
        if size > MAX_BODY:
            raise Malformed(f"{what} is larger than {MAX_BODY // 2**20} MiB")
        if time.monotonic() - started > timeout:
            raise Incomplete(f"{what} was still arriving {timeout:g}s after the request")
    return _json(b"".join(parts).decode("utf-8-sig", "replace"), what)


def _json(text: str, what: str) -> Any:
    try:
        return bounded_json(text)
    except TooDeep as exc:
        raise Malformed(f"{what} is {exc}") from exc
    except ValueError as exc:
        raise Incomplete(f"{what} is not JSON ({exc}): {text[:80]!r}") from exc
