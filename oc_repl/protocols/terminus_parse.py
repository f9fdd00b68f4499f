"""terminus (terminal-bench Terminus-2) replies and feedback: pure functions, no I/O.

The model answers in JSON or XML; `parse_json` / `parse_xml` turn a reply into keystroke commands, a completion
flag, an error (nothing runs) and warnings, with exactly the strings terminal-bench 0.2.18 produces, because the
model reads them back as feedback. The parsers live in `terminus_json` and `terminus_xml`; this module holds what
they share and the messages built around them.

Observation flow, as terminal-bench sends it (so a protocol driving these helpers reproduces it exactly):
- the executor's output is `limit_output(capture)`;
- `feedback_confirm` uses it as is, while `feedback_warnings` and `feedback_observation` pass it through
  `limit_output` a second time. The marker added by the first pass makes a cut text longer than the limit, so
  the second pass cuts it again and the count it reports is the size of the first marker, not of the omitted
  output. That is what the evaluated models saw, so it is kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

Format = Literal["json", "xml"]


@dataclass
class Command:
    keystrokes: str
    duration: float


@dataclass
class Parsed:
    commands: list[Command]
    task_complete: bool
    error: str
    warning: str
    analysis: str = ""
    plan: str = ""


@dataclass
class Findings:
    """Warnings collected while parsing one reply, in the order the model will read them."""

    items: list[str] = field(default_factory=list)

    def add(self, text: str) -> None:
        self.items.append(text)

    def text(self) -> str:
        return bullets(self.items)

    def result(self, commands: list[Command], complete: bool, error: str = "", **notes: str) -> Parsed:
        return Parsed(commands, complete, error, self.text(), **notes)

    def failure(self, error: str) -> Parsed:
        return Parsed([], False, error, self.text())


def bullets(items: list[str]) -> str:
    """Warnings as the feedback shows them: `- w1\\n- w2`, or nothing."""
    return "- " + "\n- ".join(items) if items else ""


def order_warning(body: str, names: tuple[str, ...], pattern: str, noun: str) -> str:
    """Warn when the first places of `names` in the raw text (found by `pattern`, `{name}` filled in) are out of
    the expected order."""
    positions = {n: m.start() for n in names if (m := re.search(pattern.replace("{name}", n), body))}
    expected = [n for n in names if n in positions]
    actual = sorted(expected, key=positions.__getitem__)
    if len(positions) < 2 or actual == expected:
        return ""
    return f"{noun} appear in wrong order. Found: {' → '.join(actual)}, expected: {' → '.join(expected)}"


def autocorrected(parsed: Parsed, fix: str) -> Parsed:
    """A reply that parsed only after a repair: the repair leads the warnings so the model learns of it."""
    note = f"- AUTO-CORRECTED: {fix} - please fix this in future responses"
    parsed.warning = f"{note}\n{parsed.warning}" if parsed.warning else note
    return parsed


def concatenation_warning(number: int) -> str:
    return (
        f"Command {number} should end with newline when followed by another command. "
        "Otherwise the two commands will be concatenated together on the same line."
    )


def parse_json(response: str) -> Parsed:
    """Parse a terminus JSON reply."""
    # Imported here: the parser modules build on the types above, so they cannot be imported at the top.
    from oc_repl.protocols.terminus_json import parse

    return parse(response)


def parse_xml(response: str) -> Parsed:
    """Parse a terminus XML reply."""
    from oc_repl.protocols.terminus_xml import parse

    return parse(response)


def strip_think(text: str) -> str:
    """Drop a leading `<think>…</think>` block before parsing.

    terminal-bench does not do this. Qwen3 writes an empty think block even in no-think mode, and the parsers
    would report it as extra text before the JSON object (or a stray tag before `<response>`), turning every
    well-formed reply into a warning the model never deserved.
    """
    from oc_repl.client.wire import split_think

    thought, rest = split_think(text)
    # an unclosed block may still hold the reply: the parsers then see everything, as upstream's would
    return text if thought is None or "</think>" not in text else rest


def limit_output(text: str, limit: int = 10000) -> str:
    """Keep the first and last `limit // 2` UTF-8 bytes of a long observation, with a marker between them.

    A character cut at either edge is dropped whole and counted as omitted, as terminal-bench does.
    """
    # A lone surrogate (undecodable bytes kept by the sandbox) must not crash the loop; it counts as one byte.
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return text
    half = limit // 2
    head = data[:half].decode("utf-8", "ignore")
    tail = data[-half:].decode("utf-8", "ignore")
    omitted = len(data) - len(head.encode("utf-8")) - len(tail.encode("utf-8"))
    return f"{head}\n[... output limited to {limit} bytes; {omitted} interior bytes omitted ...]\n{tail}"


def feedback_observation(obs: str) -> str:
    """The next user message when the reply had no warnings: the observation, limited (again)."""
    return limit_output(obs)


def feedback_warnings(warning: str, obs: str) -> str:
    """The next user message when the reply ran but had warnings (`warning` is the `- w1\\n- w2` list)."""
    return f"Previous response had warnings:\nWARNINGS: {warning}\n\n{limit_output(obs)}"


def feedback_parse_error(error: str, warning: str, fmt: Format) -> str:
    """The next user message when the reply could not be parsed and nothing ran."""
    details = f"ERROR: {error}" + (f"\nWARNINGS: {warning}" if warning else "")
    kind = {"json": "JSON response", "xml": "response"}[fmt]
    return f"Previous response had parsing errors:\n{details}\n\nPlease fix these issues and provide a proper {kind}."


def feedback_confirm(obs: str, fmt: Format) -> str:
    """Asked after the first reply that claims completion; a second claim in a row ends the run."""
    again = {"json": '"task_complete": true in your JSON response', "xml": "<task_complete>true</task_complete>"}[fmt]
    return (
        f"Current terminal state:\n{obs}\n\n"
        "Do you really want to mark the task as complete? Your solution will then be graded, and you will not be "
        f"able to change anything afterwards. If you are sure, include {again} again."
    )


# terminal-bench names 4096 tokens whatever the real output limit of the model or server is; kept as it is,
# because the figure is part of what the model is told.
def feedback_length_overflow(warning: str = "") -> str:
    """The next user message when the reply hit the output token limit; none of its actions ran.

    `warning` is what the parser found in the cut reply; terminal-bench appends it when there is any.
    """
    message = (
        "ERROR!! None of the actions you asked for were carried out: your reply went over the maximum output "
        "length of 4096 tokens. Every reply must stay under 4096 tokens. Send the request again, split into "
        "pieces that are each shorter than 4096 tokens."
    )
    if warning:
        message += f"\n\nParser warnings from your truncated response:\n{warning}"
    return message


def salvage_xml(truncated: str) -> str | None:
    """The complete first `<response>` of an XML reply cut by the token limit, if it parses cleanly.

    terminal-bench runs such a salvaged reply instead of reporting the overflow (XML only).
    """
    commands_end = truncated.find("</commands>")
    if commands_end == -1:
        return None
    end = truncated.find("</response>", commands_end)
    if end == -1:
        return None
    clean = truncated[: end + len("</response>")]
    parsed = parse_xml(clean)
    lowered = parsed.warning.lower()
    several_blocks = "only issue one" in lowered and "block at a time" in lowered
    return None if parsed.error or several_blocks else clean
