"""How much of a terminal's output the client emulates (PtyTerminal keeps its screen with pyte, on our side).

pyte costs from about a microsecond a character (plain text) to milliseconds for one sequence (a screen clear, a reset,
an alignment test), so a model printing megabytes of escape sequences could keep the client busy for minutes. Each
observation gets a CPU budget: output arriving past it is not drawn as it comes; only its tail is kept, and drawn when
the model next looks, after a line that says how much was skipped (its last lines always, whatever they cost). Ordinary
output never comes near the budget, and its screens are exactly what they were.
"""

from __future__ import annotations

import time
from collections.abc import Callable

CHUNK = 256  # characters drawn between two looks at the clock: one chunk of the costliest sequences is well under 1 s
BUDGET = 2.0  # CPU seconds of drawing per observation, as output arrives
TAIL = 8192  # characters kept of what arrives past the budget: more than a 160x40 screen of text
TAIL_BUDGET = 1.0  # CPU seconds for drawing that tail
LAST = 512  # characters of the output's very end drawn whatever they cost: how it ended (a prompt, a last line)


def skipped_line(count: int) -> str:
    return f"\r\n[... {count} characters of output skipped ...]\r\n"


class BoundedFeed:
    """Feeds text to a terminal emulator within a CPU budget per observation (see the module doc). Not thread-safe:
    its owner calls it under its own lock."""

    def __init__(self, feed: Callable[[str], None]) -> None:
        self._feed = feed
        self.spent = 0.0  # CPU seconds drawn in this observation
        self.skipped = 0  # characters past the budget that did not fit in the tail
        self._tail = ""

    def __call__(self, text: str) -> None:
        if self.spent < BUDGET:
            text = text[self._draw(text, BUDGET) :]
        if text:
            kept = self._tail + text
            self.skipped += max(0, len(kept) - TAIL)
            self._tail = kept[-TAIL:]

    @property
    def behind(self) -> bool:
        """The budget is spent: the screen is not what the output made it, until `catch_up`."""
        return self.spent >= BUDGET

    def catch_up(self) -> None:
        """A new observation: draw what was kept past the budget, then start the budget over."""
        tail, skipped = self._tail, self.skipped
        if skipped:  # the kept part starts where the cut fell, perhaps inside a sequence: drawn from a line's start
            start = tail.find("\n") + 1
            tail, skipped = tail[start:], skipped + start
            self._feed(skipped_line(skipped))
        self.spent = 0.0
        drawn = self._draw(tail, TAIL_BUDGET)
        if drawn < len(tail):  # out of time before the end, which the model must see: its last lines are drawn anyway
            end = tail[max(drawn, len(tail) - LAST) :]
            if len(end) < len(tail) - drawn and "\n" in end:  # from a line's start, as the tail is
                end = end[end.find("\n") + 1 :]
            self._feed(skipped_line(len(tail) - drawn - len(end)))
            self._feed(end)
        self.spent, self.skipped, self._tail = 0.0, 0, ""

    def _draw(self, text: str, budget: float) -> int:
        """Feed `text` a chunk at a time while `budget` lasts; how many characters went in."""
        done = 0
        while done < len(text) and self.spent < budget:
            started = time.thread_time()
            self._feed(text[done : done + CHUNK])
            self.spent += time.thread_time() - started
            done += CHUNK
        return min(done, len(text))
