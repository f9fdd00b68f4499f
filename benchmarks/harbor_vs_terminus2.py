"""Harbor's own `terminus-2` against oc-repl's Harbor agent (`--ak protocol=terminus-json`), in the same run.

Both agents run real `harbor run` jobs, `-n 3`, on examples/tasks/count-words, examples/tasks/fix-json-config and
tests/fixtures/harbor/write-hi, in Harbor's docker environment as the tests run it (tests/harbor_support.py), against
the loopback fake server: every reply comes after LATENCY seconds and is the same scripted terminus JSON for both
(commands with the durations a model gives them), chosen by the task and the turn. The replies each agent asked for,
turn by turn, must be the same, and so must the rewards. terminus-2 runs without its asciinema recording (there is no
network to install it). Each trial's environment counts its calls (CountingEnvironment: every exec and upload, and
its time), which the model's requests split into start-up (before the first request), the turns with commands, the
turns without, and the wind-down after the last reply.

Printed per agent: its time (Harbor's agent setup + execution, summed over the trials, median over --rounds, the two
agents alternating), environment calls per command and at start-up; then the ratio terminus-2 / oc-repl and the
ceiling: (model latency + terminus-2's sleeps) / model latency, the ratio were calls free and commands instant.
`--exec compose` sends each exec through docker-compose 1.29's own `exec` (a compose front end: about a second a call,
as Harbor's docker environment costs where compose v2 runs it) instead of `docker exec` (the default).
Goal: the ratio >= 1.8 where the ceiling is >= 2.3; one call per command, start-up <= 2, winding down <= 1.
Run in Harbor's virtualenv: DOCKER_HOST=... python benchmarks/harbor_vs_terminus2.py [--latency 1] [--rounds 3]
[--exec docker|compose]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.rows import Row, add_option, harbor_imports, write  # noqa: E402

with harbor_imports(__name__):
    from oc_repl.harbor import OfflineComposeV1Environment
    from tests.harbor_support import AGENT, harbor_run

CALLS = "environment-calls.jsonl"  # in each trial's directory
ENVIRONMENT = "benchmarks.harbor_vs_terminus2:CountingEnvironment"
MODEL = "openai/qwen3-8b-oc"
KEY = {"OPENAI_API_KEY": "EMPTY"}  # litellm (terminus-2) wants one; the loopback server takes any


class CountingEnvironment(OfflineComposeV1Environment):
    """The tests' docker environment, each call recorded (when it started and how long it took) in the trial's
    directory."""

    async def _timed(self, kind: str, what: str, call: Any) -> Any:
        started = time.time()
        try:
            return await call
        finally:
            line = json.dumps({"kind": kind, "at": started, "seconds": time.time() - started, "what": what})
            with (self.trial_paths.trial_dir / CALLS).open("a") as f:
                f.write(line + "\n")

    async def exec(self, command: str, *args: Any, **kwargs: Any) -> Any:
        return await self._timed("exec", command, super().exec(command, *args, **kwargs))

    async def upload_file(self, *args: Any, **kwargs: Any) -> Any:
        return await self._timed("upload", "", super().upload_file(*args, **kwargs))

    async def upload_dir(self, *args: Any, **kwargs: Any) -> Any:
        return await self._timed("upload", "", super().upload_dir(*args, **kwargs))


def _reply(commands: list[tuple[str, float]], done: bool = False, plan: str = "Next step.") -> dict[str, Any]:
    body = {
        "analysis": "Looking at the terminal.",
        "plan": plan,
        "commands": [{"keystrokes": keys, "duration": duration} for keys, duration in commands],
        "task_complete": done,
    }
    return body


# Each task: where it is, text of its instruction (how the server tells the conversations apart), and the replies.
TASKS: dict[str, tuple[Path, str, list[dict[str, Any]]]] = {
    "count-words": (
        ROOT / "examples" / "tasks" / "count-words",
        "Count the words in it",
        [
            _reply([("ls -la /app\n", 1.0), ("cat /app/notes.txt\n", 1.0)]),
            _reply([("wc -w < /app/notes.txt > /app/count.txt\n", 1.0), ("cat /app/count.txt\n", 1.0)]),
            _reply([("python3 -c \"print(len(open('/app/notes.txt').read().split()))\"\n", 3.0)]),
            _reply([], done=True, plan="The count is written."),
            _reply([], done=True, plan="Confirmed."),
        ],
    ),
    "fix-json-config": (
        ROOT / "examples" / "tasks" / "fix-json-config",
        "no longer parses as JSON",
        [
            _reply([("cat /app/config.json\n", 1.0), ("python3 -m json.tool /app/config.json\n", 3.0)]),
            _reply([('sed -i \'s/"debug": false,/"debug": false/\' /app/config.json\n', 1.0)]),
            _reply([("python3 -m json.tool /app/config.json && echo VALID\n", 3.0)]),
            _reply([], done=True, plan="The file parses again."),
            _reply([], done=True, plan="Confirmed."),
        ],
    ),
    "write-hi": (
        ROOT / "tests" / "fixtures" / "harbor" / "write-hi",
        "Write the word hi",
        [
            _reply([("ls -la /srv\n", 1.0)]),
            _reply([("echo hi > /srv/out.txt\n", 1.0), ("cat /srv/out.txt\n", 2.0)]),
            _reply([], done=True, plan="The file holds the word."),
            _reply([], done=True, plan="Confirmed."),
        ],
    ),
}
AGENTS = {
    "terminus-2": ["--agent", "terminus-2", "--ak", "record_terminal_session=false"],
    "oc-repl": ["--agent", AGENT, "--ak", "protocol=terminus-json"],
}


def server_script(latency: float) -> dict[str, Any]:
    routes = [
        {"match": match, "replies": [{"text": json.dumps(reply), "delay": latency} for reply in replies]}
        for _, match, replies in TASKS.values()
    ]
    return {"routes": routes, "replies": []}


def _when(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def _span(timing: dict[str, Any] | None) -> float:
    if not timing or not timing.get("started_at") or not timing.get("finished_at"):
        return 0.0
    return _when(timing["finished_at"]) - _when(timing["started_at"])


@dataclass
class Trial:
    task: str
    reward: float | None
    agent_s: float  # Harbor's agent setup + execution
    turns: list[int]  # the replies asked for, in order (how many the model had given before each request)
    startup: int = 0  # environment calls before the first request
    command_calls: int = 0  # in the turns whose reply has commands
    commands: int = 0
    empty_calls: int = 0  # in the other turns but the last
    empty_turns: int = 0
    wind_down: int = 0  # after the last reply
    seconds_in_calls: float = 0.0
    metadata: dict[str, Any] = field(default_factory=dict)


def _task_of(body: dict[str, Any]) -> str:
    first = next((m.get("content") for m in body.get("messages", []) if m.get("role") == "user"), "") or ""
    return next(name for name, (_, match, _) in TASKS.items() if match in str(first))


def trials(job: Path, requests: list[dict[str, Any]], clock: float) -> list[Trial]:
    """Each trial of a job, with its calls split by the model's requests (`clock`: wall time minus the server's)."""
    from tests.fakeserver import conversation_turn

    found = []
    for path in sorted(job.glob("*/result.json")):
        result = json.loads(path.read_text())
        started = _when(result["agent_setup"]["started_at"])
        ended = _when(result["agent_execution"]["finished_at"])
        name = result["task_name"].split("/")[-1]
        mine = [r for r in requests if _task_of(r["body"]) == name and started <= r["received"] + clock <= ended]
        times = [r["received"] + clock for r in mine]
        rewards = (result.get("verifier_result") or {}).get("rewards") or {}
        trial = Trial(
            name,
            rewards.get("reward"),
            _span(result.get("agent_setup")) + _span(result.get("agent_execution")),
            [conversation_turn(r["body"]) for r in mine],
            metadata=(result.get("agent_result") or {}).get("metadata") or {},
        )
        calls_file = path.parent / CALLS
        calls = [json.loads(line) for line in calls_file.read_text().splitlines()] if calls_file.exists() else []
        replies = TASKS[name][2]
        for call in calls:
            at = call["at"]
            if not started <= at <= ended:
                continue  # Harbor's own: the environment's start, the verifier
            trial.seconds_in_calls += call["seconds"]
            turn = sum(1 for t in times if t <= at) - 1  # the reply this call acts on
            if turn < 0:
                trial.startup += 1
            elif turn >= len(times) - 1:
                trial.wind_down += 1
            elif replies[trial.turns[turn]]["commands"]:
                trial.command_calls += 1
            else:
                trial.empty_calls += 1
        for turn in trial.turns[:-1]:
            count = len(replies[turn]["commands"])
            trial.commands += count
            trial.empty_turns += not count
        found.append(trial)
    return found


def dataset(where: Path) -> Path:
    """The tasks as one Harbor dataset: a directory holding each task's."""
    for name, (task, _, _) in TASKS.items():
        shutil.copytree(task, where / name)
    return where


def run_job(
    jobs: Path, tasks: Path, name: str, agent: str, server: Any, clock: float, exec_by: str = "docker"
) -> list[Trial]:
    seen = len(server.chat_requests())
    args = ["-p", str(tasks), *AGENTS[agent], "-m", MODEL, "--ak", f"api_base={server.url}", "-n", str(len(TASKS))]
    env = {**KEY, "COMPOSE_V1_EXEC": exec_by}
    done, job = harbor_run(jobs, name, *args, environment=ENVIRONMENT, env=env, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"{agent}: harbor run failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    found = trials(job, server.chat_requests()[seen:], clock)
    if len(found) != len(TASKS):
        raise SystemExit(f"{agent}: {len(found)} trials for {len(TASKS)} tasks in {job}")
    return found


def ceiling(latency: float) -> float:
    """(model latency + terminus-2's sleeps) / model latency, over the scripts."""
    replies = [reply for _, _, script in TASKS.values() for reply in script]
    sleeps = sum(min(c["duration"], 60) for reply in replies for c in reply["commands"])
    return (len(replies) * latency + sleeps) / (len(replies) * latency)


def summary(rounds: list[list[Trial]]) -> dict[str, float]:
    flat = [t for trials_ in rounds for t in trials_]
    empty = sum(t.empty_turns for t in flat)

    def per_round(value: Any) -> float:
        return statistics.median(sum(value(t) for t in trials_) for trials_ in rounds)

    return {
        "agent_s": per_round(lambda t: t.agent_s),
        "per_command": sum(t.command_calls for t in flat) / sum(t.commands for t in flat),
        "per_empty_turn": sum(t.empty_calls for t in flat) / empty if empty else 0.0,
        "startup": max(t.startup for t in flat),
        "wind_down": statistics.median(t.wind_down for t in flat),
        "calls": per_round(lambda t: t.startup + t.command_calls + t.empty_calls + t.wind_down),
        "seconds_in_calls": per_round(lambda t: t.seconds_in_calls),
    }


def check_same(results: dict[str, list[list[Trial]]]) -> None:
    """The same replies asked for, turn by turn, and the same rewards, trial for trial."""
    for rounds in zip(*results.values(), strict=True):
        by_task = [{t.task: (t.turns, t.reward) for t in trials_} for trials_ in rounds]
        if any(found != by_task[0] for found in by_task[1:]):
            raise SystemExit(f"the conversations or rewards differ: {by_task}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--latency", type=float, default=1.0, help="seconds the fake model takes per reply")
    parser.add_argument("--rounds", type=int, default=3, help="jobs of each agent, alternating (default 3)")
    parser.add_argument(
        "--exec",
        dest="exec_by",
        choices=("docker", "compose"),
        default="docker",
        help="how each exec reaches the container (default docker)",
    )
    add_option(parser)
    args = parser.parse_args()
    from tests.fakeserver import FakeServer

    results: dict[str, list[list[Trial]]] = {agent: [] for agent in AGENTS}
    load = os.getloadavg()[0]
    with FakeServer(server_script(args.latency)) as server, tempfile.TemporaryDirectory() as tmp:
        clock = time.time() - time.perf_counter()  # the server stamps requests with perf_counter
        tasks = dataset(Path(tmp) / "tasks")
        for number in range(args.rounds):
            order = list(AGENTS) if number % 2 == 0 else list(reversed(AGENTS))
            for agent in order:
                found = run_job(Path(tmp) / "jobs", tasks, f"{agent}-{number}", agent, server, clock, args.exec_by)
                results[agent].append(found)
                print(f"round {number + 1} {agent}: " + ", ".join(f"{t.task} {t.agent_s:.1f} s" for t in found))
    check_same(results)
    figures = {agent: summary(rounds) for agent, rounds in results.items()}
    top = ceiling(args.latency)
    theirs, ours = figures["terminus-2"], figures["oc-repl"]
    ratio = theirs["agent_s"] / ours["agent_s"]
    print(
        f"{len(TASKS)} tasks, -n {len(TASKS)}, model latency {args.latency:g} s, medians of {args.rounds} rounds, "
        f"exec through {args.exec_by}"
    )
    print(f"load average (1 min) at the start {load:.2f}, at the end {os.getloadavg()[0]:.2f}, {os.cpu_count()} cpus")
    for agent, f in figures.items():
        print(
            f"{agent:11s} agent time {f['agent_s']:6.1f} s   environment calls: {f['per_command']:.2f} per command, "
            f"{f['per_empty_turn']:.2f} per turn without commands, {f['startup']:.0f} at start-up, "
            f"{f['wind_down']:.0f} winding down; {f['calls']:.0f} calls, {f['seconds_in_calls']:.1f} s in them"
        )
    meta = [t.metadata.get("environment_calls") for rounds in results["oc-repl"] for t in rounds]
    print(f"oc-repl's own count (agent_result.metadata.environment_calls): {meta}")
    print(f"terminus-2 / oc-repl: {ratio:.2f}x   ceiling {top:.2f}x   (goal >= 1.8x where the ceiling is >= 2.3x)")
    print("same replies asked for, turn by turn, and the same rewards: True")
    goal = {"goal": ">= 1.8x faster (<= 0.556x)", "met": ratio >= 1.8} if top >= 2.3 else {}
    one, startup, wind_down = ours["per_command"], ours["startup"], ours["wind_down"]
    rows = [
        Row(
            f"oc-repl agent time, 3 Harbor tasks, exec via {args.exec_by}",
            ours["agent_s"],
            "s",
            "terminus-2",
            theirs["agent_s"],
            **goal,
        ),
        Row("oc-repl calls per command", one, "x", "terminus-2", theirs["per_command"], "= 1", one == 1),
        Row("oc-repl calls at start-up", startup, "x", "terminus-2", theirs["startup"], "<= 2", startup <= 2),
        Row("oc-repl calls winding down", wind_down, "x", "terminus-2", theirs["wind_down"], "<= 1", wind_down <= 1),
        Row("ceiling: (latency + terminus-2's sleeps) / latency", top, "x"),
    ]
    write(rows, args.rows)


if __name__ == "__main__":
    main()
