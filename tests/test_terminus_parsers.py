"""terminus replies: every parser error, warning and repair as the exact string the model reads, the feedback
messages, the output limit, the templates, and a differential run against terminal-bench 0.2.18's own parsers."""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

from oc_repl.protocols import data_dir
from oc_repl.protocols.terminus_parse import (
    Command,
    Parsed,
    feedback_confirm,
    feedback_length_overflow,
    feedback_observation,
    feedback_parse_error,
    feedback_warnings,
    limit_output,
    parse_json,
    parse_xml,
    salvage_xml,
    strip_think,
)
from oc_repl.protocols.terminus_xml import EMPTY_COMMANDS

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

CONCAT = (
    "Command 1 should end with newline when followed by another command. "
    "Otherwise the two commands will be concatenated together on the same line."
)
AUTO_BRACE = (
    "- AUTO-CORRECTED: Fixed incomplete JSON by adding missing closing brace - please fix this in future responses"
)
AUTO_MIXED = "- AUTO-CORRECTED: Extracted JSON from mixed content - please fix this in future responses"
WRONG_ORDER = "Found: plan → analysis → commands, expected: analysis → plan → commands"
OK = '{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls\\n", "duration": 0.1}]}'


def reply(commands: object, **extra: object) -> str:
    return json.dumps({"analysis": "a", "plan": "p", "commands": commands, **extra})


def xml(commands: str, extra: str = "") -> str:
    return f"<response>\n<analysis>a</analysis>\n<plan>p</plan>\n<commands>{commands}</commands>{extra}\n</response>"


# --- JSON --------------------------------------------------------------------------------------------------------

JSON_CASES = [
    # (reply, error, warning)
    (OK, "", ""),
    ("Sure!\n" + OK, "", "- Extra text detected before JSON object"),
    (OK + "\nDone.", "", "- Extra text detected after JSON object"),
    ("x " + OK + " y", "", "- Extra text detected before JSON object\n- Extra text detected after JSON object"),
    ("no object here", "No valid JSON found in response", "- No valid JSON object found"),
    (
        '{"analysis": "a", "plan": "p", "commands": [],}',
        "Invalid JSON: Expecting property name enclosed in double quotes: line 1 column 47 (char 46) | Content: "
        + repr('{"analysis": "a", "plan": "p", "commands": [],}'),
        "",
    ),
    ('{"plan": "p"}', "Missing required fields: analysis, commands", ""),
    ('{"analysis": "a", "plan": "p", "commands": "ls"}', "Field 'commands' must be an array", ""),
    (
        '{"analysis": 1, "plan": ["x"], "commands": []}',
        "",
        "- Field 'analysis' should be a string\n- Field 'plan' should be a string",
    ),
    ('{"plan": "p", "analysis": "a", "commands": []}', "", f"- Fields appear in wrong order. {WRONG_ORDER}"),
    # the order is read from the raw text: a nested "commands" key counts
    (
        '{"notes": {"commands": 1}, "analysis": "a", "plan": "p", "commands": []}',
        "",
        "- Fields appear in wrong order. Found: commands → analysis → plan, expected: analysis → plan → commands",
    ),
    (reply([], task_complete=1), "", "- Field 'task_complete' should be a boolean or string"),
    (reply(["ls"]), "Command 1 must be an object", ""),
    (reply([{"duration": 1}]), "Command 1 missing required 'keystrokes' field", ""),
    (reply([{"keystrokes": 5, "duration": 1}]), "Command 1 'keystrokes' must be a string", ""),
    (reply([{"keystrokes": "ls\n"}]), "", "- Command 1: Missing duration field, using default 1.0"),
    (reply([{"keystrokes": "ls\n", "duration": "5"}]), "", "- Command 1: Invalid duration value, using default 1.0"),
    (reply([{"keystrokes": "ls\n", "duration": 1, "wait": True}]), "", "- Command 1: Unknown fields: wait"),
    (reply([{"keystrokes": "ls", "duration": 1}, {"keystrokes": "pwd", "duration": 1}]), "", f"- {CONCAT}"),
    # warnings of earlier commands stay when a later one is broken
    (
        reply([{"keystrokes": "ls"}, 7]),
        "Command 2 must be an object",
        f"- Command 1: Missing duration field, using default 1.0\n- {CONCAT}",
    ),
    ('{"analysis": "a", "plan": "p", "commands": []', "", AUTO_BRACE),
    ('{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls\\n", "duration": 1}]', "", AUTO_BRACE),
    ('{oops} {"analysis": "a", "plan": "p", "commands": []}', "", AUTO_MIXED),
    (
        '{oops} {"plan": "p", "analysis": "a", "commands": []}',
        "",
        f"{AUTO_MIXED}\n- Fields appear in wrong order. {WRONG_ORDER}",
    ),
    # no repair works: the first error stands
    (
        '{"plan": "p"} trailing',
        "Missing required fields: analysis, commands",
        "- Extra text detected after JSON object",
    ),
]


@pytest.mark.parametrize(("text", "error", "warning"), JSON_CASES)
def test_json_messages(text: str, error: str, warning: str) -> None:
    parsed = parse_json(text)
    assert (parsed.error, parsed.warning) == (error, warning)
    if error:
        assert parsed.commands == []


def test_json_commands_and_defaults() -> None:
    parsed = parse_json(reply([{"keystrokes": "ls\n"}, {"keystrokes": "", "duration": 70}, {"keystrokes": "q"}]))
    assert parsed.commands == [Command("ls\n", 1.0), Command("", 70.0), Command("q", 1.0)]
    assert (parsed.analysis, parsed.plan, parsed.task_complete) == ("a", "p", False)
    # durations are not clamped, and true passes as a number
    assert parse_json(reply([{"keystrokes": "x", "duration": True}])).commands == [Command("x", 1.0)]
    assert parse_json(reply([{"keystrokes": "x", "duration": -3}])).commands == [Command("x", -3.0)]


@pytest.mark.parametrize(
    ("flag", "complete"),
    [
        (True, True),
        (False, False),
        ("true", True),
        ("TRUE", True),
        ("1", True),
        ("Yes", True),
        ("no", False),
        (" true", False),
        (1, True),
        (0, False),
        (None, False),
    ],
)
def test_json_task_complete_coercion(flag: object, complete: bool) -> None:
    assert parse_json(reply([], task_complete=flag)).task_complete is complete


def test_json_task_complete_defaults_to_false() -> None:
    assert parse_json(reply([])).task_complete is False


def test_json_command_error_becomes_warning_when_complete() -> None:
    parsed = parse_json(reply([{"keystrokes": "ls\n", "duration": 1}, {"keystrokes": 5}], task_complete=True))
    assert (parsed.commands, parsed.task_complete, parsed.error) == ([], True, "")
    assert parsed.warning == "- Command 2 'keystrokes' must be a string"


def test_json_unknown_fields_are_all_named() -> None:
    warning = parse_json(reply([{"keystrokes": "x", "duration": 1, "b": 1, "a": 2}])).warning
    assert warning.startswith("- Command 1: Unknown fields: ")
    # set order, as upstream: either order may come out
    assert sorted(warning.removeprefix("- Command 1: Unknown fields: ").split(", ")) == ["a", "b"]


def test_json_long_invalid_content_is_previewed() -> None:
    text = '{"analysis": "' + "x" * 300 + '", "plan": nope, "commands": []}'
    error = parse_json(text).error
    assert error.startswith("Invalid JSON: Expecting value: line 1 column ")
    assert error.endswith(f" | Content preview: {text[:100]!r}...")


def test_json_brace_scan_skips_strings_and_escapes() -> None:
    text = 'Note: "{" \\{ ' + reply([{"keystrokes": "echo '}{'\n", "duration": 0.1}])
    parsed = parse_json(text)
    assert parsed.commands == [Command("echo '}{'\n", 0.1)]
    assert parsed.warning == "- Extra text detected before JSON object"


HUGE_INT = '{"analysis": "a", "plan": "p", "commands": [], "pad": ' + "9" * 5000 + "}"
needs_int_limit = pytest.mark.skipif(not hasattr(sys, "get_int_max_str_digits"), reason="no integer digit limit")


def test_json_huge_numbers_do_not_crash() -> None:
    assert parse_json(reply([{"keystrokes": "x", "duration": 10**400}])).commands == [Command("x", float("inf"))]


@needs_int_limit
def test_json_too_many_digits_do_not_crash() -> None:
    assert parse_json(HUGE_INT).error.startswith("Invalid JSON: Exceeds the limit (4300 digits)")


# --- XML ---------------------------------------------------------------------------------------------------------

LS = '<keystrokes duration="0.1">ls\n</keystrokes>'
XML_OK = xml(LS)

XML_CASES = [
    (XML_OK, "", ""),
    ("just text", "No <response> tag found", ""),
    ("<response>  </response>", "No <response> tag found", ""),
    (
        "ok\n" + XML_OK + "\nbye",
        "",
        "- Extra text detected before <response> tag\n- Extra text detected after </response> tag",
    ),
    (XML_OK.removesuffix("\n</response>"), "", ""),  # an unclosed <response> is tolerated silently
    (
        XML_OK + "\n" + xml('<keystrokes duration="1">rm -rf x\n</keystrokes>'),
        "",
        "- Extra text detected after </response> tag\n"
        "- IMPORTANT: Only issue one <response> block at a time. You issued 2 and only the first was executed.",
    ),
    (
        "<response><analysis>a</analysis><plan>p</plan></response>",
        "Missing <commands> section",
        "- Missing <commands> section",
    ),
    (
        "<response><analysis>a</analysis><plan>p</plan><task_complete>true</task_complete></response>",
        "",
        "- Missing <commands> section",
    ),
    (xml(""), "", f"- {EMPTY_COMMANDS}"),
    (xml("", "<task_complete>true</task_complete>"), "", ""),
    ("<response><analysis>a</analysis><plan>p</plan><commands/></response>", "", f"- {EMPTY_COMMANDS}"),
    (xml('<keystrokes duration="1"/>'), "", ""),  # self-closing keystrokes: no command
    (xml("<keystrokes>ls\n</keystrokes>"), "", "- Command 1: Missing duration attribute, using default 1.0"),
    (
        xml('<keystrokes duration="soon">ls\n</keystrokes>'),
        "",
        "- Command 1: Invalid duration value 'soon', using default 1.0",
    ),
    (
        xml("<keystrokes duration=5>ls\n</keystrokes>"),
        "",
        "- Command 1: Attribute 'duration' value should be quoted: duration=\"5\"\n"
        "- Command 1: Missing duration attribute, using default 1.0",
    ),
    (
        xml("<keystrokes duration='2'>ls\n</keystrokes>"),
        "",
        "- Command 1: Use double quotes for attribute 'duration': duration=\"2\"",
    ),
    (
        xml('<keystrokes wait="1" duration="1">ls\n</keystrokes>'),
        "",
        "- Command 1: Unknown attribute 'wait' - known attributes are: duration",
    ),
    (xml('<keystrokes duration="1">ls</keystrokes><keystrokes duration="1">pwd\n</keystrokes>'), "", f"- {CONCAT}"),
    (
        xml('<keystrokes duration="1">a &lt; b\\r\\n</keystrokes>'),
        "",
        "- Warning: &lt; is read verbatim and not converted to <. NEVER USE &lt;, unless you want these exact "
        "characters to appear directly in the output.\n"
        "- Warning: \\r\\n line endings are not necessary - use \\n instead for simpler output",
    ),
    (xml(LS, "<notes>x</notes>"), "", "- Unknown tag found: <notes>, expected analysis/plan/commands/task_complete"),
    (xml(LS) + "<commands>" + LS + "</commands>", "", "- Extra text detected after </response> tag"),
    (
        xml(LS, "<commands>" + LS + "</commands>"),
        "",
        "- IMPORTANT: Only issue one <commands> block at a time. You issued 2 and only the first was executed.",
    ),
    (xml(LS, "<plan>q</plan>"), "", "- Multiple <plan> sections found"),  # order goes by first occurrences
    (
        f"<response><plan>p</plan><analysis>a</analysis><commands>{LS}</commands></response>",
        "",
        f"- Sections appear in wrong order. {WRONG_ORDER}",
    ),
    (f"<response><plan>p</plan><commands>{LS}</commands></response>", "", "- Missing <analysis> section"),
]


@pytest.mark.parametrize(("text", "error", "warning"), XML_CASES)
def test_xml_messages(text: str, error: str, warning: str) -> None:
    parsed = parse_xml(text)
    assert (parsed.error, parsed.warning) == (error, warning)


def test_xml_keystrokes_verbatim_and_durations() -> None:
    parsed = parse_xml(
        xml('\n<keystrokes duration="0.5">  echo &amp; "x" \n</keystrokes>\n<keystrokes duration="2">C-c</keystrokes>')
    )
    assert parsed.commands == [Command('  echo &amp; "x" \n', 0.5), Command("C-c", 2.0)]
    assert (parsed.analysis, parsed.plan) == ("a", "p")


def test_xml_self_closing_keystrokes_swallow_up_to_the_next_close() -> None:
    # the keystrokes pattern is not XML-aware: `/>` is part of the attribute text, as upstream reads it
    parsed = parse_xml(xml('<keystrokes duration="1"/>\n<keystrokes duration="2">after\n</keystrokes>'))
    assert parsed.commands == [Command('\n<keystrokes duration="2">after\n', 1.0)]
    # text without any keystrokes element runs nothing, silently
    assert parse_xml(xml("echo hi")) == Parsed([], False, "", "", "a", "p")


def test_xml_first_block_only_runs() -> None:
    parsed = parse_xml(XML_OK + xml('<keystrokes duration="1">rm -rf x\n</keystrokes>'))
    assert parsed.commands == [Command("ls\n", 0.1)]


@pytest.mark.parametrize(
    ("tag", "complete"),
    [
        ("<task_complete>true</task_complete>", True),
        ("<task_complete>\n  TRUE \n</task_complete>", True),
        ("<task_complete>false</task_complete>", False),
        ("<task_complete>yes</task_complete>", False),
        ("<task_complete/>", False),
        ("<task_complete></task_complete>", False),
        ("", False),
    ],
)
def test_xml_task_complete(tag: str, complete: bool) -> None:
    assert parse_xml(xml(LS, tag)).task_complete is complete


def test_xml_blank_tag_does_not_crash() -> None:
    # upstream raises IndexError on `< >`; here it reads as a tag with an empty name, like `<>`
    assert parse_xml(xml(LS, "< >")).warning == "- Unknown tag found: <>, expected analysis/plan/commands/task_complete"


def test_salvage_xml() -> None:
    assert salvage_xml(XML_OK + "\n<response><analysis>cut") == XML_OK
    assert salvage_xml("<response><analysis>a</analysis><plan>p</plan><commands>" + LS) is None
    assert salvage_xml(xml(LS, "<commands></commands>") + "x") is None  # several command blocks


# --- think blocks, feedback, output limit ------------------------------------------------------------------------


def test_strip_think() -> None:
    assert strip_think("<think>\n\n</think>\n\n" + OK) == OK
    assert strip_think("  <think>plan\nmore</think>" + XML_OK) == XML_OK
    assert strip_think(OK + "<think></think>") == OK + "<think></think>"
    assert strip_think("<think>never closed " + OK) == "<think>never closed " + OK
    assert parse_json("<think>\n\n</think>\n\n" + OK).warning == "- Extra text detected before JSON object"
    assert parse_json(strip_think("<think>\n\n</think>\n\n" + OK)).warning == ""


def test_feedback_messages() -> None:
    obs = "New Terminal Output:\n$ ls\nfile\n$ "
    assert feedback_warnings("- w1\n- w2", obs) == f"Previous response had warnings:\nWARNINGS: - w1\n- w2\n\n{obs}"
    assert feedback_observation(obs) == obs
    assert feedback_parse_error("E", "", "json") == (
        "Previous response had parsing errors:\nERROR: E\n\nPlease fix these issues and provide a proper JSON response."
    )
    assert feedback_parse_error("E", "- w", "xml") == (
        "Previous response had parsing errors:\nERROR: E\nWARNINGS: - w\n\n"
        "Please fix these issues and provide a proper response."
    )
    confirm = feedback_confirm(obs, "json")
    assert confirm.startswith(f"Current terminal state:\n{obs}\n\n")
    assert confirm.endswith('include "task_complete": true in your JSON response again.')
    assert feedback_confirm(obs, "xml").endswith("include <task_complete>true</task_complete> again.")
    overflow = feedback_length_overflow()
    assert overflow.startswith("ERROR!!") and overflow.count("4096 tokens") == 3
    assert feedback_length_overflow("- w").endswith("\n\nParser warnings from your truncated response:\n- w")


def marker(omitted: int) -> str:
    return f"\n[... output limited to 10000 bytes; {omitted} interior bytes omitted ...]\n"


def test_limit_output() -> None:
    assert limit_output("x" * 10000) == "x" * 10000
    assert limit_output("é" * 5000) == "é" * 5000  # 10000 bytes exactly
    head, tail = "a" * 4000 + "b" * 1000, "b" * 1000 + "c" * 4000
    assert limit_output(head + "b" * 1000 + tail) == head + marker(1000) + tail
    # a character cut at either edge is dropped whole and counted as omitted: é (2 bytes) straddles byte 5000,
    # € (3 bytes) straddles the start of the last 5000 bytes
    text = "a" * 4999 + "é" + "m" * 100 + "€" + "z" * 4998
    assert limit_output(text) == "a" * 4999 + marker(2 + 100 + 3) + "z" * 4998
    # a lone surrogate does not crash the loop
    assert limit_output("\udcff" * 20000).count("interior bytes omitted") == 1


def test_limit_output_twice_reports_the_first_marker() -> None:
    once = limit_output("x" * 30000)
    assert once == "x" * 5000 + marker(20000) + "x" * 5000
    assert feedback_observation(once) == "x" * 5000 + marker(len(marker(20000))) + "x" * 5000


# --- templates and manifests -------------------------------------------------------------------------------------

UPSTREAM_SHA256 = {
    ("terminus-json", "prompt.txt"): "a52a860b54a1cd9beb8ed4083fe8ad3bdf1a5df59c7c6767abfdc33c5359aff2",
    ("terminus-json", "timeout.txt"): "32bf9aa7b157a6a0e0ba0d33b81e59dd67204276f158afc1fe6cb684ced68872",
    ("terminus-xml", "prompt.txt"): "89c74ea0d7ffe6344e00cdff6c2e50af62bcc6735c53221efb95d65c7fb371af",
}


@pytest.mark.parametrize("name", ["terminus-json", "terminus-xml"])
def test_manifest_hashes(name: str) -> None:
    folder = data_dir(name)
    manifest = tomllib.loads((folder / "manifest.toml").read_text())
    assert (manifest["name"], manifest["kind"]) == (name, name)
    for asset in manifest["assets"]:
        assert hashlib.sha256((folder / asset["name"]).read_bytes()).hexdigest() == asset["sha256"]
        assert asset["upstream_sha256"] == UPSTREAM_SHA256[(name, asset["name"])]


def test_templates_fill_and_their_examples_parse() -> None:
    json_prompt = (data_dir("terminus-json") / "prompt.txt").read_text()
    filled = json_prompt.format(instruction="TASK", terminal_state="Current Terminal Screen:\n$")
    assert filled.endswith("Task Description:\nTASK\n\nCurrent terminal state:\nCurrent Terminal Screen:\n$\n")
    example = parse_json(filled)
    assert example.error == "" and example.task_complete is True
    assert example.commands == [Command("ls -la\n", 0.1), Command("cd project\n", 0.1)]

    xml_prompt = (data_dir("terminus-xml") / "prompt.txt").read_text()
    filled = xml_prompt.format(instruction="TASK", terminal_state="$")
    assert filled.endswith("Task Description:\nTASK\n\nCurrent terminal state:\n$\n")
    example = parse_xml(filled)
    assert example.error == "" and example.task_complete is True
    assert example.commands == [Command("ls -la\n", 0.1), Command("cd project\n", 0.1)]

    timeout = (data_dir("terminus-json") / "timeout.txt").read_text()
    text = timeout.format(command="sleep 99\n", timeout_sec=5.0, terminal_state="$ ")
    assert "sleep 99\n" in text and "5.0" in text and text.endswith("$ ")


# --- differential: the same replies through terminal-bench 0.2.18 ------------------------------------------------

WHEEL_VERSION = "0.2.18"
WHEEL_MEMBERS = {
    "json": "terminal_bench/agents/terminus_2/terminus_json_plain_parser.py",
    "xml": "terminal_bench/agents/terminus_2/terminus_xml_plain_parser.py",
    "agent": "terminal_bench/agents/terminus_2/terminus_2.py",
}


def _cache_dir() -> Path:
    root = os.environ.get("OC_REPL_CACHE") or Path.home() / ".cache" / "oc-repl-tests"
    return Path(root) / f"terminal-bench-{WHEEL_VERSION}"


def _download_wheel(target: Path) -> Path:
    # The wheel declares Python >= 3.12; only its pure-Python sources are read, so any interpreter will do.
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        f"terminal-bench=={WHEEL_VERSION}",
        "--no-deps",
        "--ignore-requires-python",
        "--only-binary=:all:",
        "--timeout",
        "20",
        "--retries",
        "1",
        "-d",
        str(target),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=100)
    wheels = sorted(target.glob(f"terminal_bench-{WHEEL_VERSION}-*.whl"))
    if done.returncode or not wheels:
        lines = done.stderr.strip().splitlines() or [f"pip exited with {done.returncode}"]
        raise OSError(lines[-1])
    return wheels[0]


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _method(path: Path, name: str):
    """One method of a class in a module that cannot be imported here (its imports need the whole harness)."""
    tree = ast.parse(path.read_text())
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name)
    namespace: dict = {}
    exec(compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec"), namespace)
    return namespace[name]


@pytest.fixture(scope="session")
def upstream() -> dict:
    cache = _cache_dir()
    sources = {key: cache / Path(member).name for key, member in WHEEL_MEMBERS.items()}
    if not all(path.exists() for path in sources.values()):
        try:
            cache.mkdir(parents=True, exist_ok=True)
            wheel = _download_wheel(cache)
        except (OSError, subprocess.SubprocessError) as exc:
            reason = f"terminal-bench=={WHEEL_VERSION} could not be downloaded from PyPI ({exc})"
            if os.environ.get("CI") == "true":
                pytest.fail(reason)
            pytest.skip(reason + "; the differential test needs it")
        with zipfile.ZipFile(wheel) as archive:
            templates = [
                archive.read(f"terminal_bench/agents/prompt-templates/{name}")
                for name in ("terminus-json-plain.txt", "terminus-xml-plain.txt", "timeout.txt")
            ]
            hashes = {hashlib.sha256(data).hexdigest() for data in templates}
            assert hashes == set(UPSTREAM_SHA256.values()), "the wheel's templates are not the ones protocols.md names"
            for key, member in WHEEL_MEMBERS.items():
                sources[key].write_bytes(archive.read(member))
    return {
        "json": _load("_upstream_terminus_json", sources["json"]).TerminusJSONPlainParser(),
        "xml": _load("_upstream_terminus_xml", sources["xml"]).TerminusXMLPlainParser(),
        "limit": _method(sources["agent"], "_limit_output_length"),
    }


THINK = "<think>\n\n</think>\n\n"

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
]
JSON_HANDWRITTEN = [
    "",
    "   ",
    "{}",
    "[]",
    "{",
    "}",
    "}{",
    '} {"analysis": "a"}',
    '"{"',
    "\\" + OK,
    '"' + OK,
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
]
XML_HANDWRITTEN = [
    "",
    "<response>",
    "</response><response>" + XML_OK,
    "<response></response>",
    "<RESPONSE>" + XML_OK[10:],
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


def _corpus() -> dict[str, list[str]]:
    json_inputs = [text for text, _, _ in JSON_CASES] + JSON_HANDWRITTEN + JSON_BASES
    json_inputs += [m for base in JSON_BASES for m in _json_mutations(base)]
    xml_inputs = [text for text, _, _ in XML_CASES] + XML_HANDWRITTEN + XML_BASES
    xml_inputs += [m for base in XML_BASES for m in _xml_mutations(base)]
    return {"json": list(dict.fromkeys(json_inputs)), "xml": list(dict.fromkeys(xml_inputs))}


def _summary(result) -> tuple:
    commands = [(c.keystrokes, c.duration) for c in result.commands]
    complete = bool(getattr(result, "is_task_complete", getattr(result, "task_complete", None)))
    return repr(commands), complete, result.error, result.warning  # repr: nan == nan


def test_differential_parsers(upstream: dict) -> None:
    corpus = _corpus()
    assert len(corpus["json"]) + len(corpus["xml"]) >= 60
    ours = {"json": parse_json, "xml": parse_xml}
    mismatches = []
    for fmt, inputs in corpus.items():
        for text in inputs:
            expected = _summary(upstream[fmt].parse_response(text))
            actual = _summary(ours[fmt](text))
            if actual != expected:
                mismatches.append((fmt, text, expected, actual))
    assert mismatches == []


def test_differential_upstream_crashes_where_we_do_not(upstream: dict) -> None:
    with pytest.raises(IndexError):
        upstream["xml"].parse_response(xml(LS, "< >"))
    with pytest.raises(OverflowError):
        upstream["json"].parse_response(reply([{"keystrokes": "x", "duration": 10**400}]))
    if hasattr(sys, "get_int_max_str_digits"):
        with pytest.raises(ValueError, match="Exceeds the limit"):
            upstream["json"].parse_response(HUGE_INT)


def test_differential_salvage(upstream: dict) -> None:
    for text in _corpus()["xml"]:
        assert salvage_xml(text) == upstream["xml"].salvage_truncated_response(text)[0]


def test_differential_limit_output(upstream: dict) -> None:
    samples = [
        "",
        "x" * 10000,
        "x" * 10001,
        "é" * 5001,
        "€" * 4000,
        "a" * 4999 + "é" * 3000 + "€" * 2000,
        "𝄞" * 2600,
        ("line ✓\n" * 3000),
        "a" * 5001 + "日" * 3000 + "b" * 4999,
    ]
    for text in samples:
        assert limit_output(text) == upstream["limit"](None, text)
        once = upstream["limit"](None, text)
        assert feedback_observation(once) == upstream["limit"](None, once)
        assert limit_output(text, limit=7) == upstream["limit"](None, text, 7)
