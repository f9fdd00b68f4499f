"""What a pty terminal's screen costs the client: megabytes of escape sequences from the model's commands are drawn
within a bounded CPU time, and the model still sees how their output ended (test_pty_terminal.py beside this file
holds the screens of ordinary output against tmux's)."""

from __future__ import annotations

import time
from pathlib import Path

from benchmarks.pty_render import cpu_seconds, mixed_escapes
from oc_repl.protocols.terminus.pty_terminal import PtyTerminal
from tests.protocols.terminus import test_pty_terminal

box, pty = test_pty_terminal.box, test_pty_terminal.pty  # the fixtures: a local sandbox, a pty terminal in it


def run(terminal: PtyTerminal, keys: str) -> tuple[str, float]:
    terminal.observe()
    before = cpu_seconds()
    terminal.send_keys(keys)
    terminal.wait(60.0, time.monotonic())
    return terminal.capture(entire=True) if terminal.observe() else "", cpu_seconds() - before


def test_megabytes_of_escape_sequences_cost_seconds_not_minutes_and_their_end_is_shown(box, pty):
    (Path(box.workdir) / "noise").write_bytes(mixed_escapes())  # drawn whole, this took over a minute of CPU
    started = time.monotonic()
    seen, spent = run(pty, "cat noise; printf '\\033[?1049l\\033[0m\\n'; echo END-OF-NOISE\n")
    assert spent < 15, spent
    assert time.monotonic() - started < 45  # the wait ends once the shell is back at its prompt, not at 60 s
    assert "END-OF-NOISE" in pty.capture()


def test_what_was_not_drawn_is_said_and_the_screen_ends_as_the_output_did(box, pty):
    (Path(box.workdir) / "fill").write_bytes(b"\x1b#8" * 400_000)  # 4 ms each: half an hour, drawn whole
    seen, spent = run(pty, "cat fill; echo; echo END-OF-FILL\n")
    assert spent < 15, spent
    assert "characters of output skipped ...]" in seen
    # written over the screen of E's the alignment test leaves, as a terminal shows it: the end, then the prompt
    rows = pty.capture().split("\n")
    end = next(y for y, row in enumerate(rows) if row.startswith("END-OF-FILL"))
    assert rows[end - 1].startswith("[... ") and rows[end + 1].split(" ")[0].endswith(("#", "$"))


def test_the_outputs_last_lines_are_drawn_even_when_its_tail_costs_more_than_its_budget():
    from oc_repl.sandbox import pty_feed

    fed: list[str] = []

    def costly(text: str) -> None:  # 50 ms of CPU a chunk, as the costliest sequences on a loaded machine
        fed.append(text)
        end = time.thread_time() + 0.05
        while time.thread_time() < end:
            pass

    feed = pty_feed.BoundedFeed(costly)
    feed.spent = pty_feed.BUDGET  # this observation's budget is spent: what comes now is only kept
    feed(("x" * 100 + "\r\n") * 200 + "END-OF-OUTPUT\r\n$ ")
    feed.catch_up()
    drawn = "".join(fed)
    assert drawn.endswith("\r\nEND-OF-OUTPUT\r\n$ ")
    assert drawn.count("characters of output skipped") == 2  # before the tail, and where its drawing gave out
