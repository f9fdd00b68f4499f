"""A persistent terminal driven by keystrokes: tmux inside the sandbox, as terminal-bench runs it.

Every tmux call goes through `Sandbox.exec`, so the same code drives a local tmux server (on a private socket,
never the user's own) and one inside a container. Screens are exactly what tmux captures: 160x40, trailing
spaces trimmed, empty rows kept. `Terminal` holds the waiting and observation rules every backend shares; sandboxes
without tmux get PtyTerminal (pty_terminal.py), which shows the same screens. What keystrokes type is in keys.py.
"""

from __future__ import annotations

import shlex
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from oc_repl.errors import SandboxError
from oc_repl.protocols.terminus.keys import (
    SESSION,
    deliverable,
    drops_input,
    fits,
    key_bytes,
    literal_calls,
    upstream_types,
)
from oc_repl.text import command_bytes
from oc_repl.types import Sandbox

WIDTH, HEIGHT = 160, 40
# Set as upstream sets it: after the window exists, and tmux gives `history-limit` only to panes made later, so the
# agent's pane keeps tmux's default 2000 lines. Kept for fidelity; the tests rely on those 2000 lines.
HISTORY_LIMIT = 50000
MAX_WAIT = 60.0  # a command's duration is capped here, as upstream caps it
POLL = 0.02
STARTUP_WAIT = 5.0  # for the first prompt; the first screen is taken after this at the latest
# A shell that does not start within this is an error. The wait ends as soon as it has started; a loaded machine
# (or a slow container) can take several seconds.
START_LIMIT = 30.0
_SPLIT = "@@oc-repl-screen@@"
T = TypeVar("T")
# How a shell's prompt ends: bash's `$ ` and `# `, PS2's `> `, zsh's `% `. A prompt ending otherwise is never seen as
# one, which only costs the early return: the wait then lasts the full duration.
PROMPT_ENDS = ("$ ", "# ", "> ", "% ")
# One exec's script stays well below the kernel's 128 KiB limit on a single argument (`bash -c SCRIPT`).
_SCRIPT_ROOM = 96 * 1024


def private_socket() -> str:
    """A name for a tmux server of our own that no other terminal, in this process or another, can be given."""
    return f"oc-repl-{uuid.uuid4().hex[:16]}"


def read_count(pid: int | str) -> str:
    """sh printing the shell's read byte count (empty where /proc gives nothing), with builtins only."""
    return f'{{ read -r _ r < /proc/{pid}/io; }} 2>/dev/null; echo "$r"'


def _number(text: str) -> int | None:
    return int(text) if text.strip().isdigit() else None


@dataclass
class Probe:
    """One look at the terminal: whether its shell is provably idle (see `Typed`, `_shell_idle` and `_at_prompt`),
    and the visible screen."""

    idle: bool
    screen: str


def _shell_idle(stat: str, children: str) -> bool:
    """The shell waits at its prompt: asleep, its own process group in the terminal's foreground, no children.

    `cmd &` leaves a child, a running program owns the foreground group, and a busy shell loop is not asleep.
    """
    fields = stat.rsplit(")", 1)[-1].split()
    if len(fields) < 6:
        return False
    state, pgrp, tpgid = fields[0], fields[2], fields[5]
    return state == "S" and pgrp == tpgid and not children.strip()


def _at_prompt(row: str, x: int) -> bool:
    """The text left of the cursor on its row ends like a prompt.

    `_shell_idle` alone cannot tell a shell at its prompt from one blocked in a builtin (`read -t 2`) or replaced by
    `exec prog`: all are asleep, childless and own the foreground. Those leave the cursor after their own output, not
    after a prompt. Captures trim trailing spaces, so the row is padded back out to the cursor.
    """
    return x > 0 and row[:x].ljust(x).endswith(PROMPT_ENDS)


class Typed:
    """The keystrokes sent that the shell has not yet been seen to read.

    The shell can look idle before it has read keys already sent: tmux, the kernel or docker may still hold them, or
    the shell sits behind a prompt-like screen doing something else. So a probe counts it idle only once its read byte
    count (rchar of /proc/PID/io, which takes in its reaped children's reads: keys a program read before it exited
    count) has grown, since a reading taken before the keys went out, by the bytes they deliver. Keys sent while
    earlier ones are unread add to those; a signal character starts the count over, as the terminal drops unread input
    there. Reads of other data after the keys went out (files a command reads, a prompt's command substitution) can
    make it pass early; input the terminal drops otherwise (line editing before a program reads, a program flushing
    its input) keeps it from passing, and the waits then last their full duration, as they do without a reading.
    """

    def __init__(self) -> None:
        self.base: int | None = None
        self.owed = 0

    def needs_reading(self, data: bytes) -> bool:
        """Whether `sent` needs a reading taken before `data` goes out (else it keeps the one it has)."""
        return self.owed == 0 or drops_input(data)

    def sent(self, data: bytes, reads: int | None) -> None:
        if self.needs_reading(data):
            self.base, self.owed = reads, 0
        self.owed += deliverable(data)

    def read(self, reads: int | None) -> bool:
        """Whether the shell has read all that was sent; once it has, that stays settled."""
        if self.owed and (reads is None or self.base is None or reads - self.base < self.owed):
            return False
        self.owed = 0
        return True


def judge(typed: Typed, reads: str, stat: str, children: str, cursor: str, screen: str) -> Probe:
    """One look judged by the rules above: the shell's read count (taken first), its /proc stat and children, tmux's
    cursor (`X Y`) and the visible screen of the same moment."""
    x, _, y = cursor.partition(" ")
    rows = screen.split("\n")
    row = rows[int(y)] if y.isdigit() and int(y) < len(rows) else ""
    read_all = typed.read(_number(reads))
    idle = read_all and _shell_idle(stat, children) and x.isdigit() and _at_prompt(row, int(x))
    return Probe(idle=idle, screen=screen)


def send_calls(keys: str, upstream_keys: bool) -> tuple[list[list[str]], bytes]:
    """The send-keys calls (arguments after `send-keys -t agent`) for `keys`, and the bytes they type."""
    if upstream_keys:
        # Upstream's one call, its failures unseen; one too long for tmux's client fails there, so is not made.
        carried = "\0" not in keys and fits(["send-keys", "-t", SESSION, keys])
        return ([[keys]] if carried else []), key_bytes(keys) if upstream_types(keys) else b""
    # `--` ends the flags: keys starting with `-` are typed. tmux still decides whether they are a key name.
    if "\0" not in keys and fits(["send-keys", "-t", SESSION, "--", keys]):
        return [["--", keys]], key_bytes(keys)
    return literal_calls(keys), key_bytes(keys)


class Terminal:
    """What the terminus protocol drives: keys in, screens out. Subclasses bring the terminal itself; the waiting
    rule and the observation rule are shared, so every backend is judged and shown the same way.

    `upstream_keys` types keystrokes exactly as upstream's single `tmux send-keys -t agent KEYS` does: what tmux takes
    as flags (a leading `-`) or cannot carry (over 16,344 bytes) types nothing, silently. Otherwise every keystroke
    string is typed, whatever it starts with and however long it is.
    """

    sandbox: Sandbox
    upstream_keys: bool = False
    _previous: str | None = None
    screen: str = ""  # the visible screen at the last observation, as the terminal showed it

    def send_keys(self, keys: str) -> None:
        raise NotImplementedError

    def capture(self, entire: bool = False) -> str:
        raise NotImplementedError

    def probe(self) -> Probe:
        raise NotImplementedError

    def alive(self) -> bool:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def run(self, keys: str, duration: float, started: float, until_idle: bool = True, observe: bool = False) -> None:
        """One command: its keys, then `wait`. `observe`: an observation follows at once, which a terminal whose
        calls are costly takes in the same call."""
        self.send_keys(keys)
        self.wait(duration, started, until_idle)

    def wait(self, duration: float, started: float, until_idle: bool = True) -> None:
        """Wait what upstream waits after a command, `min(duration, 60)` from `started`; `until_idle` (the default),
        return as soon as the shell is provably idle twice in a row with the same screen (nothing more can change).
        Idle includes having read the keys sent (see `Typed`): keys still on their way, or typed ahead of a shell
        that is not yet reading, are waited for as upstream's sleep would."""
        deadline = started + min(max(duration, 0.0), MAX_WAIT)
        if not until_idle:
            time.sleep(max(0.0, deadline - time.monotonic()))
            return
        last: Probe | None = None
        while time.monotonic() < deadline:
            probe = self._unless_gone(self.probe)
            if probe is None:  # the shell left (`exit`) and its terminal with it: nothing more can change
                return
            if probe.idle and last is not None and last.idle and last.screen == probe.screen:
                return
            last = probe
            time.sleep(min(POLL, max(0.0, deadline - time.monotonic())))

    def _unless_gone(self, look: Callable[[], T]) -> T | None:
        """`look()`, or None when it failed because the terminal no longer runs (the shell left with `exit`)."""
        try:
            return look()
        except SandboxError:
            if self.alive():
                raise
            return None

    def observe(self) -> tuple[str, str]:
        """What the model is shown after its commands, by upstream's rule: ("new", the part of the scrollback from
        the last line of the previous capture on), or ("screen", the visible screen) when that capture cannot be
        found. The protocol words it (its `observation.new` / `observation.screen` templates)."""
        current = self._unless_gone(lambda: self.capture(entire=True))
        if current is None:  # upstream ends the episode before the model is asked again: this is never shown
            return "screen", ""
        # the visible screen is the scrollback's last rows (every row of the pane ends in a newline): for recordings
        self.screen = "".join(current.splitlines(keepends=True)[-HEIGHT:])
        previous, self._previous = self._previous, current
        if previous is None:
            return "screen", self.capture()
        new = find_new_content(previous, current)
        if new is not None and new.strip():
            return "new", new
        return "screen", self.capture()


class TmuxTerminal(Terminal):
    def __init__(
        self, sandbox: Sandbox, cwd: str | None = None, socket: str | None = None, upstream_keys: bool = False
    ) -> None:
        """`socket`: a server of our own on that socket (see `private_socket`), ended and its socket file removed at
        close; without it, tmux's default server, as in a container."""
        self.sandbox = sandbox
        self.upstream_keys = upstream_keys
        self.tmux = "tmux" + (f" -L {shlex.quote(socket)}" if socket else "")
        self._socket = socket
        self._socket_path: str | None = None
        self._previous: str | None = None
        self._typed = Typed()
        self._answered = False  # the last call to tmux was a capture, which found the session (see `alive`)
        self._start(cwd)

    def start_command(self) -> str:
        """The tmux command list that starts the session and prints `PANE_PID SOCKET_PATH`."""
        # Inside a container tmux starts as upstream starts it. Our own local server starts as it would in a fresh
        # container: no user or system config (-f /dev/null), and a bash login shell in the pane whatever the user's
        # shell is (tmux takes its default-shell from $SHELL when the server starts, and runs it as `-bash`).
        launch = f"SHELL=/bin/bash {self.tmux} -f /dev/null" if self._socket else self.tmux
        start = (
            f"{launch} new-session -x {WIDTH} -y {HEIGHT} -d -s {SESSION} \\; "
            f"set-option -t {SESSION} history-limit {HISTORY_LIMIT} \\; "
            f"display-message -p -t {SESSION} '#{{pane_pid}} #{{socket_path}}'"
        )
        if self._socket:
            return start
        # A session of that name is an earlier terminal's that outlived its client (a killed shell resumed in its kept
        # container, an attached container used before): it is ended, in the same call, so this one can start. Its
        # server, left without a session, exits meanwhile; a start that reached it as it went ("server exited
        # unexpectedly") is made again, silenced but for a last try, whose error and status are the caller's.
        again = f"n=0; while ! {{ {start}; }} 2>/dev/null && [ $n -lt 20 ]; do n=$((n + 1)); sleep 0.1; done"
        return f"{self.tmux} kill-session -t {SESSION} 2>/dev/null; {again}; [ $n -lt 20 ] || {start}"

    def started(self, pane: str) -> None:
        """The session's pane as `start_command` printed it: its shell is the terminal's for the whole session."""
        pid, _, path = pane.strip().partition(" ")
        self._socket_path = path if self._socket else None
        if not pid.isdigit():
            self.close()
            raise SandboxError(f"the terminal failed: tmux gave no pane ({pid or 'no output'})")
        self.pid = int(pid)

    def _start(self, cwd: str | None) -> None:
        check = self.sandbox.exec("command -v tmux", timeout=30)
        if check.exit_code != 0:
            raise NoTmux()
        self.started(self._run(self.start_command(), cwd=cwd))
        try:  # the first screen the model sees should hold the shell's prompt, not a blank pane still starting up
            self.wait(STARTUP_WAIT, time.monotonic())
        except BaseException:
            self.close()
            raise

    def _run(self, command: str, cwd: str | None = None, timeout: float = 30) -> str:
        self._answered = False
        result = self.sandbox.exec(command, timeout=timeout, cwd=cwd)
        output = result.output.decode("utf-8", "replace")
        if result.exit_code != 0:
            raise _failure(output, result.timed_out)
        return output

    # --- keys and screens ------------------------------------------------------------------------------------

    def key_scripts(self, keys: str) -> tuple[list[str], bytes]:
        """The scripts (one exec each) that type `keys`, and the bytes they type."""
        calls, typed = send_calls(keys, self.upstream_keys)
        commands = [f"{self.tmux} send-keys -t {SESSION} {shlex.join(args)}" for args in calls]
        return _scripts(commands) or [":"], typed

    def send_keys(self, keys: str) -> None:
        self._answered = False
        scripts, typed = self.key_scripts(keys)
        # The read count is taken in the same exec as the keys, just before them.
        first = self.sandbox.exec(f"{read_count(self.pid)}; {scripts[0]}", timeout=30)
        reads, _, said = first.output.decode("utf-8", "replace").partition("\n")
        if first.exit_code != 0 and not self.upstream_keys:  # upstream never looks at what tmux said
            raise _failure(said, first.timed_out)
        for script in scripts[1:]:
            self._run(script)
        self._typed.sent(typed, _number(reads))

    def capture(self, entire: bool = False) -> str:
        screen = self._run(f"{self.tmux} capture-pane -p {'-S - ' if entire else ''}-t {SESSION}")
        self._answered = True
        return screen

    def probe(self) -> Probe:
        proc = f"/proc/{self.pid}"
        script = (
            # The read count first: keys it shows read were read before the shell and its screen are looked at.
            f"{read_count(self.pid)}; {{ read -r s < {proc}/stat; read -r c < {proc}/task/{self.pid}/children; }} "
            f'2>/dev/null; echo "$s"; echo "$c"; echo {_SPLIT}; '
            # The cursor and the screen in one tmux command list, so they describe the same moment.
            f"{self.tmux} display-message -p -t {SESSION} '#{{cursor_x}} #{{cursor_y}}' "
            f"\\; capture-pane -p -t {SESSION}"
        )
        head, _, tail = self._run(script).partition(_SPLIT + "\n")
        reads, stat, children, *_ = head.split("\n") + ["", "", ""]
        cursor, _, screen = tail.partition("\n")
        return judge(self._typed, reads, stat, children, cursor, screen)

    def alive(self) -> bool:
        # tmux captures only a session that exists: asked right after a capture (as the protocol asks after each
        # observation), the answer is that capture's, and a container is spared an exec a turn.
        answered, self._answered = self._answered, False
        return answered or self.sandbox.exec(f"{self.tmux} has-session -t {SESSION}", timeout=30).exit_code == 0

    def close(self) -> None:
        if self._socket_path:  # our own server: it goes, and its socket file with it
            self.sandbox.exec(f"{self.tmux} kill-server; rm -f -- {shlex.quote(self._socket_path)}", timeout=30)
        else:
            self.sandbox.exec(f"{self.tmux} kill-session -t {SESSION}", timeout=30)


class NoTmux(SandboxError):
    def __init__(self) -> None:
        super().__init__("tmux is not installed in the sandbox", hint="install tmux there (apt-get install tmux)")


def _failure(output: str, timed_out: bool) -> SandboxError:
    return SandboxError(f"the terminal failed: {output.strip() or ('timed out' if timed_out else 'tmux error')}")


def _scripts(commands: list[str]) -> list[str]:
    """The commands joined with `&&` into as few scripts as fit one exec each."""
    scripts: list[str] = []
    size = 0
    for command in commands:
        length = len(command_bytes(command)) + 4
        if scripts and size + length <= _SCRIPT_ROOM:
            scripts[-1] += " && " + command
            size += length
        else:
            scripts.append(command)
            size = length
    return scripts


def find_new_content(previous: str, current: str) -> str | None:
    """Upstream's search, quirk included: the cut is the last newline's offset *within the previous capture*,
    which equals its place in the current one whenever the scrollback still starts where it did."""
    old = previous.strip()
    if old not in current:
        return None
    start = old.rfind("\n") if "\n" in old else current.index(old)
    return current[start:]
