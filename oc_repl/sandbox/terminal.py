"""A persistent terminal driven by keystrokes: tmux inside the sandbox, as terminal-bench runs it.

Every tmux call goes through `Sandbox.exec`, so the same code drives a local tmux server (on a private socket,
never the user's own) and one inside a container. Screens are exactly what tmux captures: 160x40, trailing
spaces trimmed, empty rows kept. `Terminal` holds the waiting and observation rules every backend shares; sandboxes
without tmux get PtyTerminal (pty_terminal.py), which shows the same screens.
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass

from oc_repl.errors import SandboxError
from oc_repl.types import Sandbox

SESSION = "agent"
WIDTH, HEIGHT = 160, 40
# Set as upstream sets it: after the window exists, and tmux gives `history-limit` only to panes made later, so the
# agent's pane keeps tmux's default 2000 lines. Kept for fidelity; the tests rely on those 2000 lines.
HISTORY_LIMIT = 50000
MAX_WAIT = 60.0  # a command's duration is capped here, as upstream caps it
POLL = 0.02
STARTUP_WAIT = 5.0
_SPLIT = "@@oc-repl-screen@@"
# How a shell's prompt ends: bash's `$ ` and `# `, PS2's `> `, zsh's `% `. A prompt ending otherwise is never seen as
# one, which only costs the early return: the wait then lasts the full duration.
PROMPT_ENDS = ("$ ", "# ", "> ", "% ")


@dataclass
class Probe:
    """One look at the terminal: whether its shell is provably idle (see `_shell_idle` and `_at_prompt`), and the
    visible screen."""

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


class Terminal:
    """What the terminus protocol drives: keys in, screens out. Subclasses bring the terminal itself; the waiting
    rule and the observation rule are shared, so every backend is judged and shown the same way."""

    sandbox: Sandbox
    _previous: str | None = None

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

    def wait(self, duration: float, started: float, exact: bool = False) -> None:
        """Wait what upstream waits after a command, `min(duration, 60)` from `started`; unless `exact`, return
        as soon as the shell is provably idle twice in a row with the same screen (nothing more can change)."""
        deadline = started + min(max(duration, 0.0), MAX_WAIT)
        if exact:
            time.sleep(max(0.0, deadline - time.monotonic()))
            return
        last: Probe | None = None
        while time.monotonic() < deadline:
            probe = self.probe()
            if probe.idle and last is not None and last.idle and last.screen == probe.screen:
                return
            last = probe
            time.sleep(min(POLL, max(0.0, deadline - time.monotonic())))

    def incremental_output(self) -> str:
        """What the model is shown after its commands, by upstream's rule: the part of the scrollback from the
        last line of the previous capture on, or the visible screen when that capture cannot be found."""
        current = self.capture(entire=True)
        previous, self._previous = self._previous, current
        if previous is None:
            return f"Current Terminal Screen:\n{self.capture()}"
        new = find_new_content(previous, current)
        if new is not None and new.strip():
            return f"New Terminal Output:\n{new}"
        return f"Current Terminal Screen:\n{self.capture()}"


class TmuxTerminal(Terminal):
    def __init__(self, sandbox: Sandbox, cwd: str | None = None, socket: str | None = None) -> None:
        self.sandbox = sandbox
        self.tmux = "tmux" + (f" -L {shlex.quote(socket)}" if socket else "")
        self._previous: str | None = None
        check = sandbox.exec("command -v tmux", timeout=30)
        if check.exit_code != 0:
            raise SandboxError("tmux is not installed in the sandbox", hint="install tmux there (apt-get install tmux)")
        # Inside a container tmux starts as upstream starts it. Our own local server starts as it would in a fresh
        # container: no user or system config (-f /dev/null), and a bash login shell in the pane whatever the user's
        # shell is (tmux takes its default-shell from $SHELL when the server starts, and runs it as `-bash`).
        launch = f"SHELL=/bin/bash {self.tmux} -f /dev/null" if socket else self.tmux
        start = (
            f"{launch} new-session -x {WIDTH} -y {HEIGHT} -d -s {SESSION} \\; "
            f"set-option -t {SESSION} history-limit {HISTORY_LIMIT}"
        )
        self._run(start, cwd=cwd)
        # The first screen the model sees should hold the shell's prompt, not a blank pane still starting up.
        self.wait(STARTUP_WAIT, time.monotonic())

    def _run(self, command: str, cwd: str | None = None, timeout: float = 30) -> str:
        result = self.sandbox.exec(command, timeout=timeout, cwd=cwd)
        if result.exit_code != 0:
            text = result.output.decode("utf-8", "replace").strip()
            raise SandboxError(f"the terminal failed: {text or ('timed out' if result.timed_out else 'tmux error')}")
        return result.output.decode("utf-8", "replace")

    # --- keys and screens ------------------------------------------------------------------------------------

    def send_keys(self, keys: str) -> None:
        """One argv element, as upstream sends it: tmux itself decides whether it is a key name or text."""
        self._run(f"{self.tmux} send-keys -t {SESSION} {shlex.quote(keys)}")

    def capture(self, entire: bool = False) -> str:
        return self._run(f"{self.tmux} capture-pane -p {'-S - ' if entire else ''}-t {SESSION}")

    def probe(self) -> Probe:
        script = (
            f"p=$({self.tmux} display-message -p -t {SESSION} '#{{pane_pid}}'); "
            'cat "/proc/$p/stat"; echo; cat "/proc/$p/task/$p/children" 2>/dev/null; '
            # The cursor and the screen in one tmux command list, so they describe the same moment.
            f"echo {_SPLIT}; {self.tmux} display-message -p -t {SESSION} '#{{cursor_x}} #{{cursor_y}}' "
            f"\\; capture-pane -p -t {SESSION}"
        )
        head, _, tail = self._run(script).partition(_SPLIT + "\n")
        stat, _, children = head.partition("\n")
        cursor, _, screen = tail.partition("\n")
        x, _, y = cursor.partition(" ")
        rows = screen.split("\n")
        row = rows[int(y)] if y.isdigit() and int(y) < len(rows) else ""
        idle = _shell_idle(stat, children) and x.isdigit() and _at_prompt(row, int(x))
        return Probe(idle=idle, screen=screen)

    def alive(self) -> bool:
        return self.sandbox.exec(f"{self.tmux} has-session -t {SESSION}", timeout=30).exit_code == 0

    def close(self) -> None:
        self.sandbox.exec(f"{self.tmux} kill-session -t {SESSION}", timeout=30)


def find_new_content(previous: str, current: str) -> str | None:
    """Upstream's search, quirk included: the cut is the last newline's offset *within the previous capture*,
    which equals its place in the current one whenever the scrollback still starts where it did."""
    old = previous.strip()
    if old not in current:
        return None
    start = old.rfind("\n") if "\n" in old else current.index(old)
    return current[start:]
