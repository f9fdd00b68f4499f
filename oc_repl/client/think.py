"""Think blocks: a leading `<think>...</think>` is reasoning, never content, whether whole or streamed in pieces."""

from __future__ import annotations

from collections.abc import Callable

from oc_repl.calls import THINK_CLOSE, THINK_OPEN

Delta = Callable[[str, str], None]


def held_suffix(text: str, tag: str) -> int:
    """Length of the longest suffix of text that could still grow into tag."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0


class _Trimmed:
    """Emits a channel with leading and trailing whitespace dropped, whatever the chunking."""

    def __init__(self, emit: Delta, kind: str) -> None:
        self._emit, self._kind = emit, kind
        self._started = False
        self._pending = ""

    def add(self, text: str) -> None:
        if not self._started:
            text = text.lstrip()
            if not text:
                return
            self._started = True
        body = text.rstrip()
        if body:
            self._emit(self._kind, self._pending + body)
            self._pending = text[len(body) :]
        else:
            self._pending += text


class ThinkRouter:
    """Routes streamed text so a leading think block reaches the reasoning channel, never the content.

    Streamed deltas concatenate to what build_reply returns when no markup is salvaged.
    """

    def __init__(self, emit: Delta) -> None:
        self._emit = emit
        self._reasoning = _Trimmed(emit, "reasoning")
        self._state = "start"  # start -> (think ->) after -> content
        self._buf = ""

    def reasoning(self, text: str) -> None:
        self._reasoning.add(text)

    def content(self, text: str) -> None:
        if self._state == "content":
            self._emit("content", text)
            return
        self._buf += text
        while True:
            if self._state == "start":
                s = self._buf = self._buf.lstrip()
                if s.startswith(THINK_OPEN):
                    self._state, self._buf = "think", s[len(THINK_OPEN) :]
                elif s.startswith(THINK_CLOSE):
                    self._state, self._buf = "after", s[len(THINK_CLOSE) :]
                elif not s or THINK_OPEN.startswith(s) or THINK_CLOSE.startswith(s):
                    return  # too short to tell yet
                else:
                    self._state = "after"
            elif self._state == "think":
                end = self._buf.find(THINK_CLOSE)
                if end >= 0:
                    self._reasoning.add(self._buf[:end])
                    self._state, self._buf = "after", self._buf[end + len(THINK_CLOSE) :]
                    continue
                keep = held_suffix(self._buf, THINK_CLOSE)
                self._reasoning.add(self._buf[: len(self._buf) - keep])
                self._buf = self._buf[len(self._buf) - keep :]
                return
            else:  # after
                s = self._buf.lstrip()
                self._buf = ""
                if s:
                    self._state = "content"
                    self._emit("content", s)
                return

    def flush(self) -> None:
        if self._state == "think":
            self._reasoning.add(self._buf)
        elif self._buf.strip():
            self._emit("content", self._buf.lstrip())
        self._buf = ""
