"""terminus against terminal-bench 0.2.18's own code, loaded from its wheel at test time (downloaded once, cached).

`protocols sync` derives upstream's texts from the wheel; with those texts loaded, our parsers, salvage, output limit
and observations, and every message the protocol sends after a reply (feedback, warnings, the completion question,
the output-overflow error, the observation), are compared with what upstream's parsers and agent produce for the same
replies and the same screens, byte for byte, over a corpus of several hundred replies.

Set order: upstream lists unknown command fields, missing XML sections and unknown XML tags by iterating a Python
set, so with two or more names their order follows string hashing (PYTHONHASHSEED, random per process). Here both
sides run in this one process and build their sets the same way from the same strings, so they share the seed and the
order, and the comparison stays exact. Between two processes it would not be (see test_terminus_exact.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from oc_repl import deviations, protocols
from oc_repl.protocols.templates import Templates, dump
from oc_repl.protocols.terminus.parse import limit_output, parse_json, parse_xml, prompt_observation, salvage_xml
from oc_repl.protocols.terminus.sync import DERIVE
from oc_repl.protocols.terminus.tmux import Terminal
from oc_repl.protocols.terminus.upstream import Upstream, loaded
from oc_repl.types import Reply, Task
from tests import upstream_terminus as tb
from tests.protocols.terminus.test_terminus_parsers import BUILTIN, JSON_CASES, LS, OK, XML_CASES, XML_OK, reply, xml

PARSERS = {"json": parse_json, "xml": parse_xml}
THINK = "<think>\n\n</think>\n\n"
INSTRUCTION = "Create hello.txt with {braces} and a quote ' in it"
SCREEN = "Current Terminal Screen:\nroot@box:/app#" + "\n" * 39
SHORT = "New Terminal Output:\n\nroot@box:/app# ls\nfile\nroot@box:/app#\n\n"
LONG = "New Terminal Output:\n" + "line ✓ 0123456789 €\n" * 1000  # over 10 000 bytes: cut, and cut again


def observed(terminal) -> str:
    """An observation with the markers protocols.md quotes, as the terminus protocols word it."""
    kind, text = terminal.observe()
    return ("New Terminal Output:\n" if kind == "new" else "Current Terminal Screen:\n") + text


@pytest.fixture(scope="module")
def wheel() -> Path:
    return tb.wheel()


@pytest.fixture(scope="module")
def derived(wheel: Path) -> dict[str, bytes]:
    return tb.derived_files(wheel)


@pytest.fixture(scope="module")
def m(derived: dict[str, bytes]) -> dict[str, Templates]:
    return tb.templates(derived)


@pytest.fixture(scope="module")
def up(wheel: Path) -> Iterator[Upstream]:
    with loaded(wheel) as upstream:
        yield upstream


# --- the corpus --------------------------------------------------------------------------------------------------

JSON_BASES = [
    OK,
    reply(
        [
            {"keystrokes": "cat > a.py << 'EOF'\nprint({'k': \"}\"})\nEOF\n", "duration": 0.5},
            {"keystrokes": "python3 a.py\n", "duration": 1},
        ],
        task_complete=False,
    ),
    reply([{"keystrokes": 'echo "{\\"x\\": 1}"\n', "duration": 0.1}, {"keystrokes": "C-c", "duration": 0}]),
    reply([], task_complete=True),
    reply([{"keystrokes": "ls"}, {"keystrokes": "pwd", "duration": "2", "extra": 1, "note": "n"}]),
    reply([{"keystrokes": "make\n", "duration": 120}], task_complete="yes"),
    json.dumps({"commands": [{"keystrokes": "ls\n", "duration": 1}], "plan": "p", "analysis": "a"}, indent=2),
    json.dumps(
        {"analysis": ["x"], "plan": 3, "commands": [{"keystrokes": "ls\n", "duration": 1}], "task_complete": [1]}
    ),
    reply([{"keystrokes": "x\n", "duration": 1}, "oops", {"keystrokes": 1}], task_complete=True),
    reply([{"keystrokes": "x\n", "duration": None}, {"duration": 2}]),
    '{"analysis": "é ✓ 日本", "plan": "p", "commands": [{"keystrokes": "echo \\u00e9\\n", "duration": 0.1}]}',
    '{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls\\n", "duration": 1}], "task_complete": true}',
    reply([{"keystrokes": "echo hi\n", "duration": 0.1, "ERROR:": 1}]),  # a warning quoting upstream's error tag
]
JSON_HANDWRITTEN = [
    *("", "   ", "{}", "[]", "{", "}", "}{", '} {"analysis": "a"}', '"{"', "\\" + OK, '"' + OK),
    "```json\n" + OK + "\n```",
    OK + OK,
    OK + "\n" + reply([]),
    '{"a": {"b": {"c": {}}}} ' + OK,
    '{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls\\n", "duration": 1}]}}',
    '{"analysis": "unterminated',
    '{"analysis": "a", "plan": "p", "commands": [}',
    "{not json} {also: not}",
    '{"analysis": "a", "plan": "p", "commands": [], "task_complete": "TRUE"}',
    '{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "x", "duration": 1e999}]}',
    '{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "x", "duration": NaN}]}',
    '{"analysis": "a", "plan": "p", "commands": []}\n\nI have {finished} the task.',
]


def _json_mutations(base: str) -> list[str]:
    cut = [base[: len(base) * k // 8] for k in (2, 5, 7)] + [base[:-1], base[:-2]]
    return cut + [
        "Here is my answer:\n" + base,
        base + "\nLet me know.",
        THINK + base,
        base.replace('"plan"', '"plans"', 1),
        base.replace(", ", ",  ", 3).replace('"commands"', '"commandz"', 1),
        base.replace('"', "'", 4),
        base.replace("\\n", "", 1),
        "{" + base,
    ]


XML_BASES = [
    XML_OK,
    xml(
        '\n<keystrokes duration="0.1">cat <<EOF > f\nif a < b && c > d\nEOF\n</keystrokes>\n'
        '<keystrokes duration="1.5">python3 f.py\n</keystrokes>\n',
        "\n<task_complete>false</task_complete>",
    ),
    xml("<keystrokes duration='1' timeout=3>ls</keystrokes><keystrokes>pwd &gt; x &amp;&amp; y\\r\\n</keystrokes>"),
    xml("", "<task_complete>TRUE</task_complete>"),
    "<response><plan>p</plan><analysis>a</analysis><commands>" + LS + "</commands><extra/><!-- c --></response>",
    xml('<keystrokes duration="abc">x\n</keystrokes><keystrokes duration="">y\n</keystrokes>'),
    xml('<keystrokes duration="1"/>\n<keystrokes duration="2">after\n</keystrokes>'),
    "<response>\n<analysis>a</analysis>\n<plan>p</plan>\n<task_complete>true</task_complete>\n</response>",
    xml('<keystrokes duration="0.1">C-c</keystrokes>', "<analysis>again</analysis><commands></commands>"),
    xml('<keystrokes duration="1e3">sleep 1\n</keystrokes>\n<keystrokes duration="-1">x</keystrokes>'),
    xml("<keystrokes duration='ERROR: x'>ls\n</keystrokes>"),  # a warning quoting upstream's error tag
]
XML_HANDWRITTEN = [
    *("", "<response>", "</response><response>" + XML_OK, "<response></response>", "<RESPONSE>" + XML_OK[10:]),
    XML_OK + XML_OK + XML_OK,
    XML_OK + "\n" + XML_OK,
    "text <response>" + XML_OK[10:] + " more",
    xml('<keystrokes duration="1">a</keystrokes>b</keystrokes>'),
    "<response><commands>x</commands></response>",
    xml(LS, "<task_complete>\n true \n</task_complete><task_complete>false</task_complete>"),
    "<response><analysis/><plan></plan><commands>" + LS + "</commands></response>",
    "<response><x/><y>1</y><z k='v'></z><w></w><commands>" + LS + "</commands></response>",
    '<response>\n<keystrokes duration="1">ls\n</keystrokes>\n</response>',
]


def _xml_mutations(base: str) -> list[str]:
    cut = [base[: len(base) * k // 8] for k in (2, 5, 7)] + [base[: base.rfind("</response>")]]
    return cut + [
        "Sure.\n" + base,
        base + "\nDone.",
        THINK + base,
        base + "\n" + base,
        base.replace("<plan>", "<plan >", 1),
        base.replace("</commands>", "</command>", 1),
        base.replace('"', "", 2),
    ]


def corpus() -> dict[str, list[str]]:
    json_inputs = [text for text, _, _ in JSON_CASES] + JSON_HANDWRITTEN + JSON_BASES
    json_inputs += [mutated for base in JSON_BASES for mutated in _json_mutations(base)]
    xml_inputs = [text for text, _, _ in XML_CASES] + XML_HANDWRITTEN + XML_BASES
    xml_inputs += [mutated for base in XML_BASES for mutated in _xml_mutations(base)]
    return {"json": list(dict.fromkeys(json_inputs)), "xml": list(dict.fromkeys(xml_inputs))}


def _summary(result: Any) -> tuple:
    commands = [(c.keystrokes, c.duration) for c in result.commands]
    complete = bool(getattr(result, "is_task_complete", getattr(result, "task_complete", None)))
    return repr(commands), complete, result.error, result.warning  # repr: nan == nan


def _verdict(parsed: Any) -> tuple:
    return repr(parsed.commands), parsed.task_complete, parsed.error_name, parsed.warned


# --- the derived texts -------------------------------------------------------------------------------------------


def test_sync_derives_the_texts_whose_hashes_the_manifests_record(derived: dict[str, bytes]) -> None:
    found = protocols.manifests()
    for name, data in derived.items():
        assert hashlib.sha256(data).hexdigest() == found[name].upstream_sha256("messages.toml")
        assert data != (protocols.data_dir(name) / "messages.toml").read_bytes()


PYTHONS = [
    *(f"python3.{minor}" for minor in (10, 11, 12, 13)),
    *filter(None, os.environ.get("OC_REPL_TEST_PYTHONS", "").split(os.pathsep)),
]


@pytest.mark.parametrize("python", PYTHONS)
def test_the_derivation_needs_only_the_wheel_and_the_standard_library(python, wheel, derived, tmp_path) -> None:
    """Each interpreter found runs the derivation by path as the sync does, but without any site-packages (-S: no
    oc-repl, no terminal-bench dependencies), and derives the same bytes. More: OC_REPL_TEST_PYTHONS=path:path."""
    found = shutil.which(python)
    if found is None or subprocess.run([found, "-c", ""], capture_output=True).returncode != 0:
        pytest.skip(f"{python} is not installed")
    out = tmp_path / "derived.json"
    command = [found, "-E", "-S", str(DERIVE), str(wheel), str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert {name: dump(texts) for name, texts in json.loads(out.read_text()).items()} == derived


# --- the parsers -------------------------------------------------------------------------------------------------


def test_differential_parsers(up: Upstream, m: dict[str, Templates]) -> None:
    inputs = corpus()
    assert len(inputs["json"]) + len(inputs["xml"]) >= 364
    mismatches, by_wording = [], []
    for fmt, texts in inputs.items():
        upstream = up.parser(fmt)
        for text in texts:
            ours = PARSERS[fmt](text, m[fmt])
            if _summary(ours) != _summary(upstream.parse_response(text)):
                mismatches.append((fmt, text, _summary(upstream.parse_response(text)), _summary(ours)))
            # what is decided never depends on the wording: the built-in texts give the same verdicts
            if _verdict(PARSERS[fmt](text, BUILTIN[fmt])) != _verdict(ours):
                by_wording.append((fmt, text))
    assert mismatches == [] and by_wording == []


def test_differential_salvage(up: Upstream, m: dict[str, Templates]) -> None:
    upstream = up.parser("xml")
    for text in corpus()["xml"] + corpus()["json"]:
        expected = upstream.salvage_truncated_response(text)[0]
        assert salvage_xml(text, m["xml"], by_text=True) == expected  # --exact: upstream's own test of its wording
        assert salvage_xml(text, m["xml"]) == expected == salvage_xml(text, BUILTIN["xml"])  # by name, any wording


def test_differential_limit_output(up: Upstream, m: dict[str, Templates]) -> None:
    limit = up.agent("json")._limit_output_length
    samples = ["", "x" * 10000, "x" * 10001, "é" * 5001, "€" * 4000, "a" * 4999 + "é" * 3000 + "€" * 2000]
    samples += ["𝄞" * 2600, "line ✓\n" * 3000, "a" * 5001 + "日" * 3000 + "b" * 4999, LONG]
    for text in samples:
        for fmt in ("json", "xml"):
            assert limit_output(text, m[fmt]) == limit(text)
            assert prompt_observation(limit(text), m[fmt]) == limit(limit(text))  # the second cut of a cut text
            assert limit_output(text, m[fmt], limit=7) == limit(text, 7)


class Captured(Terminal):
    """A terminal whose captures are given: only the observation rule runs."""

    def __init__(self) -> None:
        self.now = ("", "")

    def capture(self, entire: bool = False) -> str:
        return self.now[0] if entire else self.now[1]


CAPTURES = [
    [("p1\np2 $ \n\n", "s1"), ("p1\np2 $ ls\nfile\np2 $ \n\n", "s2"), ("p1\np2 $ ls\nfile\np2 $ \n\n", "s3")],
    [("p $", "s"), ("p $ ls\nx\n", "s"), ("zzz", "after a clear"), ("\n\n", "blank"), ("\n\n\n", "still blank")],
    [("$\n" + "\n" * 39, SCREEN), ("$ echo {x}\n{x}\n$\n" + "\n" * 37, "s"), ("$ echo {x}\n{x}\n$ ls\n$\n", "s")],
]


def test_differential_observations(up: Upstream) -> None:
    for captures in CAPTURES:
        terminal = Captured()
        shown = []
        for capture in captures:
            terminal.now = capture
            shown.append(observed(terminal))
        assert shown == up.observe(captures)


def test_differential_upstream_crashes_where_we_do_not(up: Upstream) -> None:
    with pytest.raises(IndexError):
        up.parser("xml").parse_response(xml(LS, "< >"))
    with pytest.raises(OverflowError):
        up.parser("json").parse_response(reply([{"keystrokes": "x", "duration": 10**400}]))


# --- every message after a reply ---------------------------------------------------------------------------------


def _waits(sent: list[tuple[str, float]]) -> str:
    """The keys typed and the waits after each, as text (nan equals nan; upstream's 60 is our 60.0)."""
    return repr([(keys, float(wait)) for keys, wait in sent])


def ours_after(fmt: str, reply_text: str, screens: list[str], cut_off: bool) -> tuple[list[dict], list]:
    """The conversation our protocol (as `--exact` builds it) sends after one reply, and the keys it typed."""
    protocol = protocols.create(f"terminus-{fmt}", deviations.none())
    sandbox = SimpleNamespace(spec="local:/nowhere")
    terminal = tb.ScriptedTerminal(sandbox, screens)
    protocol._terminal = terminal  # the one private touch: otherwise the protocol starts a terminal of its own
    protocol.continue_with(Task("t", INSTRUCTION), sandbox)
    protocol.step(Reply(content=reply_text, raw_content=reply_text, cut_off=cut_off), sandbox, [].append)
    return protocol.request().messages, terminal.sent


@pytest.mark.timeout(600)
@pytest.mark.parametrize("cut_off", [False, True], ids=["reply", "output-overflow"])
def test_differential_every_message_after_a_reply(up, wheel, derived, tmp_path, monkeypatch, cut_off: bool) -> None:
    """For each reply, and a short and a long screen after it, the whole next request upstream's agent sends (its
    first message, its history, and the parse-error, warnings, completion, overflow or observation message) equals
    ours, and so do the keys typed and the waits. With `cut_off` the reply hit the output token limit."""
    tb.lay_out_sync(tmp_path / "data", wheel, derived)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    mismatches, compared = [], 0
    for fmt, texts in corpus().items():
        for text, observation in ((text, obs) for text in texts for obs in (SHORT, LONG)):
            answer = up.overflow(text) if cut_off else text
            model, session = up.converse(fmt, INSTRUCTION, [answer], [SCREEN, observation])
            expected = (model.conversation()[1], _waits(session.sent))
            messages, sent = ours_after(fmt, text, [SCREEN, observation], cut_off)
            compared += 1
            if (messages, _waits(sent)) != expected:
                mismatches.append((fmt, text, observation[:30]))
    assert compared >= 2 * 364 and mismatches == []
