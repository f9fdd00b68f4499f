"""Fake-server scripts that play whole benches: per task and protocol, a correct or a wrong episode (or a mix of both
over a cell's trials), routed by the request's first user message so concurrent trials never share replies."""

from __future__ import annotations

from pathlib import Path

from oc_repl.tasks.model import load_task
from tests.cli.test_cli import answer
from tests.conftest import ROOT
from tests.docker_support import exec_call
from tests.protocols.terminus.test_terminus_cli import js

TASKS = ROOT / "examples" / "tasks"
CAMEL, TERMINUS = "camel-terminal-toolkit", "terminus-json"
GOOD_MARK = "variant-good"  # printed by a correct episode when a cell mixes correct and wrong ones


def solution(task: Path) -> str:
    """The task's solution script as one command: without its own first line's shebang (a heredoc's stays)."""
    for name in ("solution.sh", "solution/solve.sh"):
        if (task / name).is_file():
            lines = (task / name).read_text().splitlines()
            return "\n".join(lines[1:] if lines and lines[0].startswith("#!") else lines)
    raise FileNotFoundError(task)


def episode(protocol: str, commands: str) -> list[dict]:
    """What a model that runs `commands` and then says it is done sends, in the protocol's own shape."""
    if protocol == CAMEL:
        return [exec_call(commands, timeout=60), answer("Done.")]
    keys = "".join(line + "\n" for line in commands.splitlines())
    return [js([(keys, 1.0)]), js([], complete=True), js([], complete=True)]


def route(task: Path, protocol: str, plays: str) -> dict:
    """plays: "good", "bad", or a string of g/b per trial in start order (e.g. "gbb": the first trial of the cell
    to start solves it, the next two fail)."""
    good = episode(protocol, f"echo {GOOD_MARK}\n{solution(task)}" if len(plays) > 1 else solution(task))
    bad = episode(protocol, "echo nothing to do here")
    instruction = load_task(task).instruction.strip().splitlines()[0]
    match = f"Task name:{task.name}\n" if protocol == CAMEL else instruction
    base = {"match": match, "tools": protocol == CAMEL}
    if plays in ("good", "bad"):
        return {**base, "replies": good if plays == "good" else bad}
    # the first variant needs no marker: make it the wrong one, found in order by round robin
    variants = [{"replies": good, "marker": GOOD_MARK} if p == "g" else {"replies": bad} for p in plays]
    if variants[0].get("marker"):
        raise ValueError("start a mixed cell with a wrong trial (b...)")
    return {**base, "variants": variants}


# What a request no route matches gets: the bench's server check before its first trial (a one-token reply).
PROBE_REPLY = {"replies": [{"text": "ready"}], "cycle": True}


def is_probe(request: dict) -> bool:
    """The bench's server check, not a trial's turn."""
    return request["body"].get("max_tokens") == 1


def scripted(*routes: dict) -> dict:
    """A fake-server script of these routes, answering the bench's server check too."""
    return {"routes": list(routes), **PROBE_REPLY}


def bench_script(plan: dict[tuple[str, str], str]) -> dict:
    """{(task, protocol): plays} -> a fake-server script."""
    return scripted(*(route(TASKS / task, protocol, plays) for (task, protocol), plays in plan.items()))


# The plan: what every trial of `bench examples/tasks -k 3` does, and so what the table must say.
PLAN = {
    ("count-words", CAMEL): "bgb",  # one of three
    ("count-words", TERMINUS): "bad",
    ("fix-json-config", CAMEL): "bad",
    ("fix-json-config", TERMINUS): "good",
    ("fix-permissions", CAMEL): "good",
    ("fix-permissions", TERMINUS): "bad",
    ("repair-module", CAMEL): "bad",
    ("repair-module", TERMINUS): "good",
    ("write-greeting", CAMEL): "good",
    ("write-greeting", TERMINUS): "good",
}


def resolved_per_trial(plays: str, k: int) -> list[bool]:
    if plays in ("good", "bad"):
        return [plays == "good"] * k
    return [p == "g" for p in plays[:k]]
