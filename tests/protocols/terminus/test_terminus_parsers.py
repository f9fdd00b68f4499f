"""terminus replies: what the parsers decide (the error and the warnings by template name, the commands, durations
and completion), how the texts are rendered through the protocol's templates, the feedback prompts, the output limit,
and the built-in assets. The comparison with terminal-bench's own code is in test_terminus_upstream.py."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from oc_repl.protocols import data_dir
from oc_repl.protocols.templates import Templates, parse
from oc_repl.protocols.terminus.parse import (
    SPECS,
    Command,
    Parsed,
    bullets,
    parse_json,
    parse_xml,
    salvage_xml,
)

# The built-in wording, read from the protocol folders (not through the user's directories).
BUILTIN = {
    fmt: Templates(parse((data_dir(f"terminus-{fmt}") / "messages.toml").read_bytes(), SPECS[fmt], fmt))
    for fmt in ("json", "xml")
}
MJ, MX = BUILTIN["json"], BUILTIN["xml"]
OK = '{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls\\n", "duration": 0.1}]}'
ORDER = {"found": "plan → analysis → commands", "expected": "analysis → plan → commands"}

Said = tuple[str, dict[str, Any]]  # a template name and its fields


def said(template: str, /, **fields: Any) -> Said:
    return template, fields


def reply(commands: object, **extra: object) -> str:
    return json.dumps({"analysis": "a", "plan": "p", "commands": commands, **extra})


def xml(commands: str, extra: str = "") -> str:
    return f"<response>\n<analysis>a</analysis>\n<plan>p</plan>\n<commands>{commands}</commands>{extra}\n</response>"


def decode_error(text: str) -> str:
    try:
        json.loads(text)
    except ValueError as exc:
        return str(exc)
    raise AssertionError(f"{text!r} is valid JSON")


def render(m: Templates, name: str, fields: dict[str, Any]) -> str:
    if name.startswith("json.autofix."):  # a repair is named inside the note that leads the warnings
        return m.render("feedback.autocorrected", fix=m.render(name))
    return m.render(name, **fields)


def assert_said(parsed: Parsed, m: Templates, error: Said | None, warnings: list[Said]) -> None:
    """The parser's verdict by name, and its text as the templates render it."""
    assert parsed.error_name == (error[0] if error else "")
    assert parsed.error == (render(m, *error) if error else "")
    assert parsed.warned == [name for name, _ in warnings]
    assert parsed.warning == bullets([render(m, name, fields) for name, fields in warnings])


# --- JSON --------------------------------------------------------------------------------------------------------

MISSING_DURATION = said("json.warn.command_missing_duration", i=1)
BAD_JSON = '{"analysis": "a", "plan": "p", "commands": [],}'
JSON_CASES: list[tuple[str, Said | None, list[Said]]] = [
    (OK, None, []),
    ("Sure!\n" + OK, None, [said("json.warn.extra_before")]),
    (OK + "\nDone.", None, [said("json.warn.extra_after")]),
    ("x " + OK + " y", None, [said("json.warn.extra_before"), said("json.warn.extra_after")]),
    ("no object here", said("json.error.no_json"), [said("json.warn.no_json_object")]),
    (BAD_JSON, said("json.error.invalid_json", exc=decode_error(BAD_JSON), content=repr(BAD_JSON)), []),
    ('{"plan": "p"}', said("json.error.missing_fields", fields="analysis, commands"), []),
    ('{"analysis": "a", "plan": "p", "commands": "ls"}', said("json.error.commands_not_array"), []),
    (
        '{"analysis": 1, "plan": ["x"], "commands": []}',
        None,
        [said("json.warn.field_not_string", field="analysis"), said("json.warn.field_not_string", field="plan")],
    ),
    ('{"plan": "p", "analysis": "a", "commands": []}', None, [said("json.warn.wrong_order", **ORDER)]),
    # the order is read from the raw text: a nested "commands" key counts
    (
        '{"notes": {"commands": 1}, "analysis": "a", "plan": "p", "commands": []}',
        None,
        [said("json.warn.wrong_order", found="commands → analysis → plan", expected="analysis → plan → commands")],
    ),
    (reply([], task_complete=1), None, [said("json.warn.task_complete_type")]),
    (reply(["ls"]), said("json.error.command_not_object", i=1), []),
    (reply([{"duration": 1}]), said("json.error.command_missing_keystrokes", i=1), []),
    (reply([{"keystrokes": 5, "duration": 1}]), said("json.error.command_keystrokes_not_string", i=1), []),
    (reply([{"keystrokes": "ls\n"}]), None, [MISSING_DURATION]),
    (reply([{"keystrokes": "ls\n", "duration": "5"}]), None, [said("json.warn.command_invalid_duration", i=1)]),
    (
        reply([{"keystrokes": "ls\n", "duration": 1, "wait": True}]),
        None,
        [said("json.warn.command_unknown_fields", i=1, fields="wait")],
    ),
    (
        reply([{"keystrokes": "ls", "duration": 1}, {"keystrokes": "pwd", "duration": 1}]),
        None,
        [said("json.warn.command_concatenation", i=1)],
    ),
    # warnings of earlier commands stay when a later one is broken
    (
        reply([{"keystrokes": "ls"}, 7]),
        said("json.error.command_not_object", i=2),
        [MISSING_DURATION, said("json.warn.command_concatenation", i=1)],
    ),
    # once the model says it is done, a broken command is only a warning, and nothing runs
    (
        reply([{"keystrokes": "ls\n", "duration": 1}, {"keystrokes": 5}], task_complete=True),
        None,
        [said("json.error.command_keystrokes_not_string", i=2)],
    ),
    ('{"analysis": "a", "plan": "p", "commands": []', None, [said("json.autofix.close_braces")]),
    (
        '{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls\\n", "duration": 1}]',
        None,
        [said("json.autofix.close_braces")],
    ),
    ('{oops} {"analysis": "a", "plan": "p", "commands": []}', None, [said("json.autofix.extract_object")]),
    (
        '{oops} {"plan": "p", "analysis": "a", "commands": []}',
        None,
        [said("json.autofix.extract_object"), said("json.warn.wrong_order", **ORDER)],
    ),
    # no repair works: the first error stands
    (
        '{"plan": "p"} trailing',
        said("json.error.missing_fields", fields="analysis, commands"),
        [said("json.warn.extra_after")],
    ),
]


@pytest.mark.parametrize(("text", "error", "warnings"), JSON_CASES)
def test_json_verdicts(text: str, error: Said | None, warnings: list[Said]) -> None:
    parsed = parse_json(text, MJ)
    assert_said(parsed, MJ, error, warnings)
    if error:
        assert parsed.commands == []


def test_json_commands_and_defaults() -> None:
    parsed = parse_json(reply([{"keystrokes": "ls\n"}, {"keystrokes": "", "duration": 70}, {"keystrokes": "q"}]), MJ)
    assert parsed.commands == [Command("ls\n", 1.0), Command("", 70.0), Command("q", 1.0)]
    assert (parsed.analysis, parsed.plan, parsed.task_complete) == ("a", "p", False)
    # durations are not clamped, and true passes as a number
    assert parse_json(reply([{"keystrokes": "x", "duration": True}]), MJ).commands == [Command("x", 1.0)]
    assert parse_json(reply([{"keystrokes": "x", "duration": -3}]), MJ).commands == [Command("x", -3.0)]
    complete = parse_json(reply([{"keystrokes": "ls\n", "duration": 1}, {"keystrokes": 5}], task_complete=True), MJ)
    assert (complete.commands, complete.task_complete) == ([], True)


@pytest.mark.parametrize(
    ("flag", "complete"),
    [(True, True), (False, False), ("true", True), ("TRUE", True), ("1", True), ("Yes", True), ("no", False)]
    + [(" true", False), (1, True), (0, False), (None, False)],
)
def test_json_task_complete_coercion(flag: object, complete: bool) -> None:
    assert parse_json(reply([], task_complete=flag), MJ).task_complete is complete
    assert parse_json(reply([]), MJ).task_complete is False


def test_json_unknown_fields_are_all_named_in_set_order() -> None:
    parsed = parse_json(reply([{"keystrokes": "x", "duration": 1, "b": 1, "a": 2}]), MJ)
    assert parsed.warned == ["json.warn.command_unknown_fields"]
    # set order, as upstream: either order may come out, so the rendering is checked for both
    assert parsed.warning in {bullets([MJ.render(parsed.warned[0], i=1, fields=f)]) for f in ("a, b", "b, a")}


def test_json_long_invalid_content_is_previewed() -> None:
    text = '{"analysis": "' + "x" * 300 + '", "plan": nope, "commands": []}'
    preview = said("json.error.invalid_json_preview", exc=decode_error(text), preview=repr(text[:100]))
    assert_said(parse_json(text, MJ), MJ, preview, [])


def test_json_brace_scan_skips_strings_and_escapes() -> None:
    parsed = parse_json('Note: "{" \\{ ' + reply([{"keystrokes": "echo '}{'\n", "duration": 0.1}]), MJ)
    assert parsed.commands == [Command("echo '}{'\n", 0.1)]
    assert parsed.warned == ["json.warn.extra_before"]


def test_json_huge_numbers_do_not_crash() -> None:
    assert parse_json(reply([{"keystrokes": "x", "duration": 10**400}]), MJ).commands == [Command("x", float("inf"))]


@pytest.mark.skipif(not hasattr(sys, "get_int_max_str_digits"), reason="no integer digit limit")
def test_json_too_many_digits_do_not_crash() -> None:
    parsed = parse_json('{"analysis": "a", "plan": "p", "commands": [], "pad": ' + "9" * 5000 + "}", MJ)
    assert parsed.error_name == "json.error.invalid_json_preview" and "4300" in parsed.error


# --- XML ---------------------------------------------------------------------------------------------------------

LS = '<keystrokes duration="0.1">ls\n</keystrokes>'
XML_OK = xml(LS)
MISSING_COMMANDS = said("xml.warn.missing_section", section="commands")

XML_CASES: list[tuple[str, Said | None, list[Said]]] = [
    (XML_OK, None, []),
    ("just text", said("xml.error.no_response"), []),
    ("<response>  </response>", said("xml.error.no_response"), []),
    ("ok\n" + XML_OK + "\nbye", None, [said("xml.warn.extra_before"), said("xml.warn.extra_after")]),
    (XML_OK.removesuffix("\n</response>"), None, []),  # an unclosed <response> is tolerated silently
    (
        XML_OK + "\n" + xml('<keystrokes duration="1">rm -rf x\n</keystrokes>'),
        None,
        [said("xml.warn.extra_after"), said("xml.warn.multiple_responses", count=2)],
    ),
    (
        "<response><analysis>a</analysis><plan>p</plan></response>",
        said("xml.error.missing_commands"),
        [MISSING_COMMANDS],
    ),
    (
        "<response><analysis>a</analysis><plan>p</plan><task_complete>true</task_complete></response>",
        None,
        [MISSING_COMMANDS],
    ),
    (xml(""), None, [said("xml.warn.empty_commands")]),
    (xml("", "<task_complete>true</task_complete>"), None, []),
    ("<response><analysis>a</analysis><plan>p</plan><commands/></response>", None, [said("xml.warn.empty_commands")]),
    (xml('<keystrokes duration="1"/>'), None, []),  # self-closing keystrokes: no command
    (xml("<keystrokes>ls\n</keystrokes>"), None, [said("xml.warn.command_missing_duration", i=1)]),
    (
        xml('<keystrokes duration="soon">ls\n</keystrokes>'),
        None,
        [said("xml.warn.command_invalid_duration", i=1, value="soon")],
    ),
    (
        xml("<keystrokes duration=5>ls\n</keystrokes>"),
        None,
        [
            said("xml.warn.attribute_unquoted", i=1, name="duration", value="5"),
            said("xml.warn.command_missing_duration", i=1),
        ],
    ),
    (
        xml("<keystrokes duration='2'>ls\n</keystrokes>"),
        None,
        [said("xml.warn.attribute_single_quotes", i=1, name="duration", value="2")],
    ),
    (
        xml('<keystrokes wait="1" duration="1">ls\n</keystrokes>'),
        None,
        [said("xml.warn.attribute_unknown", i=1, name="wait")],
    ),
    (
        xml('<keystrokes duration="1">ls</keystrokes><keystrokes duration="1">pwd\n</keystrokes>'),
        None,
        [said("xml.warn.command_concatenation", i=1)],
    ),
    (
        xml('<keystrokes duration="1">a &lt; b\\r\\n</keystrokes>'),
        None,
        [said("xml.warn.entity", entity="&lt;", char="<"), said("xml.warn.crlf")],
    ),
    (xml(LS, "<notes>x</notes>"), None, [said("xml.warn.unknown_tag", name="notes")]),
    (xml(LS) + "<commands>" + LS + "</commands>", None, [said("xml.warn.extra_after")]),
    (xml(LS, "<commands>" + LS + "</commands>"), None, [said("xml.warn.multiple_commands", count=2)]),
    (xml(LS, "<plan>q</plan>"), None, [said("xml.warn.multiple_section", section="plan")]),  # order: first places
    (
        f"<response><plan>p</plan><analysis>a</analysis><commands>{LS}</commands></response>",
        None,
        [said("xml.warn.wrong_order", **ORDER)],
    ),
    (
        f"<response><plan>p</plan><commands>{LS}</commands></response>",
        None,
        [said("xml.warn.missing_section", section="analysis")],
    ),
]


@pytest.mark.parametrize(("text", "error", "warnings"), XML_CASES)
def test_xml_verdicts(text: str, error: Said | None, warnings: list[Said]) -> None:
    assert_said(parse_xml(text, MX), MX, error, warnings)


def test_xml_keystrokes_verbatim_and_durations() -> None:
    keys = '\n<keystrokes duration="0.5">  echo &amp; "x" \n</keystrokes>\n<keystrokes duration="2">C-c</keystrokes>'
    parsed = parse_xml(xml(keys), MX)
    assert parsed.commands == [Command('  echo &amp; "x" \n', 0.5), Command("C-c", 2.0)]
    assert (parsed.analysis, parsed.plan) == ("a", "p")
    # the keystrokes pattern is not XML-aware: `/>` is part of the attribute text, as upstream reads it
    parsed = parse_xml(xml('<keystrokes duration="1"/>\n<keystrokes duration="2">after\n</keystrokes>'), MX)
    assert parsed.commands == [Command('\n<keystrokes duration="2">after\n', 1.0)]
    # text without any keystrokes element runs nothing, silently; only the first block runs
    assert parse_xml(xml("echo hi"), MX) == Parsed([], False, "", "", "a", "p")
    assert parse_xml(XML_OK + xml('<keystrokes duration="1">rm\n</keystrokes>'), MX).commands == [Command("ls\n", 0.1)]


@pytest.mark.parametrize(
    ("tag", "complete"),
    [("<task_complete>true</task_complete>", True), ("<task_complete>\n  TRUE \n</task_complete>", True)]
    + [(tag, False) for tag in ("<task_complete>false</task_complete>", "<task_complete>yes</task_complete>")]
    + [(tag, False) for tag in ("<task_complete/>", "<task_complete></task_complete>", "")],
)
def test_xml_task_complete(tag: str, complete: bool) -> None:
    assert parse_xml(xml(LS, tag), MX).task_complete is complete


def test_xml_several_unknown_tags_and_missing_sections_are_all_named() -> None:
    parsed = parse_xml(f"<response><x/><y>1</y><commands>{LS}</commands></response>", MX)
    names = [*["xml.warn.missing_section"] * 2, *["xml.warn.unknown_tag"] * 2]
    assert parsed.warned == names  # each list in set order, as upstream
    assert set(parsed.warning.split("\n")) == {
        *(f"- {MX.render('xml.warn.missing_section', section=s)}" for s in ("analysis", "plan")),
        *(f"- {MX.render('xml.warn.unknown_tag', name=n)}" for n in ("x", "y")),
    }


def test_xml_blank_tag_does_not_crash() -> None:
    # upstream raises IndexError on `< >`; here it reads as a tag with an empty name, like `<>`
    assert_said(parse_xml(xml(LS, "< >"), MX), MX, None, [said("xml.warn.unknown_tag", name="")])


def test_salvage_xml() -> None:
    assert salvage_xml(XML_OK + "\n<response><analysis>cut", MX) == XML_OK
    assert salvage_xml("<response><analysis>a</analysis><plan>p</plan><commands>" + LS, MX) is None
    assert salvage_xml(xml(LS, "<commands></commands>") + "x", MX) is None  # several command blocks, by name
    # by_text tells several blocks apart by upstream's English wording, which the built-in texts do not have
    assert salvage_xml(xml(LS, "<commands></commands>") + "x", MX, by_text=True) is not None
