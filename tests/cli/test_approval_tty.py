"""A hostile model against the shell's approval prompt in a real terminal (tmux): what the prompt shows is what runs,
escape sequences, bidi controls and newlines included; an edit runs as edited and is recorded as such."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.cli.test_repl_tmux import TmuxShell, answer, exec_call
from tests.docker_support import write_call

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")

OSC = "echo ok\x1b]0;x; echo osc > osc-ran ;\x07"
DCS = "echo ok\x1bP ; echo dcs > dcs-ran ; \x1b\\"
TWO_LINES = "echo one\necho two > two.txt"
TO_EDIT = "touch orig\u200b.txt"


def approve_line(screen: str, count: int) -> str:
    return [line for line in screen.splitlines() if line.startswith("approve? ")][count - 1]


def test_the_approval_prompt_shows_what_runs(tmp_path, serve):
    replies = [exec_call(OSC), exec_call(DCS), write_call("x", "notes/\u202etxt.sh"), exec_call(TWO_LINES)]
    server = serve({"replies": [*replies, exec_call(TO_EDIT), answer("all done")]})
    sh = TmuxShell(tmp_path, server.url)
    try:
        sh.type_line("do the things")
        seen = []
        for count in range(1, 5):
            seen.append(approve_line(sh.wait_for("approve?", count=count), count))
            sh.type_line("y")
        assert seen == [
            "approve? echo ok\\x1b]0;x; echo osc > osc-ran ;\\x07",
            "approve? echo ok\\x1bP ; echo dcs > dcs-ran ; \\x1b\\",
            "approve? write 1 characters to notes/\\u202etxt.sh",
            "approve? echo one\\necho two > two.txt",
        ]
        assert approve_line(sh.wait_for("approve?", count=5), 5) == "approve? touch orig\\u200b.txt"
        assert (sh.work / "osc-ran").read_text() == "osc\n" and (sh.work / "dcs-ran").read_text() == "dcs\n"
        assert (sh.work / "notes" / "\u202etxt.sh").read_text() == "x" and (sh.work / "two.txt").exists()
        sh.type_line("e")
        screen = sh.wait_for("edit › ")
        assert "edit › touch orig\\u200b.txt" in screen  # the edit buffer hides nothing either
        sh.send("C-u")
        sh.type_line("touch edited.txt")
        sh.wait_for("all done")
        assert (sh.work / "edited.txt").exists() and not list(sh.work.glob("orig*"))
    finally:
        sh.close()
    transcript = next((tmp_path / "state").rglob("*-shell.jsonl"))
    ran = [
        event["item"]["command"]
        for event in map(json.loads, transcript.read_text().splitlines())
        if event["type"] == "item.completed" and event["item"]["type"] == "command_execution"
    ]
    assert ran == [OSC, DCS, TWO_LINES, "touch edited.txt"]


def test_the_shell_keeps_its_records_private(tmp_path, serve):
    server = serve({"replies": [answer("hello")]})
    sh = TmuxShell(tmp_path, server.url, "--yes")
    try:
        sh.type_line("say hello")
        sh.wait_for("hello", count=2)
        sh.type_line("/exit")
        sh.wait_for("oc-repl-exit-status=0")
    finally:
        sh.close()
    state = tmp_path / "state"
    transcript = next(state.rglob("*-shell.jsonl"))
    assert oct((state / "oc-repl" / "history").stat().st_mode & 0o777) == "0o600"
    assert oct(transcript.stat().st_mode & 0o777) == "0o600"
    made = [state, *[p for p in transcript.parents if state in p.parents]]
    assert {oct(p.stat().st_mode & 0o777) for p in made} == {"0o700"}
