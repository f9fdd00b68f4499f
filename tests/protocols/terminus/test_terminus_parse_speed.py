"""terminus's parsers on hostile replies: deep nesting and runs of open tags parse at once, and the plain scans
that replace upstream's expressions find what they find."""

from __future__ import annotations

import pytest


@pytest.mark.timeout(30)  # before the fix, ten thousand open tags took tens of seconds to parse
def test_deep_nesting_and_runs_of_open_tags_parse_at_once():
    from oc_repl.protocols.templates import Templates
    from oc_repl.protocols.terminus import parse as tp

    json_m = Templates.load("terminus-json", "messages.toml", tp.JSON_SPEC)
    xml_m = Templates.load("terminus-xml", "messages.toml", tp.XML_SPEC)
    for text in ('{"analysis": ' + "[" * 1000 + "}", "[" * 10000, '{"a": ' * 5000, "{" * 10000):
        assert tp.parse_json(text, json_m).error
    for opener in ("<analysis>", "<task_complete>", "<keystrokes duration='1'>"):
        assert tp.parse_xml("<response><commands>" + opener * 10000 + "</response>", xml_m) is not None


def test_the_plain_scans_find_what_upstreams_expressions_find():
    import random
    import re

    from oc_repl.protocols.terminus.xml_replies import _first_block, _keystrokes

    rng = random.Random(7)
    pieces = ["<keystrokes", ">", "</keystrokes>", "a", " duration='1'", "<plan>", "</plan>", "\n", "<"]
    for _ in range(5000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        assert _keystrokes(text) == re.findall(r"<keystrokes([^>]*)>(.*?)</keystrokes>", text, re.DOTALL)
        found = re.search("<plan>(.*?)</plan>", text, re.DOTALL)
        assert _first_block(text, "<plan>", "</plan>") == (found.group(1) if found else None)
