"""PtyTerminal, the terminal for sandboxes without tmux, held against tmux itself on real shells.

The same keystrokes go through TmuxTerminal and PtyTerminal and the model's observations must match; key names are
checked byte for byte against what `tmux send-keys` writes; a terminus episode runs on a pty in a container.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from oc_repl.errors import UsageError
from oc_repl.protocols.terminus import TerminusJson
from oc_repl.sandbox.local import LocalSandbox
from oc_repl.sandbox.pty_terminal import PtyTerminal, key_bytes
from oc_repl.sandbox.terminal import Terminal, TmuxTerminal, _at_prompt
from tests.conftest import cli_env, run_cli
from tests.test_docker import IMAGE, docker_session
from tests.test_terminus_cli import js

needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
Step = list[tuple[str, float]]


@pytest.fixture
def box(tmp_path: Path) -> Iterator[LocalSandbox]:
    sandbox = LocalSandbox(tmp_path / "w")
    yield sandbox
    sandbox.close()


@pytest.fixture
def pty(box: LocalSandbox) -> Iterator[PtyTerminal]:
    terminal = PtyTerminal(box, cwd=box.workdir)
    yield terminal
    terminal.close()


@pytest.fixture
def tmux(box: LocalSandbox) -> Iterator[TmuxTerminal]:
    socket = f"oc-repl-test-{uuid.uuid4().hex[:8]}"
    terminal = TmuxTerminal(box, cwd=box.workdir, socket=socket)
    yield terminal
    terminal.close()
    subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True)


def play(terminal: Terminal, step: Step) -> str:
    """What the protocol does with one reply: each command's keys and wait, then one observation."""
    for keys, duration in step:
        started = time.monotonic()
        terminal.send_keys(keys)
        terminal.wait(duration, started)
    return terminal.incremental_output()


# Each step with a pattern its observation must match, so two equally broken terminals cannot pass.
SESSION: list[tuple[Step, str]] = [
    ([], r"\ACurrent Terminal Screen:\n"),
    ([("echo hi\n", 1.0)], r"\nhi\n"),
    ([("ls -la /\n", 1.0)], r" usr\n"),
    ([("printf 'a\\nb\\n'\n", 1.0)], r"\na\nb\n"),
    ([("echo $0 $TERM\n", 1.0)], r"\n-bash \S+\n"),  # a login shell, as tmux starts it
    ([("seq 1 100\n", 1.0)], r"\n99\n100\n"),  # scrolls past the 40 rows
    ([("C-l", 0.5)], r"\ANew Terminal Output:\n"),  # the screen goes into the history: the old capture is found
    ([("seq 1 50\n", 1.0)], r"\n49\n50\n"),
    ([("clear\n", 1.0)], r"\ACurrent Terminal Screen:\n[^\n]+\n{40}\Z"),  # only the prompt is left
    ([("python3\n", 0.5), ("print(6*7)\n", 0.5), ("C-d", 0.5)], r"\n42\n"),
    ([("sleep 100\n", 0.5), ("C-c", 0.5)], r"\^C"),
    ([("printf '%200s|\\n' wrapped\n", 1.0)], r"\n\n {33}wrapped\|\n"),  # wider than the screen
    ([("less /etc/passwd\n", 0.5)], r"\ACurrent Terminal Screen:\n\n*root:"),  # the alternate screen, and back
    ([("q", 0.5)], r"less /etc/passwd\n[^\n]+\n"),
    ([("printf '\\e[?1h'; read -rsn3 k; printf '%q\\n' \"$k\"; printf '\\e[?1l'\n", 0.3), ("Up", 0.5)], r"\$'\\EOA'"),
]


def steady(observation: str) -> str:
    """/proc's link count follows the number of processes and /tmp changes under the tests themselves: between the
    two runs of `ls -la /` they may differ, which is the machine, not the terminal."""
    return re.sub(r"(?m)^.* (proc|tmp)$", r"<changes> \1", observation)


@needs_tmux
def test_the_same_session_shows_the_same_observations_as_tmux(tmux, pty):
    for step, expected in SESSION:
        seen = steady(play(tmux, step))
        assert re.search(expected, seen), (step, seen)
        assert steady(play(pty, step)) == seen, step
    assert pty.capture() == tmux.capture() and pty.capture(entire=True) == tmux.capture(entire=True)


@needs_tmux
def test_history_is_kept_and_trimmed_as_tmux_keeps_it(tmux, pty):
    # tmux keeps 2000 lines and frees 200 at a time once full; after 3000 lines both hold the same tail
    for terminal in (tmux, pty):
        play(terminal, [("seq 1 3000\n", 5.0)])
    entire = tmux.capture(entire=True)
    assert "\n2999\n" in entire and "\n1\n" not in entire
    assert pty.capture(entire=True) == entire
    assert pty.capture().count("\n") == 40 and pty.capture() == tmux.capture()


def test_the_first_screen_is_the_prompt_on_a_160x40_screen(pty):
    screen = pty.capture()
    assert screen.count("\n") == 40 and screen.splitlines()[0].rstrip().endswith(("#", "$"))
    assert "160 40" in play(pty, [("echo $COLUMNS $LINES\n", 1.0)])


# --- keys ---------------------------------------------------------------------------------------------------------

KEY_NAMES = [
    *["Enter", "enter", "Escape", "Tab", "BTab", "BSpace", "Space", "Up", "Down", "Left", "Right", "Home", "End"],
    *["PPage", "PageUp", "NPage", "PgDn", "DC", "IC", *(f"F{n}" for n in range(1, 14))],
    *["C-a", "C-z", "c-c", "C-A", "C-[", "C-]", "C-^", "C-_", "C-@", "C-Space", "C-?", "C-1", "C-2", "C--"],
    *["C-/", "C-$", "C-é", "^c", "^[", "M-a", "M-A", "M-Enter", "M-C-a", "C-M-a", "M-BSpace", "M-Escape", "M-Tab"],
    *["M-é", "M-C-2", "M-C-$", "S-Up", "C-Up", "M-Up", "C-S-Up", "S-F1", "C-F5", "S-Home", "C-End", "M-S-Left"],
    *["S-PPage", "C-DC", "S-F12", "M-BTab", "S-a", "S-Tab", "S-Enter", "C-Tab", "C-Enter", "C-BSpace", "C-BTab"],
    *["KP0", "KP/", "KPEnter", "M-KPEnter", "0x41", "0x263a", "C-\\", "C-", "M-", "-", "^", "x-y", "Any", "ab"],
    *["echo hi\n", "C-c\n", "a\nb", "\t", " Enter", "日本", "C-c;", "ls;", "ls\\;", ";", ";;", "a;;", "M-\\;"],
    *["Escape;", ""],
]
DUMP = """
import os, sys, tty
os.write(1, sys.argv[2].encode())
tty.setraw(0)
with open(sys.argv[1], "ab", buffering=0) as out:
    while data := os.read(0, 1024):
        out.write(data)
"""


def tmux_writes(tmp_path: Path, names: list[str], setup: str = "") -> list[bytes]:
    """The bytes the pane's program reads for each name given to `tmux send-keys -t pane NAME`."""
    out, socket, sep = tmp_path / "keys.bin", f"oc-repl-keys-{uuid.uuid4().hex[:8]}", "~SEP~"
    out.touch()
    tmux = ["tmux", "-L", socket]
    program = shlex.join([sys.executable, "-c", DUMP, str(out), setup])
    subprocess.run([*tmux, "new-session", "-d", "-x", "160", "-y", "40", "-s", "k", program], check=True)
    try:
        time.sleep(0.5)  # the program's raw mode must be on before the first key
        for name in names:
            subprocess.run([*tmux, "send-keys", "-t", "k", name], check=True)
            subprocess.run([*tmux, "send-keys", "-t", "k", "-l", sep], check=True)
        deadline = time.monotonic() + 5
        while out.read_bytes().count(sep.encode()) < len(names) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
    return out.read_bytes().split(sep.encode())[: len(names)]


@needs_tmux
def test_key_names_send_the_bytes_tmux_sends(tmp_path):
    wanted = tmux_writes(tmp_path, KEY_NAMES)
    assert [key_bytes(name) for name in KEY_NAMES] == wanted
    assert wanted[KEY_NAMES.index("ls;")] == b"ls" and wanted[KEY_NAMES.index("ls\\;")] == b"ls;"


@needs_tmux
def test_cursor_keys_follow_the_application_cursor_mode_as_in_tmux(tmp_path):
    names = ["Up", "Down", "Left", "Right", "Home", "End", "C-Up", "F1"]
    wanted = tmux_writes(tmp_path, names, setup="\x1b[?1h")
    assert [key_bytes(name, app_cursor=True) for name in names] == wanted
    assert wanted[0] == b"\x1bOA"


def test_control_keys_interrupt_and_edit_the_command_line(pty):
    play(pty, [("sleep 100\n", 0.3)])
    assert not pty.probe().idle  # sleep runs in the foreground
    assert "^C" in play(pty, [("C-c", 2.0)]) and pty.probe().idle
    # BSpace edits, Up recalls the last command
    assert "\nabc\n" in play(pty, [("echo abcX", 0.2), ("BSpace", 0.2), ("Enter", 1.0)])
    assert play(pty, [("Up", 0.3), ("Enter", 1.0)]).count("\nabc\n") == 1
    assert pty.capture(entire=True).count("\nabc\n") == 2
    # Escape then `.`: readline's yank-last-arg; Tab completes a command name
    seen = play(pty, [("echo lastarg\n", 1.0), ("echo ", 0.1), ("Escape", 0), (".\n", 1.0)])
    assert seen.count("# echo lastarg\nlastarg\n") + seen.count("$ echo lastarg\nlastarg\n") == 2
    assert "\ntab-ok\n" in play(pty, [("ech", 0.2), ("Tab", 0.3), ("tab-ok\n", 1.0)])


def test_literal_text_runs_and_a_trailing_semicolon_is_dropped(pty):
    seen = play(pty, [("echo one\necho two\n", 1.0)])
    assert "\none\n" in seen and "\ntwo\n" in seen
    # tmux eats the `;` ending an argument, and turns `\;` there into `;`
    assert "\n[x]\n" in play(pty, [('echo "[x;', 0.2), (']"\n', 1.0)])
    assert "\n[y;]\n" in play(pty, [('echo "[y\\;', 0.2), (']"\n', 1.0)])
    assert "\nz\n" in play(pty, [("", 0.1), ("echo z", 0.1), ("Enter", 1.0)])  # "" sends nothing


@pytest.mark.parametrize("kind", [pytest.param("tmux", marks=needs_tmux), "pty"])
def test_the_wait_ends_once_the_shell_is_back_at_its_prompt(kind, request):
    terminal: Terminal = request.getfixturevalue(kind)
    terminal.incremental_output()
    started = time.monotonic()
    terminal.send_keys("sleep 1\n")
    terminal.wait(5.0, started)
    assert 0.9 <= time.monotonic() - started < 3.0
    # `read` is a builtin: the shell sleeps in it with no child, owning the terminal, yet it is not done
    terminal.incremental_output()
    started = time.monotonic()
    seen = play(terminal, [("read -t 2 x; echo DONE-42\n", 3.0)])
    assert "\nDONE-42\n" in seen and time.monotonic() - started >= 1.9
    started = time.monotonic()
    terminal.send_keys("true\n")
    terminal.wait(1.0, started, exact=True)
    assert time.monotonic() - started >= 1.0


def test_a_prompt_is_told_by_the_text_left_of_the_cursor():
    assert _at_prompt("root@box:/app#", 15) and _at_prompt("user@box:~$", 12) and _at_prompt(">", 2)
    assert _at_prompt("host% ", 6) and _at_prompt("root@box:/app# echo hi", 15)  # typed text after the cursor
    assert not _at_prompt("root@box:/app# read -t 2 x", 26)  # the cursor after the command line: not a prompt
    assert not _at_prompt("", 0) and not _at_prompt("DONE-42", 7) and not _at_prompt("root@box:/app#", 14)
    assert not _at_prompt("[box /app] λ", 13)  # other prompts only lose the early return


def test_an_ended_shell_ends_the_terminal(pty):
    started = time.monotonic()
    assert "exit" in play(pty, [("exit\n", 5.0)])
    assert time.monotonic() - started < 3.0 and not pty.alive()


# --- choosing the terminal ------------------------------------------------------------------------------------------


@needs_tmux
def test_tmux_when_the_sandbox_has_it_else_the_pty_and_the_override(box, tmp_path, monkeypatch):
    def opened() -> Terminal:
        protocol = TerminusJson()
        try:
            return protocol._terminal_for(box)
        finally:
            protocol.close()

    monkeypatch.delenv("OC_REPL_TERMINAL", raising=False)
    assert isinstance(opened(), TmuxTerminal)
    monkeypatch.setenv("OC_REPL_TERMINAL", "pty")
    assert isinstance(opened(), PtyTerminal)
    monkeypatch.setenv("OC_REPL_TERMINAL", "screen")
    with pytest.raises(UsageError):
        opened()
    # a PATH without tmux, as in a sandbox that lacks it
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in filter(shutil.which, ("bash", "cat", "rm", "stty", "tput")):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("OC_REPL_TERMINAL", "auto")
    assert isinstance(opened(), PtyTerminal)


# --- in a container -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def docker_client() -> Iterator[Any]:
    yield from docker_session()


@pytest.mark.docker
def test_a_terminus_episode_on_a_pty_in_a_container(serve, tmp_path, docker_client):
    keys = 'echo "tmux=[$TMUX]"; echo made > /tmp/made.txt\n'
    server = serve({"replies": [js([(keys, 1.0)], complete=True), js([], complete=True)]})
    args = ["run", "--api-base", server.url, "--retries", "0", "--json", "--protocol", "terminus-json"]
    args += ["--sandbox", f"docker-image:{IMAGE}", "--verify", "grep -qx made /tmp/made.txt", "make the file"]
    proc = run_cli(args, tmp_path, timeout=120, env={**cli_env(tmp_path), "OC_REPL_TERMINAL": "pty"})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1])["status"] == "verified"
    messages = server.chat_requests()[-1]["body"]["messages"]
    first, observation = messages[0]["content"], messages[-1]["content"]
    assert "Current Terminal Screen:\nroot@" in first and ":/# \n" not in first  # prompt trimmed like tmux
    assert "\ntmux=[]\n" in observation  # the image has tmux, and yet no tmux ran: the override holds


@pytest.mark.docker
def test_a_container_without_tmux_gets_the_pty(docker_client, monkeypatch):
    from oc_repl.sandbox.docker import DockerImageSandbox

    monkeypatch.delenv("OC_REPL_TERMINAL", raising=False)
    box = DockerImageSandbox.from_spec(IMAGE)
    try:
        assert box.exec("mv /usr/bin/tmux /usr/bin/tmux.hidden", timeout=30).exit_code == 0
        protocol = TerminusJson()
        terminal = protocol._terminal_for(box)
        assert isinstance(terminal, PtyTerminal)
        assert "\nhello from /dev/pts/" in play(terminal, [("echo hello from $(tty)\n", 1.0)])
        assert "^C" in play(terminal, [("sleep 100\n", 0.5), ("C-c", 2.0)]) and terminal.probe().idle
        protocol.close()
    finally:
        box.close()
