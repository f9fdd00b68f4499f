"""The model server as a bench sees it through its trials' events: requests in flight, the last error, tokens/s,
and how many trials may start at once.

Each trial's events (its `--json` stream, or its transcript for `bench watch`) go through `Health.event`. A request
is in flight from its turn's start until the reply's first item (or the turn's end). When the server answers 429 or
503, stalls past the idle timeout, takes a trial's time (server_timeout), or replies (every attempt of a request
counted) slow down to several times their usual wait, fewer trials start (half as many, at least one, at most
once a cool-down); once it has been well for a while, one more at a time again, up to what was asked. Each change
is said (`notes`).
"""

from __future__ import annotations

import re
import statistics
import time
from collections import deque
from typing import Any

WINDOW = 60.0  # seconds of finished turns the token rate is measured over
COOL_DOWN = 30.0  # seconds between two changes of the limit
SLOW_FACTOR, SLOW_FLOOR = 4.0, 20.0  # a reply slow when its wait is this many times the usual one, and this long
BASELINE = 5  # replies whose waits make the usual one
_OVERLOADED = re.compile(r"\bHTTP (429|503)\b")
_SILENT = re.compile(r"\bsent nothing (useful )?for\b")  # client/failures.py: a stall or an idle timeout


class Health:
    def __init__(self, jobs: int, adapt: bool = True) -> None:
        self.jobs = self.limit = jobs
        self.adapt = adapt
        self.in_flight: dict[Any, float] = {}
        self.last_error = ""
        self.errors = 0
        self.tokens: deque[tuple[float, int]] = deque()
        self.waits: list[float] = []
        self.notes: list[str] = []  # every change of the limit, in words
        self._changed = self._troubled = 0.0

    def event(self, key: Any, event: dict[str, Any], now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        kind = event.get("type")
        if kind == "turn.started":
            self.in_flight[key] = now
        elif kind in ("item.started", "item.completed", "turn.failed", "thread.completed"):
            self.in_flight.pop(key, None)
            if event.get("status") == "server_timeout":
                self._back_off("a trial's time went to waiting on the server", now)
        elif kind == "turn.completed":
            self.in_flight.pop(key, None)
            usage = event.get("usage") or {}
            out = usage.get("output_tokens") if isinstance(usage, dict) else None
            if isinstance(out, int) and out > 0:
                self.tokens.append((now, out))
            # the wait for the reply to start, over every attempt of the request (a retried stall counts whole)
            first, request, answered = (event.get(k) or 0 for k in ("ttft_s", "request_s", "duration_s"))
            if all(isinstance(v, int | float) for v in (first, request, answered)):
                self._waited(float(first or answered) + max(0.0, float(request) - float(answered)), now)
        elif kind == "error" and str(event.get("kind")).startswith("server"):
            self.last_error = str(event.get("message") or "")[:200]
            self.errors += 1
            found = _OVERLOADED.search(self.last_error)
            if found:
                self._back_off(f"the server answered HTTP {found.group(1)}", now)
            elif _SILENT.search(self.last_error):
                self._back_off("the server sent nothing for its idle timeout (a stall, then a retry)", now)

    def ended(self, key: Any) -> None:
        self.in_flight.pop(key, None)

    def _waited(self, wait: float, now: float) -> None:
        if len(self.waits) < BASELINE:
            self.waits.append(wait)
            return
        usual = statistics.median(self.waits)
        if wait > SLOW_FLOOR and wait > SLOW_FACTOR * usual:
            self._back_off(f"a reply took {wait:.0f} s to start (usually {usual:.1f} s)", now)

    def _back_off(self, why: str, now: float) -> None:
        self._troubled = now
        if not self.adapt or self.limit == 1 or now - self._changed < COOL_DOWN and self._changed:
            return
        before, self.limit = self.limit, max(1, self.limit // 2)
        self._changed = now
        self.notes.append(f"{why}: at most {self.limit} trials at once (was {before})")

    def allowed(self, now: float | None = None) -> int:
        """How many trials may run now."""
        now = time.monotonic() if now is None else now
        if self.limit < self.jobs and now - self._troubled > 2 * COOL_DOWN and now - self._changed > COOL_DOWN:
            before, self.limit = self.limit, self.limit + 1
            self._changed = now
            self.notes.append(f"the server is answering well again: at most {self.limit} trials at once (was {before})")
        return self.limit

    def tokens_per_s(self, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        while self.tokens and now - self.tokens[0][0] > WINDOW:
            self.tokens.popleft()
        if not self.tokens:
            return 0.0
        span = max(now - self.tokens[0][0], 1.0)
        return sum(n for _, n in self.tokens) / span

    def line(self, now: float | None = None) -> str:
        """The server's health in one line."""
        said = f"server: {len(self.in_flight)} requests in flight · {self.tokens_per_s(now):.0f} tokens/s"
        if self.limit < self.jobs:
            said += f" · {self.limit} of {self.jobs} trials at once"
        return said + (f" · last error: {self.last_error}" if self.last_error else "")
