"""What the shell's approval prompt shows: the action whole, on one line, every hidden character in visible notation
(in reverse video), and the same in the edit buffer. What a person approves, or edits, is exactly what runs."""

from __future__ import annotations

from typing import Any

from prompt_toolkit.layout.processors import Processor, Transformation, TransformationInput

from oc_repl.render.sanitize import marked, notation, one_line

HIDDEN_STYLE = "reverse"


def question(what: str) -> Any:
    """The line that asks: `approve? ` and the action as it would run."""
    from rich.text import Text

    return Text("approve? ", style="bold yellow") + marked(what, style="bold")


class ShowHidden(Processor):
    """The edit buffer drawn with every hidden character in notation, and a `\\n` at the end of each line but the
    last: a newline in an edited command is as plain as in the question."""

    def apply_transformation(self, ti: TransformationInput) -> Transformation:
        fragments: list[tuple[str, str]] = []
        to_display = [0]  # display position of each source position
        for style, text, *_ in ti.fragments:
            for char in text:
                shown = one_line(char)
                fragments.append((f"{style} {HIDDEN_STYLE}", notation(char)) if shown != char else (style, char))
                to_display.append(to_display[-1] + len(shown))
        if ti.lineno < ti.document.line_count - 1:
            fragments.append((HIDDEN_STYLE, "\\n"))

        def source_to_display(position: int) -> int:
            return to_display[min(position, len(to_display) - 1)]

        def display_to_source(position: int) -> int:
            return next((i for i, d in enumerate(to_display) if d >= position), len(to_display) - 1)

        return Transformation(fragments, source_to_display, display_to_source)
