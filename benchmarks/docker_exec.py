"""Tool-call overhead in docker: oc-repl's exec paths against a raw Engine API exec, in one container, in one run.

Measured, N calls each, interleaved round by round so that drift in the daemon hits every method alike:
- raw         `container.exec_run("true")` (docker SDK: create, start, inspect)
- raw-bash    `container.exec_run(["bash", "-c", "true"])`: the same, with the fresh bash every tool call pays
- sandbox     `DockerSandbox.exec("true")`: oc-repl's driver (capture thread, pid file for timeouts)
- shell_exec  camel `shell_exec` of `true` through CamelTerminalTools: what one model tool call costs
- persistent  experiment only, not used by the driver: one long-lived exec runs a shell loop that reads
              length-prefixed commands on stdin and runs each as a fresh `bash -c`, exit status after a marker

Goal: sandbox and shell_exec within 1.1x of raw. HTTP round trips to the daemon per call are counted too.
Run: DOCKER_HOST=... python benchmarks/docker_exec.py [-n 50] [--image oc-repl-test:bookworm]
"""

from __future__ import annotations

import argparse
import re
import statistics
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from oc_repl.protocols.camel_tools import NO_OUTPUT, CamelTerminalTools  # noqa: E402
from oc_repl.sandbox.docker import DockerImageSandbox  # noqa: E402

# Byte counts, not characters (LC_ALL=C), so any command text survives the trip; the marker cannot be typed by
# accident (ASCII record separators around the status).
LOOP = (
    "export LC_ALL=C; "
    'while read -r n; do IFS= read -r -N "$n" c; bash -c "$c" </dev/null 2>&1; printf "\\036%d\\036\\n" "$?"; done'
)
_END = re.compile(rb"\x1e(\d+)\x1e\n$")


class PersistentShell:
    """One `docker exec` kept open; each command is a write and a read on its socket, no API call."""

    def __init__(self, api: Any, container_id: str, workdir: str) -> None:
        exec_id = api.exec_create(container_id, ["bash", "-c", LOOP], stdin=True, tty=False, workdir=workdir)["Id"]
        wrapped = api.exec_start(exec_id, socket=True)
        self._sock = getattr(wrapped, "_sock", wrapped)
        self._pending = b""

    def _frame(self) -> bytes:
        """The payload of the next frame of the multiplexed stream (8-byte header: stream, 3 zero bytes, size)."""
        while len(self._pending) < 8:
            self._fill()
        size = struct.unpack(">I", self._pending[4:8])[0]
        while len(self._pending) < 8 + size:
            self._fill()
        payload, self._pending = self._pending[8 : 8 + size], self._pending[8 + size :]
        return payload

    def _fill(self) -> None:
        chunk = self._sock.recv(1 << 16)
        if not chunk:
            raise EOFError("the shell loop ended")
        self._pending += chunk

    def run(self, command: str) -> tuple[bytes, int]:
        data = command.encode()
        self._sock.sendall(f"{len(data)}\n".encode() + data)
        out = b""
        while not (match := _END.search(out)):
            out += self._frame()
        return out[: match.start()], int(match.group(1))

    def close(self) -> None:
        self._sock.close()


def count_requests(api: Any) -> Callable[[], int]:
    """A counter of the HTTP responses the docker client receives (APIClient is a requests.Session)."""
    seen = [0]

    def hook(response: Any, *args: Any, **kwargs: Any) -> Any:
        seen[0] += 1
        return response

    api.hooks["response"].append(hook)
    return lambda: seen[0]


def report(name: str, samples: list[float], trips: float, base: float | None) -> str:
    mean, median = statistics.fmean(samples) * 1000, statistics.median(samples) * 1000
    ratio = f"{median / base:5.2f}x" if base else "  1.00x"
    trip_text = f"{trips:4.1f}" if trips >= 0 else "   -"
    return f"{name:<12} {mean:8.2f} {median:8.2f}  {ratio}  {trip_text}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=50, help="calls per method (default 50)")
    parser.add_argument("--image", default="oc-repl-test:bookworm")
    args = parser.parse_args()

    box = DockerImageSandbox.from_spec(args.image)
    try:
        tools = CamelTerminalTools(box)
        container, api = box.container, box.api
        shell = PersistentShell(api, box.id, box.workdir)
        trips = count_requests(api)

        def raw() -> None:
            assert container.exec_run("true").exit_code == 0

        def raw_bash() -> None:
            assert container.exec_run(["bash", "-c", "true"]).exit_code == 0

        def sandbox() -> None:
            assert box.exec("true", timeout=30).exit_code == 0

        def shell_exec() -> None:
            assert tools.call("shell_exec", {"id": "b", "command": "true"}).text == NO_OUTPUT

        def persistent() -> None:
            assert shell.run("true") == (b"", 0)

        methods = {
            "raw": raw,
            "raw-bash": raw_bash,
            "sandbox": sandbox,
            "shell_exec": shell_exec,
            "persistent": persistent,
        }
        parts: dict[str, list[float]] = {"create": [], "start": [], "inspect": []}

        def raw_parts() -> None:
            """Where raw's time goes: the three Engine API calls of one exec, timed one by one."""
            t0 = time.perf_counter()
            exec_id = api.exec_create(box.id, "true")["Id"]
            t1 = time.perf_counter()
            api.exec_start(exec_id)
            t2 = time.perf_counter()
            api.exec_inspect(exec_id)
            t3 = time.perf_counter()
            for key, seconds in zip(parts, (t1 - t0, t2 - t1, t3 - t2), strict=True):
                parts[key].append(seconds)

        samples: dict[str, list[float]] = {name: [] for name in methods}
        calls: dict[str, int] = dict.fromkeys(methods, 0)
        for fn in methods.values():  # warm up connections, the workdir check, the page cache in the container
            for _ in range(3):
                fn()
        for _ in range(args.n):
            for name, fn in methods.items():
                before = trips()
                start = time.perf_counter()
                fn()
                samples[name].append(time.perf_counter() - start)
                calls[name] += trips() - before
            raw_parts()
        shell.close()
    finally:
        box.close()

    base = statistics.median(samples["raw"]) * 1000
    print(f"docker exec overhead, {args.n} calls each, image {args.image}, one container")
    print(f"{'method':<12} {'mean ms':>8} {'median':>8}  {'vs raw':>6}  {'HTTP/call':>4}")
    for name in methods:
        print(report(name, samples[name], calls[name] / args.n, None if name == "raw" else base))
    create, start, inspect = (statistics.median(parts[k]) * 1000 for k in parts)
    print(f"raw call by call (median ms): exec_create {create:.2f}, exec_start {start:.2f}, exec_inspect {inspect:.2f}")
    sandbox_ratio = statistics.median(samples["sandbox"]) * 1000 / base
    tool_ratio = statistics.median(samples["shell_exec"]) * 1000 / base
    verdict = "met" if max(sandbox_ratio, tool_ratio) <= 1.1 else "missed"
    print(f"goal <= 1.10x of raw (median): sandbox {sandbox_ratio:.2f}x, shell_exec {tool_ratio:.2f}x -> {verdict}")


if __name__ == "__main__":
    main()
