"""The client's CPU while a pty terminal (pyte, for sandboxes without tmux) shows `cat` of megabytes of mixed escape
sequences, against the same terminal running `true`, measured in the same run: drawing is bounded per observation.

Run: python benchmarks/pty_render.py [--megabytes 2.4] [--rows FILE]
"""

from __future__ import annotations

import argparse
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.rows import Row, add_option, write  # noqa: E402

# From about a microsecond a character to milliseconds a sequence (a clear, a reset, the alignment test ESC # 8).
PIECES = [
    *(b"\x1b[31m", b"\x1b[0m", b"\x1b[1;32;44m", b"\x1b[38;5;200m", b"\x1b]0;title\x07", b"\x1b[?25l", b"\x1b[?25h"),
    *(b"\x1b[10;20H", b"\x1b[H", b"\x1b[A", b"\x1b[5C", b"\x1b[2K", b"\x1b[K", b"\x1b[J", b"\x1b[2J", b"\x1bc"),
    *(b"\x1b#8", b"\x1b[P", b"\x1b[L", b"\x1b[M", b"\x1b[?1049h", b"\x1b[?1049l", b"hello world ", b"x" * 40),
    *(b"\r\n", b"\n"),
]


def mixed_escapes(size: int = 2_400_000) -> bytes:
    """`size` bytes of PIECES in a fixed random order."""
    pick = random.Random(0).choice
    out, length = [], 0
    while length < size:
        out.append(pick(PIECES))
        length += len(out[-1])
    return b"".join(out)


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # every thread of this process: the pump's drawing included
    return usage.ru_utime + usage.ru_stime


def measure(command: str, payload: bytes) -> tuple[float, float]:
    """CPU and wall seconds from typing `command` to the observation after it."""
    from oc_repl.protocols.terminus.pty_terminal import PtyTerminal
    from oc_repl.sandbox.local import LocalSandbox

    with tempfile.TemporaryDirectory() as tmp:
        box = LocalSandbox(Path(tmp) / "w", confine=False)
        (Path(box.workdir) / "noise").write_bytes(payload)
        terminal = PtyTerminal(box, cwd=box.workdir)
        try:
            terminal.observe()
            cpu, wall = cpu_seconds(), time.monotonic()
            terminal.send_keys(command + "\n")
            terminal.wait(60.0, time.monotonic())
            terminal.observe()
            return cpu_seconds() - cpu, time.monotonic() - wall
        finally:
            terminal.close()
            box.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--megabytes", type=float, default=2.4, help="how much the command prints (default 2.4)")
    add_option(parser)
    args = parser.parse_args()
    payload = mixed_escapes(int(args.megabytes * 1_000_000))
    base_cpu, base_wall = measure("true", payload)
    cpu, wall = measure("cat noise; echo END", payload)
    for name, c, w in (("true", base_cpu, base_wall), (f"cat of {args.megabytes:g} MB of escapes", cpu, wall)):
        print(f"{name:32s} client CPU {c:6.2f} s   wall {w:6.2f} s")
    figure = f"client CPU, pty showing {args.megabytes:g} MB of escape sequences"
    baseline = "the same terminal running `true`"
    write([Row(figure, cpu, "s", baseline, base_cpu, "a few seconds, not minutes")], args.rows)


if __name__ == "__main__":
    main()
