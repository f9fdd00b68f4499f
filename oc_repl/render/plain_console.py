"""The human renderer's console where its stream is not a terminal (a log file, a bench trial's stderr.txt, a pipe).

There rich has nothing to add: no colour, no width to wrap at, no redraw. Its layout still costs 40-200 µs a line
(a rule, a panel), several lines a turn: a large part of a turn whose floor is an HTTP round trip and a `bash -c
true`. So what the renderer draws (Text lines, rules, panels around a command's output) is written as its plain text
at once; anything else goes to rich as before. A user who forces colour (FORCE_COLOR) has a terminal to rich, and
rich's console.
"""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console
from rich.text import Text

RULE_WIDTH = 80


def _plain(value: Any) -> str | None:
    if isinstance(value, Text):
        return value.plain
    panels = sys.modules.get("rich.panel")  # not imported before a panel is drawn (a run's start-up does without)
    if panels is not None and isinstance(value, panels.Panel) and isinstance(value.renderable, Text):
        title = value.title.plain if isinstance(value.title, Text) else str(value.title or "")
        body = "\n".join("  " + line for line in value.renderable.plain.split("\n"))
        return f"{title}\n{body}" if title else body
    return None  # a str is rich markup, and anything else a layout of its own: rich's


class PlainConsole(Console):
    """A console that writes Text, rules and panels of Text as their plain text (see the module doc)."""

    def print(self, *objects: Any, sep: str = " ", end: str = "\n", **options: Any) -> None:
        texts = [_plain(value) for value in objects]
        if any(text is None for text in texts):
            super().print(*objects, sep=sep, end=end, **options)
            return
        self.file.write(sep.join(texts) + end)  # type: ignore[arg-type]  # none is None here
        self.file.flush()

    def rule(self, title: Any = "", **options: Any) -> None:
        label = _plain(title)
        if label is None:  # markup, or no title: rich's
            super().rule(title, **options)
            return
        self.file.write((f" {label} " if label else "").center(RULE_WIDTH, "─") + "\n")
        self.file.flush()
