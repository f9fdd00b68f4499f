"""Whole-process cost per turn: `oc-repl run` against mini-swe-agent 2.4.6 and the floor, measured the same way.

Each side runs as a whole process against the loopback fake server in this process, which answers at once: every
turn is one tool call running `true` on this machine, and one more turn ends the run (oc-repl: a final answer;
mini: its submit command). Runs of LOW and of HIGH commands are timed in a shuffled order, RUNS times each; the
per-turn cost is (median(HIGH) - median(LOW)) / (HIGH - LOW), so start-up and the last turn cancel out. Both wall
time and the CPU time of the process and its children (user + sys) are shown; CPU is less disturbed by other load.
Start-up varies by seconds on a loaded machine (mini imports litellm), so the same cost is also read inside each
HIGH run, from the server's arrival times: (request LOW+1 to request HIGH+1) / (HIGH - LOW), median over the runs.

- mini-swe-agent 2.4.6: its `mini` command with its default config (mini.yaml: a `bash` tool call per reply, the
  local environment, commands unconfined), in its own virtualenv (made on first use from PyPI, then cached); litellm
  talks to the fake server as an `openai/` model with a model-cost entry, as mini's guide to local models has it,
  and uses its bundled cost map (LITELLM_LOCAL_MODEL_COST_MAP) instead of fetching one.
- oc-repl --no-confine: commands run on the host as mini's do; the like-for-like figure.
- oc-repl, confined in bubblewrap (the default for local:), where confinement works here.
- the floor: a process that makes the same requests (the bodies oc-repl sent in a run of its own, replayed byte for
  byte as its client encodes them: a turn's request is as long as the protocol makes it, for any client) and, for
  each call, runs `bash -c true`, with no client logic (one kept-alive HTTP connection, the reply read, nothing parsed
  or recorded);
- the kept-shell floor: the same requests, each call's command written to one `bash` kept running for the whole run
  and its end read back. The command is the call as the model was trained with it: `bash -c true`, a fresh process
  (camel's toolkit ran every call so, and oc-repl does), started by the kept process; a confined sandbox's commands
  are started by a process kept in it as well.
- the kept-shell floor of a builtin: the kept shell running `true` itself, no process started. It is shown, with no
  goal: it is what a turn would cost if the model's commands ran in one shell, which is not what it was trained with
  (`cd`, variables, `$$` and how errors are worded would carry from one call to the next).
Every floor asks streamed and unstreamed; oc-repl streamed (its default) and with --no-stream is set against the floors
of its own kind. With --image, the same in docker: oc-repl on `docker:<container>` (one container made for the
benchmark from the image) against the floors in that container (`docker exec -i` of one `bash`, kept, running
`bash -c true` or the builtin for each call).
oc-repl's loop detection is off (--loop-limit 0): the same call every turn is the point here. Each side writes its
record as it does by default (oc-repl its transcript, mini its trajectory).
Goals: confined, a turn <= 3x the floor, <= 2x the kept-shell floor and >= 1.5x faster than mini-swe-agent; in
docker, <= 3x the kept-shell floor in the container.
Run: python benchmarks/per_turn.py [--runs 5] [--low 5] [--high 45] [--mini-venv DIR] [--image IMAGE]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.rows import Row, add_option, skip, write  # noqa: E402
from benchmarks.startup import isolated_env  # noqa: E402
from oc_repl.client.wire import encode_body  # noqa: E402
from oc_repl.sandbox import confine  # noqa: E402
from tests.fakeserver import FakeServer, call_text  # noqa: E402

MINI = "mini-swe-agent==2.4.6"
MODEL = "qwen3-8b-oc"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "oc-repl" / "bench-venvs"
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"  # mini's local environment ends the run on this output
# Non-zero prices, so that litellm's cost calculation takes its ordinary path rather than an error.
REGISTRY = {
    f"openai/{MODEL}": {
        "max_tokens": 4096,
        "max_input_tokens": 32768,
        "max_output_tokens": 4096,
        "input_cost_per_token": 1e-9,
        "output_cost_per_token": 1e-9,
        "litellm_provider": "openai",
        "mode": "chat",
    }
}


def mini_command(venv: Path) -> Path:
    """`mini` of a virtualenv holding mini-swe-agent 2.4.6, made there on first use."""
    mini, done = venv / "bin" / "mini", venv / ".installed"
    if done.exists() and mini.exists():
        return mini
    shutil.rmtree(venv, ignore_errors=True)  # a half-made one from an interrupted install
    print(f"installing {MINI} into {venv} ...", file=sys.stderr, flush=True)
    made = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True)
    if made.returncode == 0:
        made = subprocess.run([venv / "bin" / "pip", "install", "-q", MINI], capture_output=True, text=True)
    if made.returncode != 0:
        skip(f"cannot install {MINI} into {venv}: {(made.stderr or made.stdout).strip()[-300:]}")
    done.write_text(MINI + "\n")
    return mini


@dataclass(frozen=True)
class Where:
    """What a run's argv is made of: the server, the run's directory, mini's command, the benchmark's container."""

    url: str
    work: Path
    mini: Path
    container: str = ""
    bodies: dict[tuple[str, bool], Path] = field(default_factory=dict)  # (oc-repl side, streamed): its requests


@dataclass(frozen=True)
class Side:
    name: str
    call: str  # one turn's reply
    last: str  # the reply that ends the run
    argv: Callable[[Where], list[str]]
    stream: bool = True
    floor: bool = False
    replays: str = ""  # a floor: the oc-repl side whose requests it sends


# A floor's whole process: the requests of a bodies file (argv[2], one encoded body a line; the last one again when the
# server's script asks for more) until the server's script runs out (its last reply is not a call), for each call a
# bare `bash -c true`, or a line (argv[3]) written to a shell kept for the run (argv[4:]: how that shell starts) and its
# end read back. Only the standard library, so its start-up is Python's own.
FLOOR_SCRIPT = """
import http.client, subprocess, sys, urllib.parse
url, line, kept = urllib.parse.urlsplit(sys.argv[1]), sys.argv[3], sys.argv[4:]
with open(sys.argv[2], "rb") as f:
    bodies = f.read().splitlines()
connection = http.client.HTTPConnection(url.hostname, url.port)
shell = subprocess.Popen(kept, stdin=subprocess.PIPE, stdout=subprocess.PIPE) if kept else None
turn = 0
while True:
    body = bodies[min(turn, len(bodies) - 1)]
    turn += 1
    connection.request("POST", url.path + "/chat/completions", body, {"Content-Type": "application/json"})
    reply = connection.getresponse().read()
    if b'"tool_calls": [' not in reply:
        break
    if shell is None:
        subprocess.run(["bash", "-c", "true"])
    else:
        shell.stdin.write(line.encode() + b"; echo done\\n"); shell.stdin.flush(); shell.stdout.readline()
"""


def floor(name: str, stream: bool, replays: str, kept: Callable[[Where], list[str]], line: str = "true") -> Side:
    way = "streamed" if stream else "unstreamed"
    argv = lambda at: [sys.executable, "-c", FLOOR_SCRIPT, at.url, str(at.bodies[replays, stream]), line, *kept(at)]  # noqa: E731
    return Side(f"{name}, {way}", OC_CALL, OC_DONE, argv, stream, floor=True, replays=replays)


def oc_repl(name: str, stream: bool, *options: str, docker: bool = False) -> Side:
    def argv(at: Where) -> list[str]:
        sandbox = f"docker:{at.container}" if docker else f"local:{at.work}"
        argv = [sys.executable, "-m", "oc_repl", "run", "--api-base", at.url, "--sandbox", sandbox, "--yes"]
        argv += ["--loop-limit", "0", "--max-turns", "100000", "--retries", "0", *options]
        return [*argv, *([] if stream else ["--no-stream"]), "run true"]

    return Side(f"{name}{'' if stream else ', --no-stream'}", OC_CALL, OC_DONE, argv, stream)


def mini_argv(at: Where) -> list[str]:
    argv = [str(at.mini), "-m", f"openai/{MODEL}", "-c", "mini.yaml", "-c", f"model.model_kwargs.api_base={at.url}"]
    return [*argv, "-c", f"environment.cwd={at.work}", "-y", "--exit-immediately", "-l", "0", "-t", "run true"]


OC_CALL = call_text("shell_exec", {"id": "s1", "command": "true", "block": True, "timeout": None})
OC_DONE = "<think>\n\n</think>\n\ndone"
MINI_SIDE = Side(
    "mini-swe-agent 2.4.6", call_text("bash", {"command": "true"}), call_text("bash", {"command": SUBMIT}), mini_argv
)
FLOOR = "floor: request + `bash -c true`"
KEPT_FLOOR = "kept-shell floor: request + `bash -c true` from a kept bash"
BUILTIN_FLOOR = "kept-shell floor of a builtin: request + `true` in a kept bash"
DOCKER_FLOOR = "docker kept-shell floor: request + `bash -c true` from a kept bash"
DOCKER_BUILTIN = "docker kept-shell floor of a builtin: request + `true` in a kept bash"
CONFINED = "oc-repl (confined, the default)"
UNCONFINED = "oc-repl --no-confine"
DOCKER = "oc-repl docker:<container>"


def local_sides(confined: bool) -> list[Side]:
    """The floors send the requests of the confined side where there is one, else those of the unconfined."""
    source = CONFINED if confined else UNCONFINED
    sides = [MINI_SIDE]
    for stream in (True, False):
        sides += [floor(FLOOR, stream, source, lambda at: [])]
        sides += [floor(name, stream, source, lambda at: ["bash"], line) for name, line in KEPT_LINES.items()]
        sides += [oc_repl(CONFINED, stream)] if confined else []
    return [*sides, oc_repl(UNCONFINED, True, "--no-confine")]


KEPT_LINES = {KEPT_FLOOR: "bash -c true", BUILTIN_FLOOR: "true"}
DOCKER_LINES = {DOCKER_FLOOR: "bash -c true", DOCKER_BUILTIN: "true"}


def docker_sides() -> list[Side]:
    kept = lambda at: ["docker", "exec", "-i", at.container, "bash"]  # noqa: E731
    sides = []
    for stream in (True, False):
        sides += [floor(name, stream, DOCKER, kept, line) for name, line in DOCKER_LINES.items()]
        sides.append(oc_repl(DOCKER, stream, docker=True))
    return sides


def mini_env(home: Path) -> dict[str, str]:
    registry = home / "model-registry.json"
    registry.write_text(json.dumps(REGISTRY))
    return {
        **isolated_env(home),
        "OPENAI_API_KEY": "EMPTY",
        "MSWEA_CONFIGURED": "true",  # no first-run setup questions
        "MSWEA_SILENT_STARTUP": "1",
        "MSWEA_GLOBAL_CONFIG_DIR": str(home / "mini"),
        "MSWEA_COST_TRACKING": "ignore_errors",
        "LITELLM_MODEL_REGISTRY_PATH": str(registry),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }


@dataclass(frozen=True)
class Sample:
    wall: float  # seconds, the whole process
    cpu: float  # seconds of CPU, the process and its children (user + sys)
    received: tuple[float, ...]  # when each chat request reached the server (this process's perf_counter)
    bodies: tuple[dict[str, Any], ...]  # the chat requests' bodies


Bodies = dict[tuple[str, bool], Path]


def run_once(side: Side, commands: int, mini: Path, home: Path, container: str, bodies: Bodies) -> Sample:
    """One whole run of `commands` turns plus the last."""
    work = Path(tempfile.mkdtemp(dir=home))
    env = mini_env(home) if side is MINI_SIDE else isolated_env(home)
    replies = [{"text": side.call}] * commands + [{"text": side.last}]
    with FakeServer({"replies": replies}) as server:
        argv = side.argv(Where(server.url, work, mini, container, bodies))
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        proc = subprocess.run(argv, env=env, cwd=work, stdin=subprocess.DEVNULL, capture_output=True, timeout=900)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        requests = server.chat_requests()
    if proc.returncode != 0 or len(requests) != commands + 1:
        tail = (proc.stderr or proc.stdout).decode(errors="replace")[-2000:]
        raise SystemExit(f"{side.name}: exit {proc.returncode}, {len(requests)} requests for {commands + 1}:\n{tail}")
    shutil.rmtree(work, ignore_errors=True)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Sample(wall, cpu, tuple(r["received"] for r in requests), tuple(r["body"] for r in requests))


def record_requests(sides: list[Side], high: int, mini: Path, home: Path, container: str) -> Bodies:
    """The requests the floors send: those of a run of `high` commands of each side they replay (that side's warm-up
    too), written as its client encodes them; the unstreamed ones are the same without the stream's switches."""
    bodies: Bodies = {}
    for name in sorted({side.replays for side in sides if side.floor}):
        source = next(side for side in sides if side.name == name)
        sample = run_once(source, high, mini, home, container, bodies)
        for stream in (True, False):
            path = home / f"requests-{len(bodies)}.jsonl"
            lines = [encode_body(body if stream else _unstreamed(body)) for body in sample.bodies]
            path.write_bytes(b"\n".join(lines) + b"\n")
            bodies[name, stream] = path
    return bodies


def _unstreamed(body: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in body.items() if key not in ("stream", "stream_options")}


Samples = dict[str, dict[int, list[Sample]]]


def measure(sides: list[Side], low: int, high: int, runs: int, mini: Path, container: str = "") -> Samples:
    samples: Samples = {s.name: {low: [], high: []} for s in sides}
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        bodies = record_requests(sides, high, mini, home, container)
        for side in sides:  # warm-up, not timed: byte-code, the page cache, mini's virtualenv
            run_once(side, low, mini, home, container, bodies)
        order = [(side, n) for side in sides for n in (low, high)]
        for _ in range(runs):
            random.shuffle(order)  # drift in the machine's load hits every side and size alike
            for side, n in order:
                samples[side.name][n].append(run_once(side, n, mini, home, container, bodies))
    return samples


def against(side: Side) -> list[tuple[str, str, float | None]]:
    """What `side` is set against: (the other side, as named in a row, the goal's factor or None)."""
    way = "streamed" if side.stream else "unstreamed"
    if side.name.startswith(DOCKER):
        return [
            (f"{DOCKER_FLOOR}, {way}", "the docker kept-shell floor, same way", 3.0),
            (f"{DOCKER_BUILTIN}, {way}", "the docker kept-shell floor of a builtin, same way", None),
        ]
    confined = side.name.startswith(CONFINED)
    mini = [(MINI_SIDE.name, f"{MINI_SIDE.name}, same way", 1 / 1.5 if confined else None)] if side.stream else []
    floors = [
        (f"{FLOOR}, {way}", "the floor, same way", 3.0 if confined else None),
        (f"{KEPT_FLOOR}, {way}", "the kept-shell floor, same way", 2.0 if confined else None),
    ]
    return [*mini, *floors, (f"{BUILTIN_FLOOR}, {way}", "the kept-shell floor of a builtin, same way", None)]


def to_rows(samples: Samples, sides: list[Side], low: int, high: int) -> list[Row]:
    """Per turn, three ways: whole runs differenced (wall, CPU), and inside the long runs, from the request that
    follows command `low` to the one that follows command `high` (start-up and exit left out by construction)."""

    def median(name: str, n: int, of: Callable[[Sample], float]) -> float:
        return statistics.median(of(sample) for sample in samples[name][n])

    def differenced(of: Callable[[Sample], float]) -> Callable[[str], float]:
        return lambda name: median(name, high, of) - median(name, low, of)

    ways: dict[str, Callable[[str], float]] = {
        "whole runs differenced (wall)": differenced(lambda s: s.wall),
        "whole runs differenced (cpu)": differenced(lambda s: s.cpu),
        f"requests {low + 1}->{high + 1} in a run (wall)": lambda name: median(
            name, high, lambda s: s.received[high] - s.received[low]
        ),
    }
    rows = []
    for way, seconds in ways.items():
        cost = {side.name: seconds(side.name) / (high - low) * 1000 for side in sides}
        rows += [Row(f"{side.name}: per turn, {way}", cost[side.name], "ms") for side in sides if side.floor]
        rows += [Row(f"{MINI_SIDE.name}: per turn, {way}", cost[MINI_SIDE.name], "ms")] if MINI_SIDE in sides else []
        for side in sides:
            if side.floor or side is MINI_SIDE:
                continue
            for other, named, factor in against(side):
                if other not in cost:
                    continue
                goal = {}
                if factor is not None:
                    said = f"<= {factor:g}x {named.removesuffix(', same way')}" if factor >= 1 else ">= 1.5x faster"
                    goal = {"goal": said, "met": cost[side.name] <= factor * cost[other]}
                rows.append(Row(f"{side.name}: per turn, {way}", cost[side.name], "ms", named, cost[other], **goal))
    if MINI_SIDE in sides:
        label, mini_run = f"a {low}-command run (wall)", median(MINI_SIDE.name, low, lambda s: s.wall) * 1000
        for side in sides:
            if not side.floor and side is not MINI_SIDE:
                run = median(side.name, low, lambda s: s.wall) * 1000
                rows.append(Row(f"{side.name}: {label}", run, "ms", MINI_SIDE.name, mini_run))
    return rows


def container_of(image: str) -> tuple[Any, str]:
    """A container of `image` for the docker sides (no network, as a task's by default), and its id."""
    from oc_repl.sandbox.docker_container import connect

    client = connect()
    made = client.containers.run(image, ["sleep", "infinity"], detach=True, network_mode="none", auto_remove=False)
    return made, made.id


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each side and size (default 5)")
    parser.add_argument("--low", type=int, default=5)
    parser.add_argument("--high", type=int, default=45)
    parser.add_argument("--mini-venv", type=Path, default=CACHE / "mini-swe-agent-2.4.6")
    parser.add_argument("--image", help="also in docker: a container of this image (e.g. oc-repl-test:bookworm)")
    parser.add_argument("--only-docker", action="store_true", help="with --image: the docker sides alone")
    add_option(parser)
    args = parser.parse_args()
    sides = [] if args.only_docker else local_sides(confine.check()[0])
    mini = mini_command(args.mini_venv) if MINI_SIDE in sides else args.mini_venv
    made, container = container_of(args.image) if args.image else (None, "")
    sides += docker_sides() if args.image else []
    load = os.getloadavg()[0]
    try:
        samples = measure(sides, args.low, args.high, args.runs, mini, container)
    finally:
        if made is not None:
            made.remove(force=True)
    rows = to_rows(samples, sides, args.low, args.high)
    print(f"turns {args.low} -> {args.high} differenced, medians of {args.runs} runs; `true` each turn, instant model")
    print(f"load average (1 min) at the start {load:.2f}, at the end {os.getloadavg()[0]:.2f}, {os.cpu_count()} cpus")
    for row in rows:
        ratio = f"   {row.ratio:5.3f}x {row.baseline}" if row.ratio is not None else ""
        verdict = f"   goal {row.goal}: {'met' if row.met else 'NOT met'}" if row.goal else ""
        print(f"{row.figure:90s} {row.value:8.2f} ms{ratio}{verdict}")
    write(rows, args.rows)


if __name__ == "__main__":
    main()
