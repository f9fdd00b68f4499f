"""PtyTerminal, the terminal for sandboxes without tmux, held against tmux itself on real shells; and what both
terminals promise: keys of any kind and length typed, and no wait that ends before the shell has read its keys.

The same keystrokes go through TmuxTerminal and PtyTerminal and the model's observations must match; key names are
checked byte for byte against what `tmux send-keys` writes. The same in a container: test_docker_terminus.py.
"""

from __future__ import annotations

import hashlib
import re
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from oc_repl.errors import UsageError
from oc_repl.protocols.terminus.keys import deliverable, key_bytes
from oc_repl.protocols.terminus.protocol import TerminusJson
from oc_repl.protocols.terminus.pty_terminal import PtyTerminal
from oc_repl.protocols.terminus.tmux import Terminal, TmuxTerminal, _at_prompt, private_socket
from oc_repl.protocols.terminus.tmux_inside import InsideTmuxTerminal
from oc_repl.sandbox.local import LocalSandbox
from oc_repl.types import Sandbox

needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
# every terminal: tmux looked at from outside, tmux waited on inside the sandbox (one call a command), the pty
KINDS = [pytest.param("tmux", marks=needs_tmux), pytest.param("tmux_inside", marks=needs_tmux), "pty"]
Step = list[tuple[str, float]]


def observed(terminal) -> str:
    """An observation with the markers protocols.md quotes, as the terminus protocols word it."""
    kind, text = terminal.observe()
    return ("New Terminal Output:\n" if kind == "new" else "Current Terminal Screen:\n") + text


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
    terminal = TmuxTerminal(box, cwd=box.workdir, socket=private_socket())
    yield terminal
    terminal.close()


@pytest.fixture
def tmux_inside(box: LocalSandbox) -> Iterator[InsideTmuxTerminal]:
    terminal = InsideTmuxTerminal(box, cwd=box.workdir, socket=private_socket())
    yield terminal
    terminal.close()


@contextmanager
def opened(kind: str, box: Sandbox, cwd: str, upstream_keys: bool = False) -> Iterator[Terminal]:
    """A terminal of any kind, as the protocol opens it: a private tmux server locally, tmux's own in a container."""
    if kind == "pty":
        terminal: Terminal = PtyTerminal(box, cwd=cwd, upstream_keys=upstream_keys)
    else:
        socket = private_socket() if box.spec.startswith("local:") else None
        made = InsideTmuxTerminal if kind == "tmux_inside" else TmuxTerminal
        terminal = made(box, cwd=cwd, socket=socket, upstream_keys=upstream_keys)
    try:
        yield terminal
    finally:
        terminal.close()


def play(terminal: Terminal, step: Step, exact: bool = False) -> str:
    """What the protocol does with one reply: each command's keys and wait, then one observation."""
    for number, (keys, duration) in enumerate(step, 1):
        terminal.run(keys, duration, time.monotonic(), until_idle=not exact, observe=number == len(step))
    return observed(terminal)


# Each step with a pattern its observation must match, so two equally broken terminals cannot pass.
SESSION: list[tuple[Step, str]] = [
    ([], r"\ACurrent Terminal Screen:\n"),
    ([("echo hi\n", 1.0)], r"\nhi\n"),
    ([("ls -la /usr\n", 1.0)], r" share\n"),  # not /: its /tmp line is the host's, of any size
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
def test_the_same_session_shows_the_same_observations_as_tmux(tmux, tmux_inside, pty):
    for step, expected in SESSION:
        seen = steady(play(tmux, step))
        assert re.search(expected, seen), (step, seen)
        assert steady(play(tmux_inside, step)) == seen, step
        assert steady(play(pty, step)) == seen, step
    for other in (tmux_inside, pty):
        assert other.capture() == tmux.capture() and other.capture(entire=True) == tmux.capture(entire=True)


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


@pytest.mark.parametrize("kind", KINDS)
def test_the_wait_ends_once_the_shell_is_back_at_its_prompt(kind, request):
    terminal: Terminal = request.getfixturevalue(kind)
    observed(terminal)
    started = time.monotonic()
    terminal.send_keys("sleep 1\n")
    terminal.wait(5.0, started)
    assert 0.9 <= time.monotonic() - started < 3.0
    # `read` is a builtin: the shell sleeps in it with no child, owning the terminal, yet it is not done
    observed(terminal)
    started = time.monotonic()
    seen = play(terminal, [("read -t 2 x; echo DONE-42\n", 3.0)])
    assert "\nDONE-42\n" in seen and time.monotonic() - started >= 1.9
    started = time.monotonic()
    terminal.send_keys("true\n")
    terminal.wait(1.0, started, until_idle=False)
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
def test_tmux_when_the_sandbox_has_it_else_the_pty_and_the_override(box, host_place, monkeypatch):
    def chosen() -> Terminal:
        protocol = TerminusJson()
        try:
            return protocol._terminal_for(box)
        finally:
            protocol.close()

    monkeypatch.delenv("OC_REPL_TERMINAL", raising=False)
    assert isinstance(chosen(), TmuxTerminal)
    monkeypatch.setenv("OC_REPL_TERMINAL", "pty")
    assert isinstance(chosen(), PtyTerminal)
    monkeypatch.setenv("OC_REPL_TERMINAL", "screen")
    with pytest.raises(UsageError):
        chosen()
    # a PATH without tmux, as in a sandbox that lacks it: in a place of the host the sandbox sees (not its /tmp) and
    # may not write (an entry in its directory would be dropped from its PATH)
    bin_dir = host_place / "bin"
    bin_dir.mkdir()
    for tool in filter(shutil.which, ("bash", "cat", "rm", "stty", "tput")):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("OC_REPL_TERMINAL", "auto")
    assert isinstance(chosen(), PtyTerminal)


@needs_tmux
def test_a_local_tmux_server_has_a_socket_of_its_own_removed_at_close(box, monkeypatch):
    monkeypatch.delenv("OC_REPL_TERMINAL", raising=False)
    protocol = TerminusJson()
    sockets = []

    def inside(command: str) -> int:  # the socket is where the sandbox's commands see it (a confined /tmp is private)
        return box.exec(command, timeout=30).exit_code

    for _ in range(2):  # the same protocol object twice: a name made from it would come back
        terminal = protocol._terminal_for(box)
        assert isinstance(terminal, TmuxTerminal) and terminal._socket_path
        sockets.append(shlex.quote(terminal._socket_path))
        assert inside(f"test -S {sockets[-1]}") == 0
        protocol.close()
        assert inside(f"test -e {sockets[-1]}") != 0
    assert sockets[0] != sockets[1]
    assert inside(f"tmux -S {sockets[0]} has-session") != 0


# --- 9.4: the wait never ends before the shell has read its keys --------------------------------------------------

# A shell that looks idle before it reads what was typed: each prompt is `slow$ ` printed by PROMPT_COMMAND, which
# then sleeps a second in a builtin (no child, its own group in the foreground, the cursor after a prompt) before
# readline reads the keys; `stty -echo` keeps the keys off the screen until then. Keys typed meanwhile are typed ahead.
SLOW_PROMPT = (
    "mkfifo slow.$$; exec 9<>slow.$$; rm slow.$$; stty -echo; PS1=''; "
    "PROMPT_COMMAND='printf \"slow\\$ \"; read -t 1 -u 9'\n"
)
TYPED_AHEAD: list[Step] = [
    [("echo a\n", 3.0), ("echo b\n", 3.0)],  # two commands in one reply, each typed while the shell is busy
    [("echo c\n", -1), ("echo d\n", 3.0)],  # no wait: the second keys follow the first before either is read
]


def typed_ahead(terminal: Terminal, exact: bool) -> list[str]:
    play(terminal, [(SLOW_PROMPT, 5.0)])
    return [play(terminal, step, exact=exact) for step in TYPED_AHEAD]


def check_typed_ahead(kind: str, box: Sandbox, cwd: str) -> None:
    """The observations equal those of full sleeps (upstream's), which show every command run."""
    seen = {}
    for exact in (True, False):
        with opened(kind, box, cwd) as terminal:
            seen[exact] = typed_ahead(terminal, exact)
    assert "\na\nslow$\nb\nslow$\n" in seen[True][0] and "\nc\nslow$\nd\nslow$\n" in seen[True][1]
    assert seen[False] == seen[True]


@pytest.mark.parametrize("kind", KINDS)
def test_typed_ahead_commands_show_what_full_sleeps_show(kind, box):
    check_typed_ahead(kind, box, box.workdir)


def test_only_keys_the_shell_can_read_are_waited_for():
    assert deliverable(b"echo hi\n") == 8
    assert deliverable(b"sleep 9\x03") == 0 and deliverable(b"x\x03ls\r") == 3  # ^C drops the unread input
    assert deliverable(b"\x13a\x11") == 1  # ^S ^Q: flow control takes them


# --- keys starting with `-`, and keys longer than tmux's client can carry ---------------------------

DASHES: Step = [("-1\n", 1.0), ("--help\n", 1.0), ("-", 0.2), ("\n", 1.0), ("echo x\0y\n", 1.0)]
# `;` and `\;` wherever tmux's pieces end: only the end of the whole string follows tmux's rule for a trailing `;`
PAYLOAD = ";\\;" * 8000
HEREDOC = "".join(f"{i};\\;'\"$x`{i} ;\n" for i in range(12000))  # 230 KB, past exec's 128 KiB argument limit


def check_dashes_and_long_keys(terminal: Terminal) -> None:
    observed(terminal)
    seen = play(terminal, DASHES)
    for typed in ("-1", "--help", "-"):
        assert f"# {typed}\n-bash: {typed}: command not found\n" in seen
    assert "\nxy\n" in seen  # NUL, which no argument can carry, goes as its key (readline's set-mark)
    line = f"printf %s '{PAYLOAD}' | sha256sum; echo ';;'\\;"  # 24 KB, ending in `\;`: typed as `;`
    seen = play(terminal, [(line, 0.5), ("Enter", 60.0)])  # waits end once the shell is idle: long ones cost nothing
    assert f"\n{hashlib.sha256(PAYLOAD.encode()).hexdigest()}  -\n;;\n" in seen
    seen = play(terminal, [(f"cat > big.txt <<'EOF'\n{HEREDOC}EOF\nsha256sum big.txt\n", 120.0)])
    assert f"\n{hashlib.sha256(HEREDOC.encode()).hexdigest()}  big.txt\n" in seen


@pytest.mark.parametrize("kind", KINDS)
def test_and_10_5d_every_keystroke_string_is_typed(kind, box):
    with opened(kind, box, box.workdir) as terminal:
        check_dashes_and_long_keys(terminal)


# Upstream's call types nothing for these: flags to tmux, or too long for its client (16,344 bytes fit).
REJECTED = ["-1\n", "--help\n", "--", "-l x\n", "a\0b\n", "x" * 16345, "y" * 200_000]
FITS = f"echo {'z' * (16344 - 14)} | wc -c\n"


@pytest.mark.parametrize("kind", KINDS)
def test_upstream_keys_type_nothing_that_upstreams_tmux_rejects(kind, box):
    with opened(kind, box, box.workdir, upstream_keys=True) as terminal:
        observed(terminal)
        screen = terminal.capture()
        play(terminal, [(keys, 0.3) for keys in REJECTED])
        assert terminal.capture() == screen
        # 16,344 bytes are typed and run; a byte more is not typed at all: the prompt stays the last line
        seen = play(terminal, [(FITS, 2.0), (FITS.replace("echo ", "echo z"), 0.5)])
        assert seen.rstrip("\n").endswith(" | wc -c\n16331\n" + screen.split("\n")[0])
        assert "-bash: -: command not found" in play(terminal, [("-", 0.2), ("\n", 1.0)])
        play(terminal, [("-R", 0.3)])  # the one flag upstream's keys can give that changes something: a reset
        assert terminal.capture() == "\n" * 40
