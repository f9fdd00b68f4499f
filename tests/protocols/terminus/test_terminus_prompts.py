"""terminus beyond the parsers: think blocks, the prompts and their frames, the output limit, the templates and
their manifests."""

from __future__ import annotations

import hashlib

import pytest

from oc_repl.protocols import data_dir
from oc_repl.protocols.terminus.parse import (
    SPECS,
    Command,
    Parsed,
    feedback,
    limit_output,
    parse_json,
    parse_xml,
    prompt_confirm,
    prompt_length_overflow,
    prompt_observation,
    prompt_parse_error,
    prompt_warnings,
    strip_think,
)

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from tests.protocols.terminus.test_terminus_parsers import BUILTIN, MJ, MX, OK, XML_OK

# --- think blocks, the prompts, the output limit -----------------------------------------------------------------


def test_strip_think() -> None:
    assert strip_think("<think>\n\n</think>\n\n" + OK) == OK
    assert strip_think("  <think>plan\nmore</think>" + XML_OK) == XML_OK
    assert strip_think(OK + "<think></think>") == OK + "<think></think>"
    assert strip_think("<think>never closed " + OK) == "<think>never closed " + OK
    assert parse_json("<think>\n\n</think>\n\n" + OK, MJ).warned == ["json.warn.extra_before"]
    assert parse_json(strip_think("<think>\n\n</think>\n\n" + OK), MJ).warned == []


@pytest.mark.parametrize("fmt", ["json", "xml"])
def test_prompts_follow_the_reference_frames(fmt: str) -> None:
    m = BUILTIN[fmt]
    obs = "New Terminal Output:\n$ ls\nfile\n$ "
    warned = Parsed([], False, "", "- w1\n- w2")
    failed = Parsed([], False, "E", "- w")
    # the frames and markers reference/protocols.md quotes are kept verbatim in the built-in wording
    assert prompt_warnings(warned, obs, m) == f"Previous response had warnings:\nWARNINGS: - w1\n- w2\n\n{obs}"
    assert prompt_parse_error(failed, m).startswith(
        "Previous response had parsing errors:\nERROR: E\nWARNINGS: - w\n\n"
    )
    assert feedback(Parsed([], False, "E", ""), m) == "ERROR: E" and feedback(Parsed([], False, "", ""), m) == ""
    assert prompt_observation(obs, m) == obs
    assert prompt_confirm(obs, m).startswith(f"Current terminal state:\n{obs}\n\n")
    assert prompt_confirm(obs, m) == m.render("prompt.confirm", terminal_output=obs)
    assert prompt_length_overflow("", m) == m.render("overflow.error") and "4096 tokens" in m.render("overflow.error")
    assert prompt_length_overflow("- w", m) == m.render("overflow.error") + m.render(
        "overflow.warnings_suffix", warning="- w"
    )


def marker(omitted: int, limit: int = 10000) -> str:
    return MJ.render("output.limit_marker", max_bytes=limit, omitted_bytes=omitted)


def test_limit_output() -> None:
    assert limit_output("x" * 10000, MJ) == "x" * 10000
    assert limit_output("é" * 5000, MJ) == "é" * 5000  # 10000 bytes exactly
    head, tail = "a" * 4000 + "b" * 1000, "b" * 1000 + "c" * 4000
    assert limit_output(head + "b" * 1000 + tail, MJ) == head + marker(1000) + tail
    # a character cut at either edge is dropped whole and counted as omitted: é (2 bytes) straddles byte 5000,
    # € (3 bytes) straddles the start of the last 5000 bytes
    text = "a" * 4999 + "é" + "m" * 100 + "€" + "z" * 4998
    assert limit_output(text, MJ) == "a" * 4999 + marker(2 + 100 + 3) + "z" * 4998
    assert limit_output("\udcff" * 20000, MJ) == "?" * 5000 + marker(10000) + "?" * 5000  # lone surrogates: no crash
    assert limit_output("x" * 30, MJ, limit=7) == "xxx" + marker(24, 7) + "xxx"


def test_limit_output_twice_reports_the_first_marker() -> None:
    once = limit_output("x" * 30000, MJ)
    assert once == "x" * 5000 + marker(20000) + "x" * 5000
    assert prompt_observation(once, MJ) == "x" * 5000 + marker(len(marker(20000).encode())) + "x" * 5000


# --- templates and manifests -------------------------------------------------------------------------------------

UPSTREAM_SHA256 = {  # terminal-bench 0.2.18's files, and the texts protocols sync derives from its code
    ("terminus-json", "prompt.txt"): "a52a860b54a1cd9beb8ed4083fe8ad3bdf1a5df59c7c6767abfdc33c5359aff2",
    ("terminus-json", "timeout.txt"): "32bf9aa7b157a6a0e0ba0d33b81e59dd67204276f158afc1fe6cb684ced68872",
    ("terminus-json", "messages.toml"): "b62f439ab6a8eb745d821c44098ad3b564452cdee3dbe010d60c426405596be9",
    ("terminus-xml", "prompt.txt"): "89c74ea0d7ffe6344e00cdff6c2e50af62bcc6735c53221efb95d65c7fb371af",
    ("terminus-xml", "messages.toml"): "898efedac843d2050f62c381267b3cc87b69e468e060f38730313a957a935a92",
}


@pytest.mark.parametrize("name", ["terminus-json", "terminus-xml"])
def test_manifest_hashes(name: str) -> None:
    folder = data_dir(name)
    manifest = tomllib.loads((folder / "manifest.toml").read_text())
    assert (manifest["name"], manifest["kind"]) == (name, name)
    listed = {asset["name"] for asset in manifest["assets"]}
    assert {"prompt.txt", "messages.toml", "notices.toml"} <= listed
    for asset in manifest["assets"]:
        data = (folder / asset["name"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == asset["sha256"]
        if asset["name"] == "notices.toml":  # the project's own: upstream has no person in its loop
            assert "upstream_sha256" not in asset and "sync" not in asset
        else:
            assert (asset["upstream_sha256"], asset["sync"]) == (UPSTREAM_SHA256[(name, asset["name"])], "terminus")
            assert asset["sha256"] != asset["upstream_sha256"]  # the built-in wording is the project's own


def test_every_parser_template_is_reachable() -> None:
    """Each parser text in the specs is produced by some reply above, except the not-an-object error: the scan only
    ever hands the decoder a `{…}`, in upstream's parser as here."""
    from tests.protocols.terminus.test_terminus_upstream import corpus

    seen: set[str] = set()
    for fmt, parse_reply in (("json", parse_json), ("xml", parse_xml)):
        for text in corpus()[fmt]:
            parsed = parse_reply(text, BUILTIN[fmt])
            seen |= {parsed.error_name, *parsed.warned}
    wanted = {name for spec in SPECS.values() for name in spec if name.startswith(("json.", "xml."))}
    assert wanted - seen == {"json.error.not_object"}


def test_templates_fill_and_their_examples_parse() -> None:
    json_prompt = (data_dir("terminus-json") / "prompt.txt").read_text()
    filled = json_prompt.format(instruction="TASK", terminal_state="Current Terminal Screen:\n$")
    assert filled.endswith("\nTASK\n\nCurrent terminal state:\nCurrent Terminal Screen:\n$\n")
    example = parse_json(filled, MJ)
    assert example.error == "" and example.task_complete is True
    assert example.commands == [Command("ls -la\n", 0.1), Command("cd project\n", 0.1)]

    xml_prompt = (data_dir("terminus-xml") / "prompt.txt").read_text()
    example = parse_xml(xml_prompt.format(instruction="TASK", terminal_state="$"), MX)
    assert example.error == "" and example.task_complete is True
    assert example.commands == [Command("ls -la\n", 0.1), Command("cd project\n", 0.1)]

    timeout = (data_dir("terminus-json") / "timeout.txt").read_text()
    text = timeout.format(command="sleep 99\n", timeout_sec=5.0, terminal_state="$ ")
    assert "sleep 99\n" in text and "5.0" in text and text.endswith("$ ")
