"""What a terminus reply parses into (keystroke commands, the completion flag, the error and the warnings), and the
pieces both parsers (json_replies.py, xml_replies.py) build their findings with."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from oc_repl.protocols.templates import Templates


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
    # names of the error and the warnings given: what the code decides never depends on their wording
    error_name: str = ""
    warned: list[str] = field(default_factory=list)


@dataclass
class Findings:
    """Warnings collected while parsing one reply, in the order the model will read them."""

    m: Templates
    items: list[str] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    error_name: str = ""  # the latest error rendered: parsing stops at an error, so it is the one reported

    # the template name is positional-only: templates have fields of their own called `name`
    def warn(self, template: str, /, **fields: object) -> None:
        self.items.append(self.m.render(template, **fields))
        self.names.append(template)

    def error(self, template: str, /, **fields: object) -> str:
        self.error_name = template
        return self.m.render(template, **fields)

    def demote(self, error: str) -> None:
        """The latest error, given as a warning instead."""
        self.items.append(error)
        self.names.append(self.error_name)
        self.error_name = ""

    def text(self) -> str:
        return bullets(self.items)

    def result(self, commands: list[Command], complete: bool, **notes: str) -> Parsed:
        return Parsed(commands, complete, "", self.text(), warned=list(self.names), **notes)

    def failure(self, error: str) -> Parsed:
        return Parsed([], False, error, self.text(), error_name=self.error_name, warned=list(self.names))


def bullets(items: list[str]) -> str:
    """Warnings as the feedback shows them: `- w1\\n- w2`, or nothing."""
    return "- " + "\n- ".join(items) if items else ""


def order_warning(body: str, names: tuple[str, ...], pattern: str) -> tuple[str, str] | None:
    """(found, expected) when the first places of `names` in the raw text (found by `pattern`, `{name}` filled in)
    are out of the expected order, each written `a → b → c`."""
    positions = {n: m.start() for n in names if (m := re.search(pattern.replace("{name}", n), body))}
    expected = [n for n in names if n in positions]
    actual = sorted(expected, key=positions.__getitem__)
    if len(positions) < 2 or actual == expected:
        return None
    return " → ".join(actual), " → ".join(expected)


def autocorrected(parsed: Parsed, fix: str, m: Templates) -> Parsed:
    """A reply that parsed only after a repair: the repair leads the warnings so the model learns of it."""
    note = "- " + m.render("feedback.autocorrected", fix=m.render(fix))
    parsed.warning = f"{note}\n{parsed.warning}" if parsed.warning else note
    parsed.warned.insert(0, fix)
    return parsed
