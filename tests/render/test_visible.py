"""What is shown is what is there: control characters, escape sequences and invisible format characters from the model
or the sandbox are shown in visible notation wherever a person reads them (live, `show`, the bench's transcript pages,
the answer on a terminal), never deleted and never passed raw."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
import unicodedata

from oc_repl.events import (
    CommandExecution,
    FileChange,
    FileUpdate,
    ItemCompleted,
    ItemStarted,
    ThreadCompleted,
    ThreadStarted,
    to_json,
)
from oc_repl.render.sanitize import fold, sanitize
from tests.conftest import cli_env, run_cli
from tests.docker_support import answer, exec_call, write_call

# What a hostile model writes: a command that shows as `echo ok` where escapes are dropped, and a reversed path.
OSC_HIDDEN = "echo ok\x1b]0;x; id > /tmp/oc-osc-ran ;\x07"
DCS_HIDDEN = "echo ok\x1bP ; id > /tmp/oc-dcs-ran ; \x1b\\"
BIDI_PATH = "notes/\u202etxt.sh"
RAW = ("\x1b", "\x07", "\x9b", "\u202e", "\u2066", "\u200f")


def test_an_escape_sequence_is_shown_whole_in_notation():
    assert sanitize("\x1b]0;t\x07") == "\\x1b]0;t\\x07"
    assert sanitize(OSC_HIDDEN) == "echo ok\\x1b]0;x; id > /tmp/oc-osc-ran ;\\x07"
    assert sanitize(DCS_HIDDEN) == "echo ok\\x1bP ; id > /tmp/oc-dcs-ran ; \\x1b\\"
    assert sanitize("\x1b[2J\x1b[31mred\x9b1m") == "\\x1b[2J\\x1b[31mred\\x9b1m"


def test_bidi_and_invisible_format_characters_are_shown():
    assert sanitize(BIDI_PATH) == "notes/\\u202etxt.sh"
    assert sanitize("a\u2066b\u2069c\u200ed\u200fe\u061cf\u200bg\ufeffh") == (
        "a\\u2066b\\u2069c\\u200ed\\u200fe\\u061cf\\u200bg\\ufeffh"
    )
    assert sanitize("tag\U000e0041") == "tag\\U000e0041"


def test_every_control_format_and_separator_character_is_covered():
    from oc_repl.render.sanitize import one_line

    hidden = {"Cc", "Cf", "Cs", "Zl", "Zp"}
    missed = [
        f"U+{code:04X}"
        for code in range(sys.maxunicode + 1)
        if unicodedata.category(chr(code)) in hidden and one_line(chr(code)) == chr(code)
    ]
    assert missed == []


def test_output_keeps_tab_and_newline_and_a_line_keeps_nothing_hidden():
    from oc_repl.render.sanitize import one_line

    assert sanitize("a\tb\nc\r\nd\re") == "a\tb\nc\nd\\re"
    assert one_line("echo ok\nid\t>x\r\n") == "echo ok\\nid\\t>x\\r\\n"
    assert fold(sanitize("\n".join(str(i) for i in range(100)))).count("\n") == 40


def hostile_transcript(tmp_path):
    path = tmp_path / "hostile.jsonl"
    events = [
        ThreadStarted(
            thread_id="t", model="m\x1b]0;RETITLED\x07", protocol="p", sandbox="local:.", api_base="a", task="go"
        ),
        ItemStarted(item=CommandExecution(id="1", tool="shell_exec", command=OSC_HIDDEN)),
        ItemCompleted(
            item=CommandExecution(
                id="1", tool="shell_exec", command=DCS_HIDDEN, aggregated_output="out\x1b]52;c;Y2xpcA==\x07put\u202e"
            )
        ),
        ItemCompleted(item=FileChange(id="2", changes=[FileUpdate(path=BIDI_PATH)])),
        ThreadCompleted(status="done", exit_code=0, final_answer="ok"),
    ]
    path.write_text("".join(to_json(e) + "\n" for e in events))
    return path


def test_show_renders_every_hidden_character_visibly(tmp_path):
    proc = run_cli(["show", str(hostile_transcript(tmp_path))], tmp_path)
    assert proc.returncode == 0, proc.stderr
    shown = proc.stdout
    assert not any(char in shown for char in RAW)
    for text in ("\\x1b]0;x; id > /tmp/oc-osc-ran ;\\x07", "\\x1bP ; id > /tmp/oc-dcs-ran ; \\x1b\\", "\\u202etxt.sh"):
        assert text in shown
    assert "m\\x1b]0;RETITLED\\x07" in shown and "out\\x1b]52;c;Y2xpcA==\\x07put\\u202e" in shown


def test_the_bench_transcript_page_shows_them_too(tmp_path):
    from oc_repl.bench.html import render_transcript

    page = tmp_path / "transcript.html"
    render_transcript(hostile_transcript(tmp_path), page, "title\u202e")
    text = page.read_text()
    assert not any(char in text for char in RAW)
    assert "id &gt; /tmp/oc-osc-ran" in text and "\\x1b]0;" in text and "\\u202etxt.sh" in text
    assert "title\\u202e" in text
    assert oct(page.stat().st_mode & 0o777) == "0o600"


def read_all(fd: int, proc: subprocess.Popen, timeout: float) -> bytes:
    data, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 1 << 16)
            except OSError:  # the other end is closed: the run is over
                break
            if not chunk:
                break
            data += chunk
        elif proc.poll() is not None:
            break
    return data


def test_the_final_answer_is_notation_on_a_terminal_and_exact_in_a_pipe(serve, tmp_path):
    hostile = "done\x1b]0;RETITLED\x07 \u202ereversed"
    server = serve({"replies": [answer(hostile)], "cycle": True})
    argv = [sys.executable, "-m", "oc_repl", "run", "--api-base", server.url, "--sandbox", f"local:{tmp_path / 'w'}"]
    argv += ["--yes", "say it"]
    done = subprocess.run(argv, capture_output=True, env=cli_env(tmp_path), timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 0 and done.stdout.decode() == hostile + "\n"  # a pipe gets it exactly
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        argv, stdout=follower, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, env=cli_env(tmp_path)
    )
    os.close(follower)
    try:
        out = read_all(leader, proc, 60).decode()
    finally:
        os.close(leader)
        proc.wait(30)
    assert proc.returncode == 0
    assert "done\\x1b]0;RETITLED\\x07 \\u202ereversed" in out and "\x1b]0;" not in out and "\u202e" not in out


def test_the_live_view_shows_the_hidden_command_and_what_it_printed(serve, tmp_path):
    command = "printf 'a\\342\\200\\256b\\n'\x1b]0;x; echo ran > hidden-ran ;\x07"
    server = serve({"replies": [exec_call(command), answer("fine")]})
    args = ["run", "--api-base", server.url, "--sandbox", f"local:{tmp_path / 'w'}", "--yes", "print"]
    proc = run_cli(args, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "w" / "hidden-ran").exists()  # what ran is what was shown:
    assert "\\x1b]0;x; echo ran > hidden-ran ;\\x07" in proc.stderr and "a\\u202eb" in proc.stderr
    assert not any(char in proc.stderr for char in RAW)


def test_an_edited_file_write_is_declined(serve, tmp_path):
    from tests.cli.test_approval import completed_items, session_for

    server = serve({"replies": [write_call("x", "a.txt"), answer("ok")]})
    events: list = []
    session = session_for(server, tmp_path, "camel-terminal-toolkit", ["write 1 characters to b.txt"], [], events)
    try:
        session.run("write it")
    finally:
        session.close()
    assert [i.status for i in completed_items(events) if i.type == "file_change"] == ["declined"]
    assert not (tmp_path / "w" / "a.txt").exists() and not (tmp_path / "w" / "b.txt").exists()
