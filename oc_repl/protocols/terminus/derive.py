"""Derive terminal-bench 0.2.18's wording for every template the terminus protocols use, by running its code.

    python -E -S derive.py WHEEL OUT.json

writes `{"terminus-json": {name: template}, "terminus-xml": {...}}`, the names of `terminus_parse.JSON_SPEC` and
`XML_SPEC`. `protocols sync` runs it in a fresh interpreter (upstream's modules and their stand-ins never enter the
oc-repl process), then checks the names and fields against the specs and the files against the manifests' hashes.

How: each template is obtained by calling upstream's own parser or agent code with sentinel values (letters-only
words like `qzxsent`, distinctive numbers like 23), escaping literal braces in what it returns and turning each
sentinel into its `{field}`. Each template is then proven: filled with a second, different set of values (braces,
newlines, real-looking text), it must equal upstream's output for that set byte for byte, or the derivation fails.
Where upstream words one sentence per case the project renders from one template (a field name, an auto-fix name),
the template is proven for every case. The only words written here are the reply format's own names (fields, tags,
attributes, the five XML entities) and the joiners of the lists the parsers build (`, `, ` → `), which a template
that did not match would expose.

Standard library only, like upstream.py beside it: the interpreter needs nothing but the wheel.
"""

from __future__ import annotations

import html
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__:
    from oc_repl.protocols.terminus.upstream import Scripted, Upstream, UpstreamError, loaded
else:  # run by path in a fresh interpreter, where the sibling module is importable by its own name
    from upstream import Scripted, Upstream, UpstreamError, loaded  # type: ignore[no-redef]

S = "qzxsent"  # letters only: no digit, brace, quote, `<`, `&`, and none of upstream's words
ARROW, COMMA = " → ", ", "  # how the parsers join the names in an order warning and in a list of names
I1, I2 = {"i": 23}, {"i": 41}

Values = dict[str, Any]


class DeriveError(Exception):
    pass


def check(condition: object, what: str) -> None:
    if not condition:
        raise DeriveError(what)


def escape(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def templatize(text: str, values: Values) -> str:
    """`text` with literal braces doubled and each value turned into its `{field}`: longer values first, numbers
    only where they stand whole. Every value must occur."""
    out = escape(text)
    for field, value in sorted(values.items(), key=lambda item: -len(str(item[1]))):
        if isinstance(value, int):
            out, count = re.subn(rf"(?<![0-9.]){value}(?![0-9])", "{" + field + "}", out)
        else:
            count = out.count(escape(value))
            out = out.replace(escape(value), "{" + field + "}")
        check(count, f"{{{field}}} = {value!r} does not occur in {text!r}")
    return out


class Derived(dict):
    """The templates of one protocol, each proven against upstream."""

    def derive(self, name: str, produce: Callable[..., str], *value_sets: Values) -> None:
        """`produce(**values)` runs upstream. Its output for the first value set becomes the template, which must
        then give upstream's output for every value set."""
        value_sets = value_sets or ({},)
        template = templatize(produce(**value_sets[0]), value_sets[0])
        for values in value_sets:
            try:
                got = template.format(**values)
            except (KeyError, IndexError, ValueError) as exc:
                raise DeriveError(f"{name}: {template!r} cannot be filled: {exc!r}") from exc
            want = produce(**values)
            check(got == want, f"{name}: the template does not give upstream's text for {values!r}:\n{got!r}\n{want!r}")
        self.add(name, template)

    def add(self, name: str, template: str) -> None:
        check(self.get(name, template) == template, f"{name}: derived twice, differently")
        self[name] = template


def one(items: list[str]) -> str:
    check(len(items) == 1, f"expected one message, got {items!r}")
    return items[0]


def bullet(warning: str) -> str:
    """The one item of a parser's warning list (`- item`)."""
    check(warning.startswith("- ") and "\n- " not in warning, f"expected one warning, got {warning!r}")
    return warning[2:]


def after(text: str, prefix: str) -> str:
    check(text.startswith(prefix), f"{text!r} does not start with {prefix!r}")
    return text[len(prefix) :]


def collect(method: Callable[..., Any], *args: Any) -> list[str]:
    """The warnings a parser method appends to the list it is given."""
    warnings: list[str] = []
    method(*args, warnings)
    return warnings


# --- the JSON parser ------------------------------------------------------------------------------------------------


def derive_json(out: Derived, up: Upstream) -> None:
    parser, d = up.parser("json"), out.derive
    a, p, c = parser.required_fields  # the reply format's three names, in their expected order
    ok = json.dumps({a: "x", p: "y", c: []})

    def extra(text: str) -> str:
        return one(parser._extract_json_content(text)[1])

    d("json.error.no_json", lambda: parser._try_parse_response(S).error)
    d("json.warn.no_json_object", lambda: extra(S))
    d("json.warn.extra_before", lambda: extra(S + " " + ok))
    d("json.warn.extra_after", lambda: extra(ok + " " + S))

    def invalid(text: str) -> str:  # upstream's error for an object that is not JSON, which no repair may hide
        error = parser.parse_response(text).error
        check(error and error == parser._try_parse_response(text).error, f"invalid JSON: {text!r}")
        return error

    def exc(text: str) -> str:
        try:
            json.loads(text)
        except ValueError as error:
            return str(error)
        raise DeriveError(f"{text!r} is valid JSON")

    shown = {repr(text): text for text in ('{"k": ' + S + "}", '{"other": [1, 2, nope]}')}  # under 200 characters
    sets = [{"exc": exc(text), "content": key} for key, text in shown.items()]
    d("json.error.invalid_json", lambda exc, content: invalid(shown[content]), *sets)
    previewed = {repr(t[:100]): t for t in ('{"k": ' + S + "w" * 300 + "}", '{"v": [' + "1, " * 100 + "nope]}")}
    sets = [{"exc": exc(text), "preview": key} for key, text in previewed.items()]
    d("json.error.invalid_json_preview", lambda exc, preview: invalid(previewed[preview]), *sets)

    def validate(data: object) -> tuple[str, list[str]]:
        warnings: list[str] = []
        return parser._validate_json_structure(data, "{}", warnings), warnings

    d("json.error.not_object", lambda: validate([])[0])
    missing = [{"fields": a + COMMA + p}, {"fields": c}]
    d(
        "json.error.missing_fields",
        lambda fields: validate({k: [] for k in (a, p, c) if k not in fields.split(COMMA)})[0],
        *missing,
    )
    # one sentence per field upstream, one template here: proven for both fields
    not_text = [{"field": a}, {"field": p}]
    d("json.warn.field_not_string", lambda field: one(validate({a: "x", p: "y", c: [], field: 1})[1]), *not_text)
    d("json.error.commands_not_array", lambda: validate({a: "x", p: "y", c: S})[0])
    d("json.warn.task_complete_type", lambda: one(validate({a: "x", p: "y", c: [], "task_complete": 5})[1]))

    def order(found: str, expected: str) -> str:
        return one(
            collect(parser._check_field_order, {}, "{" + COMMA.join(f'"{n}": 1' for n in found.split(ARROW)) + "}")
        )

    d("json.warn.wrong_order", order, *orders(a, p, c))

    def commands(i: int, command: object, followed: bool = False) -> tuple[str, list[str]]:
        fine = {"keystrokes": "x\n", "duration": 1}
        warnings: list[str] = []
        error = parser._parse_commands([fine] * (i - 1) + [command] + [fine] * followed, warnings)[1]
        return error, warnings

    d("json.error.command_not_object", lambda i: commands(i, 7)[0], I1, I2)
    d("json.error.command_missing_keystrokes", lambda i: commands(i, {"duration": 1})[0], I1, I2)
    d("json.error.command_keystrokes_not_string", lambda i: commands(i, {"keystrokes": 5, "duration": 1})[0], I1, I2)
    d("json.warn.command_invalid_duration", lambda i: one(commands(i, {"keystrokes": "x", "duration": S})[1]), I1, I2)
    d("json.warn.command_missing_duration", lambda i: one(commands(i, {"keystrokes": "x\n"})[1]), I1, I2)
    unknown = [{**I1, "fields": S}, {**I2, "fields": "wait"}]
    d(
        "json.warn.command_unknown_fields",
        lambda i, fields: one(commands(i, {"keystrokes": "x\n", "duration": 1, fields: 0})[1]),
        *unknown,
    )
    d(
        "json.warn.command_concatenation",
        lambda i: one(commands(i, {"keystrokes": "x", "duration": 1}, True)[1]),
        I1,
        I2,
    )
    derive_json_repairs(out, up, ok)


def orders(a: str, p: str, c: str) -> list[Values]:
    """Two order warnings' values: all three names out of order, and two of them."""
    return [
        {"found": ARROW.join([p, a, c]), "expected": ARROW.join([a, p, c])},
        {"found": ARROW.join([c, a]), "expected": ARROW.join([a, c])},
    ]


def derive_json_repairs(out: Derived, up: Upstream, ok: str) -> None:
    """The two auto-fixes, told apart by what they do, and the note that names the one that worked."""
    parser = up.parser("json")
    fixes = parser._get_auto_fixes()
    unclosed = "{" + S
    no_json = parser._try_parse_response(unclosed).error
    close = one([name for name, fix in fixes if fix(unclosed, no_json) == (unclosed + "}", True)])
    extract = one([name for name, fix in fixes if fix(S + " {} " + S, "") == ("{}", True)])
    check(len(fixes) == 2, f"expected two repairs, found {[name for name, _ in fixes]}")
    out.add("json.autofix.close_braces", escape(close))
    out.add("json.autofix.extract_object", escape(extract))
    repaired = {close: ok[:-1], extract: "{" + S + "} " + ok}  # each needs that repair, and warns of nothing else
    note = [{"fix": close}, {"fix": extract}]
    out.derive("feedback.autocorrected", lambda fix: bullet(parser.parse_response(repaired[fix]).warning), *note)


# --- the XML parser -------------------------------------------------------------------------------------------------


def derive_xml(out: Derived, up: Upstream) -> None:
    parser, d = up.parser("xml"), out.derive
    a, p, c = parser.required_sections

    def tag(name: str, body: str = "v") -> str:
        return f"<{name}>{body}</{name}>"

    def parsed(body: str) -> Any:
        return parser._try_parse_response(tag("response", body))

    sections = {a: tag(a), p: tag(p), c: tag(c)}
    whole = "".join(sections.values())
    good = tag("response", tag(a) + tag(p) + tag(c, '<keystrokes duration="1">x\n</keystrokes>'))

    def outside(text: str) -> list[str]:
        return collect(parser._check_extra_text, text)

    def found(content: str) -> str:
        return one(collect(parser._extract_sections, content))

    counts = [{"count": 7}, {"count": 12}]
    d("xml.error.no_response", lambda: parser._try_parse_response(S).error)
    d("xml.error.missing_commands", lambda: parsed(tag(a) + tag(p)).error)
    d("xml.warn.extra_before", lambda: one(outside(S + good)))
    d("xml.warn.extra_after", lambda: one(outside(good + S)))
    d("xml.warn.multiple_responses", lambda count: outside(good * count)[1], *counts)
    d("xml.warn.empty_commands", lambda: bullet(parsed(tag(a) + tag(p) + tag(c, "")).warning))
    missing = [{"section": a}, {"section": p}]
    d("xml.warn.missing_section", lambda section: found(whole.replace(sections[section], "")), *missing)
    d("xml.warn.unknown_tag", lambda name: found(whole + tag(name)), {"name": S}, {"name": "notes"})
    d("xml.warn.multiple_commands", lambda count: found(tag(a) + tag(p) + tag(c) * count), *counts)
    d("xml.warn.multiple_section", lambda section: found(whole + tag(section)), {"section": p}, {"section": a})

    def order(found: str, expected: str) -> str:
        return one(collect(parser._check_section_order, "".join(tag(n) for n in found.split(ARROW))))

    d("xml.warn.wrong_order", order, *orders(a, p, c))
    derive_xml_keystrokes(out, up)


def derive_xml_keystrokes(out: Derived, up: Upstream) -> None:
    parser, d = up.parser("xml"), out.derive

    def keys(i: int, attributes: str, text: str = "x\n", followed: bool = False) -> str:
        fine = '<keystrokes duration="1">y\n</keystrokes>'
        content = fine * (i - 1) + f"<keystrokes{attributes}>{text}</keystrokes>" + fine * followed
        return one(collect(parser._parse_xml_commands, content))

    def attributes(i: int, text: str) -> list[str]:
        return collect(parser._check_attribute_issues, text, i)

    durations = [{**I1, "value": S}, {**I2, "value": "soon"}]
    d("xml.warn.command_invalid_duration", lambda i, value: keys(i, f' duration="{value}"'), *durations)
    d("xml.warn.command_missing_duration", lambda i: keys(i, ""), I1, I2)
    d("xml.warn.command_concatenation", lambda i: keys(i, ' duration="1"', "x", True), I1, I2)
    entities = [{"entity": e, "char": html.unescape(e)} for e in ("&lt;", "&gt;", "&amp;", "&quot;", "&apos;")]
    d("xml.warn.entity", lambda entity, char: keys(1, ' duration="1"', entity), *entities)
    d("xml.warn.crlf", lambda: keys(1, ' duration="1"', "x\\r\\n"))
    quoted = [{**I1, "name": S, "value": "qzxval"}, {**I2, "name": "duration", "value": "5"}]
    d("xml.warn.attribute_unquoted", lambda i, name, value: attributes(i, f" {name}={value}")[0], *quoted)
    d("xml.warn.attribute_single_quotes", lambda i, name, value: attributes(i, f" {name}='{value}'")[0], *quoted)
    unknown = [{**I1, "name": S}, {**I2, "name": "wait"}]
    d("xml.warn.attribute_unknown", lambda i, name: one(attributes(i, f' {name}="v"')), *unknown)


# --- the agent: feedback, prompts, the output limit, observations ---------------------------------------------------


def derive_agent(out: Derived, up: Upstream, fmt: str) -> None:
    agent, d = up.agent(fmt), out.derive
    shown = [{"terminal_output": "qzxobs"}, {"terminal_output": "New {output}\n$ "}]
    d("prompt.confirm", agent._get_completion_confirmation_message, *shown)

    def marker(omitted_bytes: int, max_bytes: int) -> str:
        half = max_bytes // 2
        limited = agent._limit_output_length("h" * half + "m" * omitted_bytes + "t" * half, max_bytes)
        return after(limited, "h" * half).removesuffix("t" * half)

    d(
        "output.limit_marker",
        marker,
        {"omitted_bytes": 54321, "max_bytes": 7034},
        {"omitted_bytes": 77, "max_bytes": 10000},
    )
    d(
        "observation.screen",
        lambda screen: up.observe([("qzxall", screen)])[0],
        {"screen": "qzxscreen"},
        {"screen": "$ {x}"},
    )
    new = [{"content": "qzxa qzxnew"}, {"content": "qzxa ls\nfile {x}\n$ "}]
    d("observation.new", lambda content: up.observe([("qzxa", "s"), (content, "s")])[1], *new)

    def feedback(error: str = "", warning: str = "") -> str:
        return up.feedback(fmt, up.result(error, warning))

    d("feedback.error", feedback, {"error": "qzxerr"}, {"error": "E {x}"})
    d(
        "feedback.error_and_warnings",
        feedback,
        {"error": "qzxerr", "warning": "qzxwarn"},
        {"error": "E", "warning": "- a"},
    )
    d("feedback.warnings", lambda warning: feedback(warning=warning), {"warning": "qzxwarn"}, {"warning": "- a\n- b"})

    # The prompts around a feedback block, each proven with blocks upstream made of different parse results.
    def after_reply(result: Any, observation: str = "") -> str:
        return up.after_reply(fmt, "reply", observation, Scripted([result]))

    failed = {feedback(*pair): up.result(*pair) for pair in (("qzxerr", "qzxwarn"), ("E {x}", "- a\n- b"), ("E", ""))}
    d("prompt.parse_error", lambda feedback: after_reply(failed[feedback]), *({"feedback": f} for f in failed))
    warned = {feedback(warning=w): up.result(warning=w) for w in ("qzxwarn", "- a\n- b {x}")}
    observed = [{"feedback": f, "observation": o} for f, o in zip(warned, ("qzxobs", "$ ls\nfile\n"), strict=True)]
    d("prompt.warnings", lambda feedback, observation: after_reply(warned[feedback], observation), *observed)

    def overflow(warning: str) -> str:
        message = up.after_overflow(fmt, "qzxcut", Scripted([up.result(warning=warning)]))[1]
        check(message is not None, "overflow: upstream sent no message")
        return str(message)

    d("overflow.error", lambda: overflow(""))
    suffix = [{"warning": "qzxwarn"}, {"warning": "- a\n- b {x}"}]
    d("overflow.warnings_suffix", lambda warning: after(overflow(warning), out["overflow.error"]), *suffix)


def derive(wheel: Path) -> dict[str, dict[str, str]]:
    """Every template of both terminus protocols, as upstream words it: {protocol: {name: template}}."""
    texts = {"json": Derived(), "xml": Derived()}
    with loaded(wheel) as up:
        derive_json(texts["json"], up)
        derive_xml(texts["xml"], up)
        for fmt, out in texts.items():
            derive_agent(out, up, fmt)
    return {f"terminus-{fmt}": dict(sorted(out.items())) for fmt, out in texts.items()}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: derive.py WHEEL OUT.json", file=sys.stderr)
        return 2
    try:
        derived = derive(Path(argv[0]))
    except (DeriveError, UpstreamError) as exc:
        print(f"derive: {exc}", file=sys.stderr)
        return 1
    Path(argv[1]).write_text(json.dumps(derived, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
