"""The terminal for sandboxes without tmux: a shell on a pty of the sandbox, its screen kept by pyte on our side.

It imitates what TmuxTerminal shows: a 160x40 screen, tmux's scrollback rules (2000 lines, trimmed a tenth at a
time, a clear pushes the screen into it, none on the alternate screen), `send-keys` key names and the shell
started as tmux starts it (a login shell, TERM=tmux-256color where the sandbox knows that terminal). Drawing the
screen costs the client CPU, bounded per observation (pty_feed.py).
"""

from __future__ import annotations

import codecs
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable

import pyte

from oc_repl.errors import SandboxError
from oc_repl.protocols.terminus.keys import key_bytes, upstream_types
from oc_repl.protocols.terminus.tmux import (
    HEIGHT,
    POLL,
    START_LIMIT,
    STARTUP_WAIT,
    WIDTH,
    Probe,
    Terminal,
    Typed,
    _at_prompt,
    _number,
    _shell_idle,
    read_count,
)
from oc_repl.sandbox.pty_feed import BoundedFeed
from oc_repl.types import Sandbox

HISTORY = 2000  # tmux's default history-limit: terminal-bench's pane keeps it (see test_terminus_cli)
PUMP = 0.05  # the sandbox caps unread output, so it is read on, between turns too, as tmux would
_ALTERNATE = {47, 1047, 1049}  # private modes that switch to the alternate screen
_APP_CURSOR = 1 << 5  # DECCKM as pyte records private mode 1

# --- the screen -------------------------------------------------------------------------------------------------


class _Screen(pyte.Screen):
    """pyte's screen with tmux's scrollback, kept as trimmed text (a line that leaves the screen never changes)."""

    def __init__(self, reply: Callable[[bytes], None]) -> None:
        self.history: list[str] = []
        self._saved: tuple | None = None  # the main screen's buffer and cursor while the alternate one shows
        self._reply = reply
        super().__init__(WIDTH, HEIGHT)

    def text(self, line) -> str:
        return "".join(line[x].data for x in range(self.columns)).rstrip(" ")

    def rows(self) -> list[str]:
        return [self.text(self.buffer[y]) for y in range(self.lines)]

    def _keep(self, line) -> None:
        if self._saved is not None:  # tmux keeps no history for the alternate screen
            return
        if len(self.history) >= HISTORY:  # tmux frees a tenth of the limit at once when the history is full
            del self.history[: HISTORY // 10]
        self.history.append(self.text(line))

    def _clear_into_history(self) -> None:
        """tmux's answer to clearing the whole screen: every row down to the last used one scrolls into history."""
        used = [y for y, row in enumerate(self.rows()) if row]
        for y in range(used[-1] + 1 if used else 0):
            self._keep(self.buffer[y])

    def index(self) -> None:
        top, bottom = self.margins or (0, self.lines - 1)
        if self.cursor.y == bottom:
            self._keep(self.buffer[top])
        super().index()

    def erase_in_display(self, how: int = 0, *args, **kwargs) -> None:
        if how == 3:  # tmux: the scrollback goes, the screen stays
            self.history.clear()
            return
        if how == 2 or (how == 0 and self.cursor.x == self.cursor.y == 0):
            self._clear_into_history()
        super().erase_in_display(how, *args, **kwargs)

    def reset(self) -> None:
        if hasattr(self, "mode"):  # RIS clears the screen as tmux clears it (pyte resets once while it sets up)
            self._clear_into_history()
        super().reset()

    def set_mode(self, *modes: int, **kwargs) -> None:
        super().set_mode(*modes, **kwargs)
        if kwargs.get("private") and _ALTERNATE & set(modes) and self._saved is None:
            self._saved = (self.buffer, self.cursor, 1049 in modes)
            self.buffer = defaultdict(lambda: pyte.screens.StaticDefaultDict(self.default_char))
            self.cursor = pyte.screens.Cursor(self.cursor.x, self.cursor.y, self.cursor.attrs)

    def reset_mode(self, *modes: int, **kwargs) -> None:
        super().reset_mode(*modes, **kwargs)
        if kwargs.get("private") and _ALTERNATE & set(modes) and self._saved is not None:
            self.buffer, cursor, restore_cursor = self._saved
            self._saved = None
            if restore_cursor:
                self.cursor = cursor

    def write_process_input(self, data: str) -> None:
        self._reply(data.encode())  # answers to terminal queries (cursor position, device attributes)


class PtyTerminal(Terminal):
    def __init__(self, sandbox: Sandbox, cwd: str | None = None, upstream_keys: bool = False) -> None:
        self.sandbox = sandbox
        self.upstream_keys = upstream_keys
        self._previous = None
        self._typed = Typed()
        self._idle_reads: int | None = None  # the read count of the last probe that found the shell idle
        pidfile = f"/tmp/oc-repl-pty-{uuid.uuid4().hex[:12]}.pid"
        # The shell keeps this process's pid (every step execs), which is what the idle probe reads. The size is
        # set before bash starts so it never sees another; tmux's pane shell is a login shell with tmux's TERM.
        start = (
            f"echo $$ > {pidfile}; stty cols {WIDTH} rows {HEIGHT}; export TERM=tmux-256color; "
            "tput longname >/dev/null 2>&1 || TERM=screen; exec -l bash -i"
        )
        self._lock = threading.Lock()
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._screen = _Screen(lambda data: self._proc.write(data))
        self._stream = pyte.Stream(self._screen)
        self._feed = BoundedFeed(self._stream.feed)
        self._proc = sandbox.spawn(start, tty=True, cwd=cwd)
        self.pid = self._read_pid(pidfile)
        self._stop = threading.Event()
        threading.Thread(target=self._pump, name=f"oc-repl-pty-{self.pid}", daemon=True).start()
        # As TmuxTerminal: the first screen the model sees holds the prompt, not a shell still starting up.
        self.wait(STARTUP_WAIT, time.monotonic())

    def _read_pid(self, pidfile: str) -> int:
        deadline = time.monotonic() + START_LIMIT
        while time.monotonic() < deadline and self._proc.alive():
            # Read once and removed at once: the model may clean /tmp later, and nothing else needs the file. Only once
            # it holds something: the shell's `>` makes it empty a moment before the one write that fills it.
            look = f"[ -s {pidfile} ] && cat {pidfile} && rm -f {pidfile}"
            text = self.sandbox.exec(look, timeout=30).output.strip()
            if text.isdigit():
                return int(text)
            time.sleep(POLL)
        output = self._proc.read_available().decode("utf-8", "replace").strip()
        self._proc.kill()
        raise SandboxError(f"the terminal's shell did not start: {output or 'no output'}")

    def _pump(self) -> None:
        while not self._stop.wait(PUMP):
            self._drain()

    def _drain(self) -> None:
        with self._lock:
            data = self._proc.read_available()
            if data:
                self._feed(self._decoder.decode(data))

    # --- the Terminal interface --------------------------------------------------------------------------------

    def send_keys(self, keys: str) -> None:
        self._drain()  # the cursor keys depend on the mode the output last set
        with self._lock:
            app_cursor = _APP_CURSOR in self._screen.mode
            if self.upstream_keys and keys == "-R":  # upstream's one call that tmux takes as flags and obeys
                self._screen.reset()
        typed = not self.upstream_keys or upstream_types(keys)
        data = key_bytes(keys, app_cursor) if typed else b""
        # An idle shell reads nothing until keys come, so the count of the probe that found it idle still holds.
        if self._idle_reads is None and self._typed.needs_reading(data):
            self._idle_reads = self._read_count()
        self._typed.sent(data, self._idle_reads)
        self._idle_reads = None
        if data:
            self._proc.write(data)

    def _read_count(self) -> int | None:
        return _number(self.sandbox.exec(read_count(self.pid), timeout=30).output.decode("utf-8", "replace"))

    def observe(self) -> tuple[str, str]:
        self._drain()
        with self._lock:  # what arrived past the last observation's budget is drawn now, its tail at least
            self._feed.catch_up()
        return super().observe()

    def capture(self, entire: bool = False) -> str:
        """As `tmux capture-pane -p` (with `-S -`: the history first): every row ends in a newline."""
        self._drain()
        with self._lock:
            rows = (self._screen.history if entire else []) + self._screen.rows()
        return "".join(row + "\n" for row in rows)

    def probe(self) -> Probe:
        p = self.pid
        # The read count first: keys it shows read were read before the shell and its screen are looked at.
        script = f"{read_count(p)}; {{ read -r s < /proc/{p}/stat; read -r c < /proc/{p}/task/{p}/children; }} "
        result = self.sandbox.exec(f'{script} 2>/dev/null; echo "$s"; echo "$c"', timeout=30)
        reads, stat, children, *_ = result.output.decode("utf-8", "replace").split("\n") + ["", "", ""]
        read_all = self._typed.read(_number(reads))
        self._drain()
        with self._lock:  # the cursor and the screen of the same moment, as TmuxTerminal reads them
            rows = self._screen.rows()
            x, y = self._screen.cursor.x, self._screen.cursor.y
            # A screen behind the output shows no prompt to look for: the shell's own state decides, once its output
            # is all read (a shell asleep in a write to a full terminal is not at its prompt).
            prompt = (self._feed.behind and self._proc.settle(0)) or _at_prompt(rows[y], x)
        screen = "".join(row + "\n" for row in rows)
        # A shell that has ended is as idle as it will ever be: its last screen is final.
        idle = (read_all and _shell_idle(stat, children) and prompt) or not self._proc.alive()
        self._idle_reads = _number(reads) if idle else None
        return Probe(idle=idle, screen=screen)

    def alive(self) -> bool:
        return self._proc.alive()

    def close(self) -> None:
        self._stop.set()
        self._proc.kill()
