"""Where stderr is not a terminal the renderer writes plain lines: the same words as on a terminal, no escape codes,
no frames, nothing wrapped; what is not one of its lines (rich markup, a table) is still rich's."""

from __future__ import annotations

import io
import re

from rich.table import Table

from oc_repl.events import CommandExecution, ItemCompleted, ItemStarted, TurnStarted
from oc_repl.render.human import HumanRenderer, make_console
from oc_repl.render.plain_console import PlainConsole
from tests.conftest import run_cli
from tests.docker_support import answer, exec_call
from tests.render.test_wordings import shown

ESCAPES = re.compile(r"\x1b\[")


def plain(*events) -> str:
    stream = io.StringIO()
    render = HumanRenderer(PlainConsole(file=stream, highlight=False, width=240))
    for event in events:
        render(event)
    return stream.getvalue()


def test_a_command_and_its_output_read_as_on_a_terminal_without_the_frame():
    long = "x" * 300
    item = CommandExecution(id="c", tool="shell_exec", command="ls /missing", status="failed", exit_code=2,
                            aggregated_output=f"ls: cannot access '/missing'\n{long}\n")  # fmt: skip
    events = (TurnStarted(turn=3, max_turns=12), ItemStarted(item=item), ItemCompleted(item=item))
    text = plain(*events)
    assert text.splitlines() == [
        " turn 3/12 ".center(80, "─"),
        "▶ shell_exec  ls /missing",
        "shell_exec: ls /missing — failed",
        "  ls: cannot access '/missing'",
        f"  {long}",  # not wrapped at the console's width
    ]
    framed = shown(*events)  # on a terminal
    for line in ("▶ shell_exec  ls /missing", "shell_exec: ls /missing — failed", "ls: cannot access '/missing'"):
        assert line in framed


def test_markup_and_tables_are_still_rich():
    stream = io.StringIO()
    console = PlainConsole(file=stream, highlight=False, width=60)
    console.print("[bold]marked[/bold] up")
    table = Table("a", "b")
    table.add_row("1", "2")
    console.print(table)
    text = stream.getvalue()
    assert "marked up" in text and "[bold]" not in text and "┃ a" in text and "│ 1" in text


def test_a_console_on_a_stream_that_is_not_a_terminal_is_plain_and_on_a_terminal_rich(monkeypatch):
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    assert isinstance(make_console(), PlainConsole)  # the test's stderr is captured
    monkeypatch.setenv("FORCE_COLOR", "1")
    forced = make_console()
    assert forced.is_terminal and not isinstance(forced, PlainConsole)


def test_a_run_with_stderr_in_a_file_writes_it_plain(serve, tmp_path):
    server = serve({"replies": [exec_call("printf 'one\\ntwo\\n'"), answer("Finished.")]})
    proc = run_cli(["run", "--api-base", server.url, "--sandbox", f"local:{tmp_path / 'w'}", "--yes", "go"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert not ESCAPES.search(proc.stderr) and "╭" not in proc.stderr
    lines = proc.stderr.splitlines()
    at = lines.index("shell_exec: printf 'one\\ntwo\\n'")
    assert lines[at + 1 : at + 3] == ["  one", "  two"]
