"""The terminus XML reply parser, behaving exactly like terminal-bench 0.2.18's (the model reads its messages).

A reply is `<response><analysis>…</analysis><plan>…</plan><commands><keystrokes duration="0.1">ls
</keystrokes>…</commands><task_complete>true</task_complete></response>`. It is read with regular expressions,
not an XML parser: keystrokes are taken verbatim (no entity decoding, no stripping), a missing `</response>` is
tolerated, and lists built from sets keep set order as upstream does. Every sentence comes from the protocol's
templates (`terminus_parse.XML_SPEC`).

Upstream also declares one auto-fix (append `</response>`), but it fires only on an error text its parser never
produces, so it never runs and is not reproduced.
"""

from __future__ import annotations

import re

from oc_repl.protocols.templates import Templates
from oc_repl.protocols.terminus.reply import Command, Findings, Parsed, order_warning

REQUIRED = ("analysis", "plan", "commands")
SECTIONS = (*REQUIRED, "task_complete")
OPEN, CLOSE = "<response>", "</response>"

ENTITIES = (("&lt;", "<"), ("&gt;", ">"), ("&amp;", "&"), ("&quot;", '"'), ("&apos;", "'"))

_COMPLETE = re.compile(r"<task_complete>\s*true\s*</task_complete>", re.IGNORECASE)
_DURATION = re.compile(r"""duration\s*=\s*["']([^"']*)["']""")
_UNQUOTED = re.compile(r"""(\w+)\s*=\s*([^"'\s>]+)""")
_SINGLE_QUOTED = re.compile(r"(\w+)\s*=\s*'([^']*)'")
_ATTRIBUTE = re.compile(r"(\w+)\s*=")


def parse(response: str, m: Templates) -> Parsed:
    found = Findings(m)
    _check_outside_text(response, found)
    body = _body(response)
    if not body:
        return found.failure(found.error("xml.error.no_response"))
    complete = _COMPLETE.search(body) is not None
    sections = _sections(body, found)
    notes = {"analysis": sections.get("analysis", ""), "plan": sections.get("plan", "")}
    listing = sections.get("commands", "")
    if listing:
        return found.result(_commands(listing, found), complete, **notes)
    if "commands" in sections:
        if not complete:
            found.warn("xml.warn.empty_commands")
        return found.result([], complete, **notes)
    if complete:
        return found.result([], True, **notes)
    return found.failure(found.error("xml.error.missing_commands"))


def _check_outside_text(response: str, found: Findings) -> None:
    start = response.find(OPEN)
    if start == -1:
        return
    if response[:start].strip():
        found.warn("xml.warn.extra_before")
    # The first closing tag anywhere, even one before the opening tag, as upstream looks for it.
    end = response.find(CLOSE)
    if end == -1 or not response[end + len(CLOSE) :].strip():
        return
    found.warn("xml.warn.extra_after")
    blocks = response.count(OPEN)
    if blocks > 1:
        found.warn("xml.warn.multiple_responses", count=blocks)


def _body(response: str) -> str:
    """The stripped text of the first `<response>` block, up to the end of the reply if it is never closed."""
    start = response.find(OPEN)
    if start == -1:
        return ""
    end = response.find(CLOSE, start)
    return response[start + len(OPEN) : end if end != -1 else len(response)].strip()


def _sections(body: str, found: Findings) -> dict[str, str]:
    sections = {}
    for name in SECTIONS:
        inner = _first_block(body, f"<{name}>", f"</{name}>")
        if inner is not None:
            sections[name] = inner.strip()
        elif re.search(f"<{name}\\s*/>", body):
            sections[name] = ""
    for name in set(REQUIRED) - set(sections):
        found.warn("xml.warn.missing_section", section=name)
    for tag in set(_top_level_tags(body)) - set(SECTIONS):
        found.warn("xml.warn.unknown_tag", name=tag)
    for name in SECTIONS:
        count = len(re.findall(f"<{name}(?:\\s|>|/>)", body))
        if count > 1 and name == "commands":
            found.warn("xml.warn.multiple_commands", count=count)
        elif count > 1:
            found.warn("xml.warn.multiple_section", section=name)
    _check_order(body, found)
    return sections


def _top_level_tags(body: str) -> list[str]:
    """Names of the tags directly inside `<response>`, tracking depth by opening and closing tags only."""
    tags, depth, i = [], 0, 0
    while i < len(body):
        if body[i] != "<":
            i += 1
            continue
        end = body.find(">", i)
        if end == -1:
            break
        inner = body[i + 1 : end]
        i = end + 1
        if inner.startswith(("!", "?")):
            continue
        if inner.startswith("/"):
            depth -= 1
            continue
        # Upstream splits on whitespace only when there is a space, and crashes on a blank tag such as `< >`;
        # a blank name keeps it going, reported like `<>`.
        name = (inner.split() or [""])[0] if " " in inner else inner
        if depth == 0:
            tags.append(name.removesuffix("/"))
        if not inner.endswith("/"):
            depth += 1
    return tags


def _check_order(body: str, found: Findings) -> None:
    if order := order_warning(body, REQUIRED, "<{name}(?:\\s|>|/>)"):
        found.warn("xml.warn.wrong_order", found=order[0], expected=order[1])


def _commands(listing: str, found: Findings) -> list[Command]:
    matches = _keystrokes(listing)
    commands = []
    for number, (attributes, keystrokes) in enumerate(matches, 1):
        _check_attributes(attributes, number, found)
        duration = _duration(attributes, number, found)
        if number < len(matches) and not keystrokes.endswith("\n"):
            found.warn("xml.warn.command_concatenation", i=number)
        commands.append(Command(keystrokes, duration))
    for entity, char in ENTITIES:
        if entity in listing:
            found.warn("xml.warn.entity", entity=entity, char=char)
    if "\\r\\n" in listing:  # the four characters a model writes when it escapes a line ending by hand
        found.warn("xml.warn.crlf")
    return commands


# Upstream reads sections and keystrokes with lazy regular expressions (`<x>(.*?)</x>`, DOTALL). Their results are
# kept exactly, but found by plain scans: those expressions take quadratic time on a reply full of opening tags with
# no closing one (a model stuck repeating a tag), ten thousand of which took seconds.


def _first_block(text: str, opening: str, closing: str) -> str | None:
    """What `re.search(opening + "(.*?)" + closing, text, re.DOTALL)` captures: the text between the first opening
    tag and the first closing tag after it (if that closing tag is missing, no later opening tag has one either)."""
    start = text.find(opening)
    if start == -1:
        return None
    end = text.find(closing, start + len(opening))
    return None if end == -1 else text[start + len(opening) : end]


def _keystrokes(listing: str) -> list[tuple[str, str]]:
    """What `re.findall(r"<keystrokes([^>]*)>(.*?)</keystrokes>", listing, re.DOTALL)` finds: (attributes, text)."""
    found, position = [], 0
    while (start := listing.find("<keystrokes", position)) != -1:
        attributes_end = listing.find(">", start)
        if attributes_end == -1:
            break
        end = listing.find("</keystrokes>", attributes_end + 1)
        if end == -1:
            break
        found.append((listing[start + len("<keystrokes") : attributes_end], listing[attributes_end + 1 : end]))
        position = end + len("</keystrokes>")
    return found


def _duration(attributes: str, number: int, found: Findings) -> float:
    match = _DURATION.search(attributes)
    if not match:
        found.warn("xml.warn.command_missing_duration", i=number)
        return 1.0
    try:
        return float(match.group(1))
    except ValueError:
        found.warn("xml.warn.command_invalid_duration", i=number, value=match.group(1))
        return 1.0


def _check_attributes(attributes: str, number: int, found: Findings) -> None:
    for name, value in _UNQUOTED.findall(attributes):
        found.warn("xml.warn.attribute_unquoted", i=number, name=name, value=value)
    for name, value in _SINGLE_QUOTED.findall(attributes):
        found.warn("xml.warn.attribute_single_quotes", i=number, name=name, value=value)
    for name in _ATTRIBUTE.findall(attributes):
        if name != "duration":
            found.warn("xml.warn.attribute_unknown", i=number, name=name)
