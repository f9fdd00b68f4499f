"""Each line a person reads says what happened: a reply whose call could not be read is not called truncated, a
Harbor verdict names the reward that decided it, zeros a server never sent are not shown as counts, an unknown sandbox
scheme is named, and the assets table explains its columns."""

from __future__ import annotations

import pytest
from rich.console import Console

from oc_repl.events import TurnCompleted, UsageInfo, VerifyCompleted
from oc_repl.render.human import HumanRenderer
from tests.conftest import run_cli
from tests.docker_support import answer


def shown(*events) -> str:
    console = Console(record=True, width=200, highlight=False)
    render = HumanRenderer(console)
    for event in events:
        render(event)
    return console.export_text()


def test_a_call_that_did_not_parse_is_not_called_truncated():
    usage = UsageInfo(input_tokens=10, output_tokens=5)
    unreadable = shown(TurnCompleted(turn=1, usage=usage, finish_reason="tool_calls", truncated=True))
    assert "truncated" not in unreadable and "a tool call that could not be read, not run" in unreadable
    cut = shown(TurnCompleted(turn=1, usage=usage, finish_reason="length", truncated=True))
    assert "cut at the token limit" in cut


def test_a_harbor_verdict_names_its_reward_not_the_script_exit():
    text = shown(VerifyCompleted(command="/tests/test.sh (count-words)", passed=False, exit_code=0, tests_passed=0,
                                 tests_total=2, reward=0.0))  # fmt: skip
    assert "0/2 tests passed · reward 0" in text and "(exit 0)" not in text
    plain = shown(VerifyCompleted(command="test -f x", passed=False, exit_code=1))
    assert "test -f x (exit 1)" in plain


def test_a_server_that_sends_no_usage_is_not_shown_as_zero_tokens(serve, tmp_path):
    server = serve({"replies": [{**answer("hello"), "omit_usage": True}]})
    proc = run_cli(["run", "--api-base", server.url, "--sandbox", f"local:{tmp_path / 'w'}", "--yes", "hi"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "no token counts sent" in proc.stderr and "0 in / 0 out" not in proc.stderr


def test_an_unknown_sandbox_scheme_is_named(tmp_path):
    proc = run_cli(["run", "--sandbox", "dockr:foo", "hi"], tmp_path)
    assert proc.returncode == 2
    assert "unknown scheme 'dockr'" in proc.stderr and "not of the form" not in proc.stderr


def test_the_assets_table_has_a_legend(tmp_path):
    proc = run_cli(["protocols", "list"], tmp_path)
    assert proc.returncode == 0
    assert "UPSTREAM: whether its sha256 is upstream's own: match, differs" in proc.stdout


@pytest.mark.parametrize("line", ["14", "15"])
def test_the_exact_header_names_the_rich_line_and_what_is_still_not_as_trained(serve, tmp_path, line):
    server = serve({"replies": [answer("hello")]})
    work = f"local:{tmp_path / 'w'}"
    more = ["--exact", "--wire", "chat", "--camel-rich", line]
    proc = run_cli(["run", "--api-base", server.url, "--sandbox", work, "--yes", *more, "hi"], tmp_path)
    # the header comes first, whether or not the run then finds camel's upstream assets synced on this machine
    first = proc.stderr.splitlines()[1]
    assert first.startswith(f"exact (--camel-rich {line}), except: server_renders_tools, calls_may_be_constrained")
