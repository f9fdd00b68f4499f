"""Blocking output as the model saw it: oc-repl's conversion equals `Text.from_ansi(...).plain` of rich 14.3.4 and
of rich 15.0.0 (the two release lines camel's toolkit may have run with), each run in a virtualenv of its own, on
outputs holding every character the two split differently, final line breaks compared."""

from __future__ import annotations

import json
import random
import subprocess

import pytest

from oc_repl.protocols.camel.text import RICH_LINES, terminal_text
from tests.cli.test_cli import answer, base_args
from tests.conftest import read_jsonl, run_cli
from tests.fakemodel import call_text
from tests.packages import cached_venv

RICH = {"14": "rich==14.3.4", "15": "rich==15.0.0"}
BREAKS = ["\n", "\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]
PIECES = [*BREAKS, "a", "10%", "é", "\x1b[31m", "\x1b[0m", "\x1b]0;title\x07", "\x1b]2;t\x1b\\", "\x07", "\b", " "]
# escape sequences in pieces, whole or cut short, that the decoder must take apart as rich does
ESCAPES = ["\x1b", "[", "]", "(", "B", "0", ";", "31", "m", "K", "?", "\\", "\r", "\n", "\x08", "\x07", "a", "é"]
PROBE = (
    "import json, sys\nfrom rich.text import Text\n"
    "print(json.dumps([Text.from_ansi(s).plain for s in json.load(sys.stdin)]))"
)


def samples() -> list[str]:
    """Each break alone, at the end, doubled and between words; then seeded random mixes of all the pieces."""
    found = ["", "plain", "a\nb\n", "10%\r100%\n", "progress 1\rprogress 2\r\n", "x\x1b]0;t\x07y\n"]
    for brk in BREAKS:
        found += [brk, f"a{brk}", f"a{brk}b", f"a{brk}{brk}b{brk}", f"{brk}a"]
    rng = random.Random(20261207)
    found += ["".join(rng.choices(PIECES, k=rng.randint(1, 12))) for _ in range(400)]
    found += ["".join(rng.choices(ESCAPES, k=rng.randint(0, 24))) for _ in range(3000)]
    return found


@pytest.mark.parametrize("line", RICH_LINES)
def test_the_conversion_equals_that_rich_lines_own(line: str):
    python = cached_venv(f"rich-{line}", [RICH[line]], RICH[line])
    texts = samples()
    done = subprocess.run(
        [str(python), "-c", PROBE], input=json.dumps(texts), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    theirs = json.loads(done.stdout)
    differing = [
        (t, ours, plain)
        for t, plain in zip(texts, theirs, strict=True)
        if (ours := terminal_text(t.encode(), line)) != plain
    ]
    assert differing == []


def test_the_two_lines_differ_where_rich_changed():
    assert terminal_text(b"a\nb\n", "14") == "a\nb" and terminal_text(b"a\nb\n", "15") == "a\nb\n"
    assert terminal_text(b"10%\r100%", "14") == "10%\n100%" and terminal_text(b"10%\r100%", "15") == "100%"
    assert terminal_text("x\u2028y".encode(), "14") == "x\ny" and terminal_text("x\u2028y".encode(), "15") == "x\u2028y"


@pytest.mark.parametrize(
    ("raw", "line", "text"),
    [
        (b"10%\r100%", "15", "100%"),
        (b"a\r\nb\r\n", "15", "\n\n"),
        (b"a\r\nb\r\n", "14", "a\nb"),
        (b"hello\nworld\n", "15", "hello\nworld\n"),
        (b"hello\nworld\n", "14", "hello\nworld"),
        (b"\x1b[1;31mred\x1b[0m plain", "14", "red plain"),
        (b"\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\", "14", "link"),
        (b"\x1b(B\x1b[mreset", "14", "reset"),
        (b"ab\x08c\x07", "14", "abc"),
        (b"ok\xff\xfe!", "14", "ok!"),
        (b"\x1b]0;title\x07x", "14", "0;titlex"),  # upstream keeps a BEL-closed OSC's text
    ],
)
def test_terminal_text(raw: bytes, line: str, text: str):
    assert terminal_text(raw, line) == text


@pytest.mark.parametrize(("line", "seen"), [("14", "one\ntwo"), ("15", "one\ntwo\n")])
def test_a_run_sends_the_chosen_lines_text_and_records_the_line(serve, tmp_path, line: str, seen: str):
    server = serve(
        {
            "replies": [
                {"text": call_text("shell_exec", {"id": "a", "command": "printf 'one\\ntwo\\n'"})},
                answer("Done."),
            ]
        }
    )
    transcript = tmp_path / "t.jsonl"
    args = base_args(server, tmp_path / "w", "--camel-rich", line, "--transcript", str(transcript), "go")
    assert run_cli(args, tmp_path).returncode == 0
    last = server.chat_requests()[-1]["body"]["messages"][-1]["content"]
    assert last == f"<tool_response>\n{seen}\n</tool_response>"
    started = next(e for e in read_jsonl(transcript) if e["type"] == "thread.started")
    assert started["options"]["camel_rich"] == line
