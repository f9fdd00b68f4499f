"""Every deviation from upstream has a name: the README's training-exact table and `Deviations` hold the same rows,
`--exact` turns every one off, each field turns its behaviour off on its own, and `thread.started` lists those on."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from oc_repl import deviations, protocols
from oc_repl.config import validate
from oc_repl.errors import UsageError
from oc_repl.events import ParseError
from oc_repl.protocols.camel.protocol import CamelProtocol
from oc_repl.rows import Deviations
from oc_repl.types import Step
from tests.cli.test_cli import answer, base_args
from tests.conftest import ROOT, read_jsonl, run_cli
from tests.fakeserver import call_text
from tests.protocols.camel import test_hostile_calls as hostile

MODEL = Path("model")  # a tokenizer named: what --exact needs for camel (read only when a run starts)
PROTOCOLS = ["camel-terminal-toolkit", "terminus-json", "terminus-xml", "raw"]
# For each option of the table, a value that keeps its deviation on.
KEEPING: dict[str, Any] = {
    "observation_limit": 100,
    "relative_paths": "workdir",
    "sampling": "default",
    "temperature": 0.5,
    "top_p": 0.5,
    "max_tokens": 100,
    "seed": 7,
    "history": "full",
    "max_turns": 12,
    "loop_limit": 3,
    "wait": "detect",
}


def table() -> list[list[str]]:
    """The rows of the README's training-exact table, as cells."""
    section = (ROOT / "README.md").read_text(encoding="utf-8").split("## Training-exact runs", 1)[1].split("\n## ")[0]
    lines = [line for line in section.splitlines() if line.startswith("| ")]
    assert lines and lines[0].startswith("| name |"), "the table's first column names each row"
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines[1:]]


def kind_of(protocol: str) -> str:
    return protocols.manifests()[protocol].kind


def concerning(protocol: str) -> set[str]:
    """The rows that concern a protocol."""
    return deviations.concerning(protocols.kind_of(protocol))


def test_the_table_is_the_cores_rows_and_each_kinds_and_a_name_is_one_row():
    from oc_repl.protocols.kinds import KINDS
    from oc_repl.rows import EVERY_PROTOCOL

    declared = [row for kind in KINDS.values() for row in kind.deviations]
    table = deviations.rows()
    assert all(table[row.name] is row for row in [*EVERY_PROTOCOL, *declared])  # two kinds share a row, not a name
    assert set(table) == {row.name for row in [*EVERY_PROTOCOL, *declared]}
    assert all(concerning(p) - {row.name for row in EVERY_PROTOCOL} or p == "raw" for p in PROTOCOLS)


def test_every_row_of_the_readme_table_is_a_field_and_every_field_a_row():
    rows = deviations.rows()
    readme = table()
    assert [cells[0].strip("`") for cells in readme] == list(rows)  # the same names, in the same order
    for name, text, _upstream, option in readme:
        row = rows[name.strip("`")]
        assert text == row.text, name
        flags = [] if option == "—" else re.findall(r"`(--[a-z-]+)`", option.split(" (")[0])  # not what a note names
        assert flags == [f"--{o.replace('_', '-')}" for o in row.options], name


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_exact_turns_every_deviation_off(protocol: str):
    exact = validate({"protocol": protocol, "exact": True, "tokenizer": MODEL})
    assert deviations.from_settings(exact) == deviations.none()
    assert deviations.none().names() == []


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_default_settings_keep_the_defaults_that_concern_the_protocol(protocol: str):
    kind = kind_of(protocol)
    found = deviations.from_settings(validate({"protocol": protocol}))
    concern = concerning(protocol)
    defaults = deviations.defaults()
    expected = {name: getattr(defaults, name) and name in concern for name in deviations.rows()}
    assert {name: getattr(found, name) for name in deviations.rows()} == expected
    assert "loop_detection" in found.names()
    assert ("think_block_stripped" in found.names()) == kind.startswith("terminus")


@pytest.mark.parametrize(("name", "row"), [(n, r) for n, r in deviations.rows().items() if r.options])
def test_a_row_with_an_option_follows_it(name: str, row):
    protocol = next(p for p in PROTOCOLS if name in concerning(p))
    exact = validate({"protocol": protocol, "exact": True, "tokenizer": MODEL})
    upstream = validate({"protocol": protocol, **{option: getattr(exact, option) for option in row.options}})
    assert not getattr(deviations.from_settings(upstream), name)  # --exact's values, without --exact
    for option in row.options:
        kept = validate({"protocol": protocol, option: KEEPING[option]})
        assert getattr(deviations.from_settings(kept), name), option
        if option == "max_turns":  # a run's budget: --exact takes it, and the record says so
            given = validate({"protocol": protocol, "exact": True, "tokenizer": MODEL, option: KEEPING[option]})
            assert deviations.from_settings(given).names() == [name]
            continue
        with pytest.raises(UsageError, match="--exact runs exactly as upstream"):
            validate({"protocol": protocol, "exact": True, "tokenizer": MODEL, option: KEEPING[option]})


def test_the_readme_table_says_which_options_exact_accepts():
    rows = deviations.rows()
    for name, _text, _upstream, option in table():
        row = rows[name.strip("`")]
        if not row.options:
            continue
        protocol = next(p for p in PROTOCOLS if name.strip("`") in concerning(p))
        try:
            for given in row.options:
                validate({"protocol": protocol, "exact": True, "tokenizer": MODEL, given: KEEPING[given]})
            accepted = True
        except UsageError:
            accepted = False
        assert ("accepted with `--exact`" in option) == accepted, name


def test_a_turn_cap_given_with_exact_asks_for_no_text_upstream_lacks():
    given = {"protocol": "camel-terminal-toolkit", "exact": True, "tokenizer": MODEL, "max_turns": 3}
    budget = deviations.from_settings(validate(given))
    assert budget.names() == ["own_turn_cap"]
    names = [asset.name for asset in protocols.create("camel-terminal-toolkit", budget).assets()]
    exact = [asset.name for asset in protocols.create("camel-terminal-toolkit", deviations.none()).assets()]
    assert "notices.toml" not in names and names == exact


def test_create_hands_the_deviations_to_the_protocol():
    for protocol in ("camel-terminal-toolkit", "terminus-json"):
        assert protocols.create(protocol, deviations.none()).deviations == deviations.none()
        own = {row.name for row in protocols.kind_of(protocol).deviations}  # without a run: its kind's own defaults
        assert set(protocols.create(protocol).deviations.names()) == set(deviations.defaults().names()) & own


# --- each field turns its own behaviour off ----------------------------------------------------------------------

COMPLETE = call_text("shell_exec", {"id": "a", "command": "echo ran-it"})
CUT = COMPLETE + '\n<tool_call>\n{"name": "shell_exec", "arguments": {"id": "b", "comm'
UNREADABLE = '<tool_call>\n{"name": "shell_exec", "arguments": {"id": "b",}}\n</tool_call>'


def camel_step(tmp_path: Path, deviations: Deviations, text: str, finish: str) -> tuple[CamelProtocol, Step, list]:
    return hostile.camel_step(tmp_path, deviations, {"role": "assistant", "content": text}, finish)


def parse_errors(seen: list) -> list:
    return [e.item for e in seen if isinstance(e.item, ParseError)]


def test_a_cut_camel_reply_gets_the_notice_only_while_its_deviation_is_on(tmp_path):
    _, _, noticed = camel_step(tmp_path, deviations.defaults(), CUT, "length")
    assert parse_errors(noticed)
    protocol, _, ran = camel_step(tmp_path, deviations.defaults().replace(cut_reply_noticed=False), CUT, "length")
    assert not parse_errors(ran) and "ran-it" in protocol.request().messages[-1]["content"]  # training ran the call


def test_unreadable_camel_blocks_are_named_only_while_their_deviation_is_on(tmp_path):
    def harness_calls(protocol: CamelProtocol) -> list[str]:
        return [c["function"]["name"] for m in protocol.request().messages for c in m.get("tool_calls", [])]

    protocol, _, seen = camel_step(tmp_path, deviations.defaults(), UNREADABLE, "stop")
    assert parse_errors(seen)
    assert harness_calls(protocol) == []  # named in a result of its own, no call stands for it
    off = deviations.defaults().replace(unreadable_calls_named=False)
    protocol, _, seen = camel_step(tmp_path, off, UNREADABLE, "stop")
    assert parse_errors(seen) and harness_calls(protocol) == ["json_parse_error"]  # the training harness's answer
    _, _, cut = camel_step(tmp_path, off, CUT, "length")  # the other row still holds for a cut reply
    assert parse_errors(cut)


# --- the record ----------------------------------------------------------------------------------------------------


def test_thread_started_lists_the_deviations_in_force(serve, tmp_path):
    server = serve({"replies": [answer("Nothing to do.")]})
    transcript = tmp_path / "t.jsonl"
    args = base_args(server, tmp_path / "w", "--transcript", str(transcript), "--loop-limit", "0", "--max-turns", "10")
    proc = run_cli([*args, "say hello"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    started = read_jsonl(transcript)[0]
    kept = validate({"loop_limit": 0, "max_turns": 10})
    assert started["deviations"] == deviations.from_settings(kept).names()
    assert "loop_detection" not in started["deviations"] and "own_turn_cap" not in started["deviations"]
    assert {"results_cut", "argument_types_checked", "own_sampling"} <= set(started["deviations"])
    assert started["exact"] is False
