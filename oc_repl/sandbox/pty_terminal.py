"""The terminal for sandboxes without tmux: a shell on a pty of the sandbox, its screen kept by pyte on our side.

It imitates what TmuxTerminal shows: a 160x40 screen, tmux's scrollback rules (2000 lines, trimmed a tenth at a
time, a clear pushes the screen into it, none on the alternate screen), `send-keys` key names and the shell
started as tmux starts it (a login shell, TERM=tmux-256color where the sandbox knows that terminal).
"""

from __future__ import annotations

import codecs
import re
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable

import pyte

from oc_repl.errors import SandboxError
from oc_repl.sandbox.terminal import HEIGHT, POLL, STARTUP_WAIT, WIDTH, Probe, Terminal, _at_prompt, _shell_idle
from oc_repl.types import Sandbox

HISTORY = 2000  # tmux's default history-limit: terminal-bench's pane keeps it (see test_terminus_cli)
PUMP = 0.05  # the sandbox caps unread output, so it is read on, between turns too, as tmux would
_ALTERNATE = {47, 1047, 1049}  # private modes that switch to the alternate screen
_APP_CURSOR = 1 << 5  # DECCKM as pyte records private mode 1

# --- keys: what `tmux send-keys -t agent KEYS` writes to the pane (checked byte by byte against tmux 3.3a) -----
_SIMPLE = {"enter": "\r", "escape": "\x1b", "tab": "\t", "btab": "\x1b[Z", "space": " ", "bspace": "\x7f"}
_SIMPLE.update({f"kp{c}": c for c in "0123456789/*-+."}, kpenter="\n")
_CURSOR = {"up": "A", "down": "B", "right": "C", "left": "D", "home": "H", "end": "F"}
_TILDE = {"ic": 2, "insert": 2, "dc": 3, "delete": 3, "ppage": 5, "pageup": 5, "pgup": 5, "npage": 6}
_TILDE.update(pagedown=6, pgdn=6, f5=15, f6=17, f7=18, f8=19, f9=20, f10=21, f11=23, f12=24)
_SS3 = {"f1": "P", "f2": "Q", "f3": "R", "f4": "S"}
_CTRL = {"-": "\x1f", "/": "\x1f", "2": "\0", "6": "\x1e"}  # sent only without M-
_CTRL_UNSENT = "!#'()+,.01345789:;<=>`"  # without M-, keys tmux knows but sends nothing for


def _ctrl(char: str, meta: bool) -> str | None:
    """tmux's C- on a character: its control code, "" when it sends nothing, None when it is no key at all."""
    if not char.isascii():
        return char
    if char.isalpha() or char in "@[\\]^_":
        return chr(ord(char) & 0x1F)
    if char in " ?":
        return "\0" if char == " " else "\x7f"
    if meta:
        return None
    return _CTRL.get(char, "" if char in _CTRL_UNSENT else None)


def key_bytes(keys: str, app_cursor: bool = False) -> bytes:
    """One send-keys argument: a key name sends its key, anything else is typed as it is.

    tmux's command parser eats one trailing `;` (a command separator), and `\\;` at the end stands for `;`.
    """
    if keys.endswith(";"):
        keys = keys[:-1]
        keys = keys[:-1] + ";" if keys.endswith("\\") else keys
    key = _lookup(keys, app_cursor)
    return (keys if key is None else key).encode("utf-8", "surrogateescape")


def _lookup(name: str, app_cursor: bool) -> str | None:
    """The key's characters, "" for a key tmux knows but cannot send, None when `name` is no key name."""
    if re.fullmatch(r"0x[0-9a-fA-F]{1,6}", name) and int(name, 16) < 0x110000:
        return chr(int(name, 16))
    mods, rest = set(), name
    if len(rest) > 1 and rest[0] == "^":  # ^C is short for C-c
        mods, rest = {"C"}, rest[1:]
    while len(rest) > 1 and rest[1] == "-" and rest[0].upper() in "CMS":
        mods.add(rest[0].upper())
        rest = rest[2:]
    meta = "\x1b" if "M" in mods else ""
    low = rest.lower()
    if len(rest) == 1:
        if ord(rest) < 32 or "S" in mods:  # no key to tmux: it types the whole name
            return None
        char = _ctrl(rest, "M" in mods) if "C" in mods else rest
        return None if char is None else meta + char if char else ""
    if low in _SIMPLE:
        if "S" in mods:
            return None
        if "C" in mods:
            return meta + "\0" if low == "space" else ""
        return meta + _SIMPLE[low]
    param = 1 + ("S" in mods) + 2 * ("M" in mods) + 4 * ("C" in mods)  # xterm's modifier parameter
    if low in _CURSOR:
        if param > 1:
            return f"\x1b[1;{param}{_CURSOR[low]}"
        if low in ("home", "end"):
            return "\x1b[1~" if low == "home" else "\x1b[4~"
        return ("\x1bO" if app_cursor else "\x1b[") + _CURSOR[low]
    if low in _TILDE:
        return f"\x1b[{_TILDE[low]};{param}~" if param > 1 else f"\x1b[{_TILDE[low]}~"
    if low in _SS3:
        return f"\x1b[1;{param}{_SS3[low]}" if param > 1 else f"\x1bO{_SS3[low]}"
    return None


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
    def __init__(self, sandbox: Sandbox, cwd: str | None = None) -> None:
        self.sandbox = sandbox
        self._previous = None
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
        self._proc = sandbox.spawn(start, tty=True, cwd=cwd)
        self.pid = self._read_pid(pidfile)
        self._stop = threading.Event()
        threading.Thread(target=self._pump, name=f"oc-repl-pty-{self.pid}", daemon=True).start()
        # As TmuxTerminal: the first screen the model sees holds the prompt, not a shell still starting up.
        self.wait(STARTUP_WAIT, time.monotonic())

    def _read_pid(self, pidfile: str) -> int:
        deadline = time.monotonic() + STARTUP_WAIT
        while time.monotonic() < deadline and self._proc.alive():
            # Read once and removed at once: the model may clean /tmp later, and nothing else needs the file.
            text = self.sandbox.exec(f"cat {pidfile} 2>/dev/null && rm -f {pidfile}", timeout=30).output.strip()
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
                self._stream.feed(self._decoder.decode(data))

    # --- the Terminal interface --------------------------------------------------------------------------------

    def send_keys(self, keys: str) -> None:
        self._drain()  # the cursor keys depend on the mode the output last set
        with self._lock:
            app_cursor = _APP_CURSOR in self._screen.mode
        data = key_bytes(keys, app_cursor)
        if data:
            self._proc.write(data)

    def capture(self, entire: bool = False) -> str:
        """As `tmux capture-pane -p` (with `-S -`: the history first): every row ends in a newline."""
        self._drain()
        with self._lock:
            rows = (self._screen.history if entire else []) + self._screen.rows()
        return "".join(row + "\n" for row in rows)

    def probe(self) -> Probe:
        p = self.pid
        script = f"cat /proc/{p}/stat; echo; cat /proc/{p}/task/{p}/children"
        result = self.sandbox.exec(f"{{ {script}; }} 2>/dev/null", timeout=30)
        stat, _, children = result.output.decode("utf-8", "replace").partition("\n")
        self._drain()
        with self._lock:  # the cursor and the screen of the same moment, as TmuxTerminal reads them
            rows = self._screen.rows()
            x, y = self._screen.cursor.x, self._screen.cursor.y
        screen = "".join(row + "\n" for row in rows)
        # A shell that has ended is as idle as it will ever be: its last screen is final.
        idle = (_shell_idle(stat, children) and _at_prompt(rows[y], x)) or not self._proc.alive()
        return Probe(idle=idle, screen=screen)

    def alive(self) -> bool:
        return self._proc.alive()

    def close(self) -> None:
        self._stop.set()
        self._proc.kill()
