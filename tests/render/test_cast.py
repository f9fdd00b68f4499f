"""`oc-repl show --cast`: asciicast v2 recordings of real transcripts. A terminus run replays its screens (the last
frame is the run's last screen); a camel run is a terminal session of its commands and their output; the times are
the transcript's, sped up and with pauses capped as asked."""

from __future__ import annotations

import json
import re
from itertools import pairwise
from pathlib import Path

import pytest

from oc_repl.render.cast import CLEAR
from oc_repl.render.sanitize import sanitize
from tests.cli.test_cli import answer
from tests.conftest import read_jsonl, run_cli
from tests.docker_support import exec_call
from tests.protocols.terminus.test_terminus_cli import js

SGR = re.compile(r"\x1b\[[0-9;]*m")


def terminus_transcript(serve, tmp_path: Path) -> Path:
    """A terminus-json run on a local terminal: two commands, a pause of a second and a half, then done."""
    replies = [
        js([("echo cast-check-one\n", 0.5)]),
        {**js([("printf 'two\\nlines\\n'\n", 0.5)]), "delay": 1.5},
        js([], complete=True),
        js([], complete=True),
    ]
    server = serve({"replies": replies})
    transcript = tmp_path / "terminus.jsonl"
    args = ["run", "--api-base", server.url, "--protocol", "terminus-json", "--sandbox", f"local:{tmp_path / 'tw'}"]
    proc = run_cli([*args, "--yes", "--retries", "0", "--transcript", str(transcript), "show the screens"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    return transcript


def camel_transcript(serve, tmp_path: Path) -> Path:
    server = serve({"replies": [exec_call("echo cast-camel-output"), answer("All done.")]})
    transcript = tmp_path / "camel.jsonl"
    args = ["run", "--api-base", server.url, "--sandbox", f"local:{tmp_path / 'cw'}", "--yes", "--verify", "true"]
    proc = run_cli([*args, "--transcript", str(transcript), "record the session"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    return transcript


def screens(transcript: Path) -> list[str]:
    """The terminal's visible screens the run recorded at each observation, without their empty last rows."""
    return [
        e["item"]["screen"].rstrip("\n")
        for e in read_jsonl(transcript)
        if e["type"] == "item.completed" and e["item"].get("tool") == "terminal"
    ]


def last_screen(transcript: Path) -> str:
    found = screens(transcript)
    assert len(found) >= 3
    return found[-1]


def read_cast(path: Path) -> tuple[dict, list[list]]:
    """The recording, checked against asciicast v2: a header object, then [time, "o", text] events in time order."""
    lines = path.read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])
    assert header["version"] == 2 and isinstance(header["width"], int) and isinstance(header["height"], int)
    assert header["width"] > 0 and header["height"] > 0 and isinstance(header["timestamp"], int)
    events = [json.loads(line) for line in lines[1:]]
    assert events and all(len(e) == 3 and e[1] == "o" and isinstance(e[2], str) for e in events)
    times = [e[0] for e in events]
    assert times == sorted(times) and times[0] >= 0
    return header, events


def final_frame(events: list[list]) -> str:
    """What a terminal shows at the end: the text after the last clear, without colours."""
    output = "".join(e[2] for e in events)
    return SGR.sub("", output.rsplit(CLEAR, 1)[-1]).replace("\r\n", "\n")


def test_a_terminus_recording_replays_its_screens_with_real_timing(serve, tmp_path):
    transcript = terminus_transcript(serve, tmp_path)
    cast = tmp_path / "run.cast"
    proc = run_cli(["show", str(transcript), "--cast", str(cast)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    header, events = read_cast(cast)
    assert all(e[2].startswith(CLEAR) for e in events)  # each frame is a whole screen
    assert final_frame(events) == sanitize(last_screen(transcript))
    frames = [SGR.sub("", e[2].removeprefix(CLEAR)).replace("\r\n", "\n") for e in events]
    assert frames == [sanitize(screen) for screen in screens(transcript)]  # every screen the terminal showed, in order
    assert any("cast-check-one" in f for f in frames) and any("lines" in f for f in frames)
    gaps = [b[0] - a[0] for a, b in pairwise(events)]
    assert max(gaps) > 1.4  # the server's pause is in it, as it happened
    assert header["height"] >= final_frame(events).count("\n") + 1
    assert max(len(line) for line in final_frame(events).split("\n")) < header["width"]

    fast = tmp_path / "fast.cast"
    args = ["show", str(transcript), "--cast", str(fast), "--speed", "4", "--idle-cap", "0.5"]
    assert run_cli(args, tmp_path).returncode == 0
    _, quick = read_cast(fast)
    assert [e[2] for e in quick] == [e[2] for e in events]
    quick_gaps = [b[0] - a[0] for a, b in pairwise(quick)]
    assert max(quick_gaps) <= 0.5 / 4 + 1e-6
    assert all(q == pytest.approx(min(g, 0.5) / 4, abs=1e-3) for q, g in zip(quick_gaps, gaps, strict=True))


def test_a_terminus_recording_is_the_terminals_own_screen_not_what_the_model_was_told(serve, tmp_path):
    work = tmp_path / "w"
    # the terminal's own tmux saves its screen a second after the last command, from inside: what it really showed
    replies = [
        js([("for i in 1 2 3; do echo CAST-LINE-$i; done\n", 0.5)]),
        js([("echo FINAL-42; ( (sleep 1; tmux capture-pane -p > final-screen.txt) & )\n", 0.5)]),
        {**js([], complete=True), "delay": 4},
        js([], complete=True),
    ]
    server = serve({"replies": replies})
    transcript = tmp_path / "t.jsonl"
    args = ["run", "--api-base", server.url, "--protocol", "terminus-json", "--sandbox", f"local:{work}", "--yes"]
    proc = run_cli([*args, "--retries", "0", "--transcript", str(transcript), "show the lines"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    observations = [e["item"] for e in read_jsonl(transcript) if e["type"] == "item.completed"]
    told = [item["aggregated_output"] for item in observations if item.get("tool") == "terminal"]
    assert "CAST-LINE-1" not in told[1]  # the model was shown only what was new
    cast = tmp_path / "t.cast"
    assert run_cli(["show", str(transcript), "--cast", str(cast)], tmp_path).returncode == 0
    _, events = read_cast(cast)
    real = (work / "final-screen.txt").read_text().rstrip("\n")
    assert final_frame(events) == sanitize(real)
    after = SGR.sub("", events[1][2].removeprefix(CLEAR)).replace("\r\n", "\n")  # the frame after the second command
    assert all(f"CAST-LINE-{i}" in after for i in (1, 2, 3)) and "echo FINAL-42" in after and "\nFINAL-42\n" in after


def test_a_camel_recording_is_a_session_of_its_commands_and_outputs(serve, tmp_path):
    transcript = camel_transcript(serve, tmp_path)
    cast = tmp_path / "camel.cast"
    assert run_cli(["show", str(transcript), "--cast", str(cast)], tmp_path).returncode == 0
    header, events = read_cast(cast)
    text = SGR.sub("", "".join(e[2] for e in events))
    assert "# record the session" in text
    assert "$ echo cast-camel-output\r\ncast-camel-output\r\n" in text
    assert "All done." in text and "PASS true" in text and "verified after 2 turns" in text
    assert CLEAR not in text and "\x1b" not in SGR.sub("", "".join(e[2] for e in events))


def test_a_recording_shows_escape_sequences_the_model_wrote_instead_of_playing_them(serve, tmp_path):
    server = serve({"replies": [exec_call("echo ok"), answer("\x1b]0;owned\x07\x1b[2J\x1b[31mred")]})
    transcript = tmp_path / "t.jsonl"
    args = ["run", "--api-base", server.url, "--sandbox", f"local:{tmp_path / 'w'}", "--yes"]
    assert run_cli([*args, "--transcript", str(transcript), "x"], tmp_path).returncode == 0
    cast = tmp_path / "t.cast"
    assert run_cli(["show", str(transcript), "--cast", str(cast)], tmp_path).returncode == 0
    text = "".join(e[2] for e in read_cast(cast)[1])
    assert "\x1b]" not in text and "\x07" not in text and "\x1b[2J" not in text
    assert "\\x1b]0;owned\\x07\\x1b[2J\\x1b[31mred" in text


def test_a_raw_recording_is_a_session_of_the_models_reply(serve, tmp_path):
    server = serve({"flavour": "noparser", "replies": [{"text": "The answer is forty-two."}]})
    transcript = tmp_path / "raw.jsonl"
    args = ["run", "--api-base", server.url, "--protocol", "raw", "--sandbox", f"local:{tmp_path / 'w'}"]
    assert run_cli([*args, "--transcript", str(transcript), "what is the answer"], tmp_path).returncode == 0
    cast = tmp_path / "raw.cast"
    assert run_cli(["show", str(transcript), "--cast", str(cast)], tmp_path).returncode == 0
    _, events = read_cast(cast)
    text = SGR.sub("", "".join(e[2] for e in events))
    assert "# what is the answer" in text and "The answer is forty-two." in text
    assert CLEAR not in text and "$ " not in text  # no screens, no commands: the conversation only
