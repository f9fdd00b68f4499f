"""Tool-call overhead in docker: oc-repl's exec paths against the Engine API's exec floor, one container, one run.

Measured, N calls each, interleaved round by round in a shuffled order with a pause before each call (an exec's
teardown in the daemon goes on after its API call returns), so that drift hits every method alike:
- floor        `exec_create` + `exec_start` of `true`: the least one `docker exec` costs through the Engine API
- fresh-bash   a shell loop in one exec runs `setsid bash -c true` per line it reads and answers: the least a fresh
               `bash -c` per command costs in this container (process creation), with no protocol, pid file or relay
- sandbox      `DockerSandbox.exec("true")`: through the sandbox's persistent channel
- back-to-back the same, right after another call on the same channel: the server has had no time to make the next
               command's shell, output pipe and relay ready (model tool calls and terminus polls come with time between)
- shell_exec   camel `shell_exec` of `true` through CamelTerminalTools: what one model tool call costs (channel)
- exec-each    `DockerSandbox.exec("true")` with the channel off: one `docker exec` per command, the fallback path

Goal: sandbox <= 5 ms median and <= 0.15x the floor. HTTP round trips to the daemon per call are counted too.
Run: DOCKER_HOST=... python benchmarks/docker_exec_cost.py [-n 200] [--image oc-repl-test:bookworm]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from oc_repl.protocols import create  # noqa: E402
from oc_repl.protocols.camel.tools import CamelTerminalTools  # noqa: E402
from oc_repl.sandbox.docker import DockerImageSandbox, DockerSandbox  # noqa: E402
from oc_repl.sandbox.docker_channel import ChannelProcess  # noqa: E402

LOOP = "while read -r line; do (exec setsid bash -c true) & wait $!; echo y; done"


def count_requests(api: Any) -> Callable[[], int]:
    """A counter of the HTTP responses the docker client receives (APIClient is a requests.Session)."""
    seen = [0]

    def hook(response: Any, *args: Any, **kwargs: Any) -> Any:
        seen[0] += 1
        return response

    api.hooks["response"].append(hook)
    return lambda: seen[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=200, help="calls per method (default 200)")
    parser.add_argument("--image", default="oc-repl-test:bookworm")
    parser.add_argument(
        "--pause", type=float, default=0.05, help="seconds between calls, for the daemon to finish the last (0.05)"
    )
    args = parser.parse_args()

    box = DockerImageSandbox.from_spec(args.image)
    each = DockerSandbox(box.client, box.container)  # a second client on the same container, channel switched off
    each.channels.broken = True
    try:
        camel = create("camel-terminal-toolkit")  # the protocol's own texts, as a run builds its tools
        tools = CamelTerminalTools(box, camel.toolkit, camel.notices)
        no_output = camel.toolkit.render("exec.no_output")
        api = box.api
        trips = count_requests(api)

        def timed(fn: Callable[[], Any]) -> Callable[[], float]:
            def run() -> float:
                start = time.perf_counter()
                fn()
                return time.perf_counter() - start

            return run

        def true_in_sandbox() -> None:
            assert box.exec("true", timeout=30).exit_code == 0

        loop = api.exec_create(box.id, ["bash", "-c", LOOP], stdin=True)["Id"]
        raw = api.exec_start(loop, socket=True)
        sock = getattr(raw, "_sock", raw)

        def fresh_bash() -> None:
            sock.sendall(b"x\n")
            answer = b""
            while not answer.endswith(b"y\n"):
                answer += sock.recv(1 << 16)

        def back_to_back() -> float:
            true_in_sandbox()
            return timed(true_in_sandbox)()

        methods: dict[str, Callable[[], float]] = {
            "floor": timed(lambda: api.exec_start(api.exec_create(box.id, "true")["Id"])),
            "fresh-bash": timed(fresh_bash),
            "sandbox": timed(true_in_sandbox),
            "back-to-back": back_to_back,
            "shell_exec": timed(lambda: tools.call("shell_exec", {"id": "b", "command": "true"}).text == no_output),
            "exec-each": timed(lambda: each.exec("true", timeout=30)),
        }
        for fn in methods.values():  # warm up connections, the channel, the page cache in the container
            for _ in range(5):
                fn()
        assert isinstance(box.spawn("true", tty=False), ChannelProcess), "the channel is not in use"
        samples: dict[str, list[float]] = {name: [] for name in methods}
        calls = dict.fromkeys(methods, 0)
        order = list(methods.items())
        load = os.getloadavg()[0]
        for _ in range(args.n):
            random.shuffle(order)  # no method always follows the same other one (the daemon's cleanup after an exec)
            for name, fn in order:
                time.sleep(args.pause)  # an exec's teardown goes on after the API call returns; let it not land here
                before = trips()
                samples[name].append(fn())
                calls[name] += trips() - before
        sock.close()
    finally:
        each.close()
        box.close()

    base = statistics.median(samples["floor"]) * 1000
    print(f"docker exec overhead, {args.n} calls each, image {args.image}, one container")
    print(f"load average (1 min) at the start {load:.2f}, at the end {os.getloadavg()[0]:.2f}, {os.cpu_count()} cpus")
    print(f"{'method':<13} {'median ms':>9} {'mean ms':>8} {'p90 ms':>7} {'vs floor':>8} {'HTTP/call':>9}")
    for name, values in samples.items():
        ms = sorted(v * 1000 for v in values)
        median = statistics.median(ms)
        p90 = ms[int(len(ms) * 0.9)]
        print(
            f"{name:<13} {median:9.2f} {statistics.fmean(ms):8.2f} {p90:7.2f} {median / base:7.2f}x "
            f"{calls[name] / args.n:9.1f}"
        )
    median = statistics.median(samples["sandbox"]) * 1000
    verdict = "met" if median <= 5 and median / base <= 0.15 else "missed"
    print(f"goal: sandbox <= 5 ms and <= 0.15x floor (median): {median:.2f} ms, {median / base:.2f}x -> {verdict}")


if __name__ == "__main__":
    main()
