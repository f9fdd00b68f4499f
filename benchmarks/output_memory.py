"""Peak memory of a command that prints 1 GB, against the same run printing nothing (measured in the same run).

Output is capped while it is captured, so the client's peak RSS must barely move.
Run: python benchmarks/output_memory.py [--gigabytes 1] [--rows FILE]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.rows import Row, add_option, write  # noqa: E402

CHILD = """
import resource, sys, tempfile
sys.path.insert(0, {root!r})
from pathlib import Path
from oc_repl.protocols import create
from oc_repl.protocols.camel.tools import CamelTerminalTools
from oc_repl.sandbox.local import LocalSandbox
with tempfile.TemporaryDirectory() as tmp:
    box = LocalSandbox(Path(tmp))
    camel = create("camel-terminal-toolkit")
    tools = CamelTerminalTools(box, camel.toolkit, camel.notices)
    result = tools.call("shell_exec", {{"id": "a", "command": {command!r}, "block": True, "timeout": 600}})
    box.close()
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, len(result.text))
"""


def measure(command: str) -> tuple[int, int, float]:
    root = str(Path(__file__).resolve().parent.parent)
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", CHILD.format(root=root, command=command)], check=True, capture_output=True, text=True
    ).stdout.split()
    return int(out[0]), int(out[1]), time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gigabytes", type=float, default=1, help="how much the command prints (default 1)")
    add_option(parser)
    args = parser.parse_args()
    gb = args.gigabytes
    base_rss, base_len, base_t = measure("true")
    big_rss, big_len, big_t = measure(f"head -c {int(gb * (1 << 30))} /dev/zero | tr '\\\\0' x")
    for name, rss, length, secs in (
        ("shell_exec 'true'", base_rss, base_len, base_t),
        (f"shell_exec printing {gb:g} GB", big_rss, big_len, big_t),
    ):
        print(f"{name:28s} peak RSS {rss / 1024:8.1f} MB   result {length:>8} chars  {secs:5.2f} s")
    print(f"ratio {big_rss / base_rss:.2f}x, growth {(big_rss - base_rss) / 1024:.1f} MB for {gb * 1024:g} MB printed")
    figure = f"peak RSS, shell_exec printing {gb:g} GB"
    write([Row(figure, big_rss / 1024, "MB", "shell_exec 'true'", base_rss / 1024, "barely moves")], args.rows)


if __name__ == "__main__":
    main()
