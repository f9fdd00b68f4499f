"""A transcript as an asciicast v2 recording (`oc-repl show --cast FILE.cast`), for every protocol.

A run that watched a terminal (terminus's) is replayed from the terminal's screens: at each observation, the whole
visible screen as the terminal showed it (keystrokes echoed, output scrolled, earlier lines still there) becomes a full
frame (cleared, then drawn), so the recording's last frame is the last screen the run took (a confirming reply that
runs nothing takes none). A transcript written before screens were recorded falls back on what the model was shown.
Any other run (camel, raw) becomes a terminal session of the model's side of the conversation: what it said and
thought, each command with its output, each file it wrote, what could not be parsed, the verifier's verdict and how the
run ended.

Times are the transcript's own (each event's `ts`), divided by `speed`, with every pause capped at `idle_cap`
seconds before that; the header records the cap too. Text from the model or the sandbox is made visible
(render/sanitize.py): an escape sequence in it is shown, never played. The only sequences a recording holds are
the few this module writes: clear and home, and colours (SGR).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from oc_repl.events import TERMINAL_TOOL
from oc_repl.private import write_atomic
from oc_repl.render.sanitize import sanitize
from oc_repl.safejson import lines

VERSION = 2
IDLE_CAP = 2.0
CLEAR = "\x1b[H\x1b[2J"
RESET, BOLD, DIM, RED, GREEN, YELLOW, CYAN = (
    "\x1b[0m",
    "\x1b[1m",
    "\x1b[2m",
    "\x1b[31m",
    "\x1b[32m",
    "\x1b[33m",
    "\x1b[36m",
)
WIDTH, HEIGHT = (80, 240), (24, 200)  # the bounds of a recording's terminal
OUTPUT_LINES = 40  # of a command's output, in a session recording: the first ones, then how many more


def read(transcript: Path) -> list[dict[str, Any]]:
    return [event for _, event in lines(transcript) if isinstance(event, dict)]


def _crlf(text: str) -> str:
    return sanitize(text).replace("\n", "\r\n")


def screens(events: Iterable[dict[str, Any]]) -> list[tuple[float, str]]:
    """A terminus transcript's screens: (time, the visible screen), its trailing empty rows left out."""
    found = []
    for event in events:
        item = event.get("item") or {}
        screen = item.get("screen")
        if event.get("type") != "item.completed" or screen is None and item.get("tool") != TERMINAL_TOOL:
            continue
        text = str(item.get("aggregated_output") or "") if screen is None else screen.rstrip("\n")
        found.append((float(event.get("ts") or 0.0), text))
    return found


def _session(events: list[dict[str, Any]]) -> list[tuple[float, str]]:
    """Any other transcript as a terminal session: (time, output)."""
    out: list[tuple[float, str]] = []
    for event in events:
        ts, kind = float(event.get("ts") or 0.0), event.get("type")
        item = event.get("item") or {}
        text = ""
        if kind == "thread.started":
            text = f"{BOLD}# {_crlf(str(event.get('task') or ''))}{RESET}\r\n"
            text += f"{DIM}# {_crlf(str(event.get('protocol')))} · {_crlf(str(event.get('model')))}{RESET}\r\n"
        elif kind == "turn.started":
            text = f"\r\n{DIM}── turn {event.get('turn')} ──{RESET}\r\n"
        elif kind == "item.completed":
            text = _item(item)
        elif kind == "verify.completed":
            verdict = f"{GREEN}PASS" if event.get("passed") else f"{RED}FAIL"
            count = f" {event.get('tests_passed')}/{event.get('tests_total')} tests" if event.get("tests_total") else ""
            text = f"\r\n{BOLD}{verdict}{RESET} {_crlf(str(event.get('command') or ''))}{count}\r\n"
        elif kind == "error" and not event.get("retrying"):
            text = f"{RED}error: {_crlf(str(event.get('message') or ''))}{RESET}\r\n"
        elif kind == "thread.completed":
            text = f"{BOLD}{_crlf(str(event.get('status')))}{RESET} after {event.get('turns', 0)} turns\r\n"
        if text:
            out.append((ts, text))
    return out


def _item(item: dict[str, Any]) -> str:
    kind = item.get("type")
    if kind == "reasoning" and str(item.get("text") or "").strip():
        return f"{DIM}{_crlf(str(item['text']).strip())}{RESET}\r\n"
    if kind == "agent_message" and str(item.get("text") or "").strip():
        return f"{CYAN}{_crlf(str(item['text']).strip())}{RESET}\r\n"
    if kind == "command_execution":
        command = f"{GREEN}{BOLD}${RESET} {_crlf(str(item.get('command') or ''))}\r\n"
        if item.get("status") == "declined":
            return command + f"{YELLOW}(declined){RESET}\r\n"
        output = str(item.get("aggregated_output") or "").rstrip("\n").split("\n")
        shown = output[:OUTPUT_LINES] + (
            [f"… {len(output) - OUTPUT_LINES} more lines"] if len(output) > OUTPUT_LINES else []
        )
        body = _crlf("\n".join(shown)) + "\r\n" if any(shown) else ""
        failed = f"{RED}(exit {item.get('exit_code')}){RESET}\r\n" if item.get("exit_code") not in (None, 0) else ""
        return command + body + failed
    if kind == "file_change":
        changes = [c for c in item.get("changes") or [] if isinstance(c, dict)]
        mark = f"{RED}✎ refused{RESET} " if item.get("status") in ("failed", "declined") else "✎ "
        return "".join(f"{mark}{c.get('kind', 'update')} {_crlf(str(c.get('path', '')))}\r\n" for c in changes)
    if kind == "parse_error":
        return f"{RED}parse error: {_crlf(str(item.get('message') or ''))}{RESET}\r\n"
    return ""


def frames(events: list[dict[str, Any]]) -> tuple[str, list[tuple[float, str]]]:
    """The kind of recording ("screens" or "session") and its output at the transcript's times."""
    found = screens(events)  # a run that watched a terminal is replayed as that terminal
    if found:
        return "screens", [(ts, CLEAR + _crlf(screen)) for ts, screen in found]
    return "session", _session(events)


def recording(events: list[dict[str, Any]], speed: float = 1.0, idle_cap: float = IDLE_CAP) -> list[Any]:
    """The asciicast v2 lines: the header, then [time, "o", output] with times that never go back."""
    if speed <= 0 or idle_cap <= 0:
        raise ValueError("speed and the idle cap must be positive")
    kind, found = frames(events)
    started = next((e for e in events if e.get("type") == "thread.started"), {})
    rows = [line for _, text in found for line in text.replace(CLEAR, "").split("\r\n")]
    visible = [len(_plain(row)) for row in rows] or [0]
    tall = max((text.count("\r\n") + 1 for _, text in found), default=0) if kind == "screens" else HEIGHT[0]
    header = {
        "version": VERSION,
        "width": min(max(max(visible) + 1, WIDTH[0]), WIDTH[1]),
        "height": min(max(tall, HEIGHT[0]), HEIGHT[1]),
        "timestamp": int(float(started.get("ts") or (found[0][0] if found else 0))),
        "idle_time_limit": idle_cap,
        "title": sanitize(
            f"{started.get('task_name') or started.get('task') or 'oc-repl'} · {started.get('protocol', '')}"
        )[:200],
        "env": {"TERM": "xterm-256color"},
    }
    out: list[Any] = [header]
    clock, last = 0.0, found[0][0] if found else 0.0
    for ts, text in found:
        clock += min(max(ts - last, 0.0), idle_cap) / speed
        last = max(last, ts)
        out.append([round(clock, 6), "o", text])
    return out


_SGR = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _plain(row: str) -> str:
    return _SGR.sub("", row)


def cast_text(events: list[dict[str, Any]], speed: float = 1.0, idle_cap: float = IDLE_CAP) -> str:
    return "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in recording(events, speed, idle_cap))


def write_cast(transcript: Path, target: Path, speed: float = 1.0, idle_cap: float = IDLE_CAP) -> Path:
    write_atomic(target, cast_text(read(transcript), speed, idle_cap))
    return target
