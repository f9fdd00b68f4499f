"""What `tmux send-keys -t agent KEYS` types, and how keystrokes of any length reach a pane.

Both terminals share it: PtyTerminal writes the bytes itself, TmuxTerminal hands the keys to tmux, and both count
the bytes the shell must read before it may count as idle (see `Typed` in terminal.py). Checked byte for byte against
tmux 3.3a (tests/protocols/terminus/test_pty_terminal.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

from oc_repl.text import command_bytes

SESSION = "agent"
# The tmux client packs a command's arguments, each with its NUL, into one message of at most 16384 bytes, of which
# 16 are the header and 4 the argument count: with upstream's `send-keys -t agent KEYS`, KEYS may be 16,344 bytes.
_MESSAGE_ROOM = 16384 - 16 - 4
# Long keystrokes go as literal text in pieces of this many bytes, one tmux call each, well inside the message.
PIECE = 8192
# ^C ^Z ^\ become signals, and the terminal then drops the input not yet read; ^S ^Q are taken by flow control.
_SIGNALS = re.compile(rb"[\x03\x1a\x1c]")
_FLOW = (b"\x11", b"\x13")

# --- key names ------------------------------------------------------------------------------------------------------
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


# --- one send-keys argument ---------------------------------------------------------------------------------------


def tmux_argument(keys: str) -> str:
    """What tmux's command parser leaves of an argument: a trailing `;` ends the command and is dropped, and a
    trailing `\\;` stands for `;`."""
    if not keys.endswith(";"):
        return keys
    keys = keys[:-1]
    return keys[:-1] + ";" if keys.endswith("\\") else keys


def key_bytes(keys: str, app_cursor: bool = False) -> bytes:
    """One send-keys argument: a key name sends its key, anything else is typed as it is."""
    keys = tmux_argument(keys)
    key = _lookup(keys, app_cursor)
    return command_bytes(keys if key is None else key)


def fits(args: Sequence[str]) -> bool:
    """tmux's client can carry these command arguments (beyond, it refuses with "command too long")."""
    return sum(len(command_bytes(arg)) + 1 for arg in args) <= _MESSAGE_ROOM


def upstream_types(keys: str) -> bool:
    """Upstream's `tmux send-keys -t agent KEYS` types KEYS: it is no flag (getopt takes any argument starting with
    `-` but a lone one), tmux's client can carry it, and exec can pass it (no NUL)."""
    return (not keys.startswith("-") or keys == "-") and "\0" not in keys and fits(["send-keys", "-t", SESSION, keys])


def literal_calls(keys: str) -> list[list[str]]:
    """send-keys arguments (after `send-keys -t agent`) that type `keys` as literal text, in pieces tmux can carry.

    Only for keys that cannot be one key name (too long, or holding a NUL, which no argument can). tmux's rule for a
    trailing `;` applies to the end of the whole string, as for one argument; a piece that happens to end in `;` is
    escaped so the parser gives it back unchanged. NUL goes as the key C-@.
    """
    calls: list[list[str]] = []
    for i, part in enumerate(tmux_argument(keys).split("\0")):
        if i:
            calls.append(["C-@"])
        for piece in _pieces(part, PIECE):
            calls.append(["-l", "--", piece[:-1] + "\\;" if piece.endswith(";") else piece])
    return calls


def _pieces(text: str, size: int) -> Iterator[str]:
    """`text` in runs of at most `size` UTF-8 bytes, never splitting a character."""
    data = command_bytes(text)
    start = 0
    while start < len(data):
        end = min(start + size, len(data))
        while start < end < len(data) and data[end] & 0xC0 == 0x80:  # back to the start of a character
            end -= 1
        end = end if end > start else start + size
        yield data[start:end].decode("utf-8", "surrogateescape")
        start = end


def drops_input(data: bytes) -> bool:
    """Sending `data` makes the terminal drop the input not yet read (a signal character)."""
    return _SIGNALS.search(data) is not None


def deliverable(data: bytes) -> int:
    """How many of these bytes the program at the terminal is certain to read.

    The terminal drops unread input at ^C ^Z ^\\ (and never passes those on), and flow control takes ^S ^Q: only
    what follows the last signal character counts, less the flow control characters.
    """
    after = _SIGNALS.split(data)[-1]
    return len(after) - sum(after.count(flow) for flow in _FLOW)
