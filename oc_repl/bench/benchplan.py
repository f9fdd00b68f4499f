"""DIR/bench.json: what a bench runs (its tasks, arms, k and each arm's run options), written before any trial and
checked on every re-run: a re-run must give an arm the same run options, or its trials would mix two setups."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from oc_repl import __version__
from oc_repl.bench.results import write_json_atomic
from oc_repl.config import OPTIONS
from oc_repl.errors import UsageError
from oc_repl.private import make_dirs
from oc_repl.redact import Redactor
from oc_repl.safejson import BadInput, load_file
from oc_repl.sources import KEY
from oc_repl.tasks.model import TaskDir

PLAN = "bench.json"


def write_plan(
    out: Path,
    tasks: Sequence[TaskDir],
    k: int,
    options: dict[str, dict[str, Any]],
    redact: Redactor | None = None,
    in_force: dict[str, dict[str, Any]] | None = None,
    sequential: dict[str, Any] | None = None,
) -> None:
    """DIR/bench.json: what this bench runs (`sequential`: --until decided's alpha, margin and budget). A re-run
    must give a protocol the same run options, or its trials would mix two setups."""
    try:
        earlier = read_plan(out)
        before = earlier.get("run_options") or {}
    except BadInput as exc:
        raise UsageError(str(exc), hint="choose another --out, or remove that file") from None
    for protocol, now in options.items():
        if protocol in before:
            changed = _changes(_recorded(before[protocol]), now)
            if changed:
                raise UsageError(
                    f"{out} holds {protocol} trials run with other options ({changed})",
                    hint="re-run with the same options to finish it, or choose another --out",
                )
    plan = {
        "version": __version__,
        "tasks": [{"name": t.name, "path": str(t.path), "format": t.format, "sha256": t.content_hash()} for t in tasks],
        "protocols": list(options),
        "k": k,
        "run_options": {**before, **options},
        # each arm's protocol settings as its trials ran them, defaults included (camel: rich's line)
        "protocol_settings": {**(earlier.get("protocol_settings") or {}), **(in_force or {})},
        "updated_at": time.time(),
    }
    if sequential or earlier.get("sequential"):
        plan["sequential"] = sequential or earlier["sequential"]
    make_dirs(out)
    write_json_atomic(out / PLAN, plan, redact)


def _changes(before: dict[str, Any], now: dict[str, Any]) -> str:
    return ", ".join(f"{flag} was {was}, now {is_}" for flag, was, is_ in setting_differences(before, now))


def setting_differences(before: dict[str, Any], now: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """The settings (flag, one value, the other) that differ between two records of run options (an unnamed one has
    its default)."""
    found = []
    for name, option in OPTIONS.items():
        default = str(option.default) if isinstance(option.default, Path) else option.default
        was, is_ = before.get(name, default), now.get(name, default)
        if name not in KEY and was != is_:
            found.append((option.flag, was, is_))
    return found


def arm_options(plan: dict[str, Any], label: str) -> dict[str, Any]:
    """The run options a plan records for one of its arms, as data ({} when it records none)."""
    recorded = (plan.get("run_options") or {}).get(label)
    return _recorded(recorded) if isinstance(recorded, dict | list) else {}


def task_hashes(plan: dict[str, Any]) -> dict[str, str]:
    """Each planned task's content hash, where the plan records one (benches before it did not)."""
    tasks = [t for t in plan.get("tasks") or [] if isinstance(t, dict)]
    return {str(t["name"]): str(t["sha256"]) for t in tasks if t.get("name") and t.get("sha256")}


def _recorded(options: dict[str, Any] | list[str]) -> dict[str, Any]:
    """A protocol's recorded run options as data. Benches before settings went to trials as data recorded the flags
    of `oc-repl run` instead: those are read back by the table (a flag, with its value unless it is a switch)."""
    if isinstance(options, dict):
        return options
    switches = {o.flag: (o.name, True) for o in OPTIONS.values() if o.kind == "bool"}
    switches.update({o.negation: (o.name, False) for o in OPTIONS.values() if o.negation})
    valued = {o.flag: o for o in OPTIONS.values() if o.kind != "bool"}
    parse = {"int": int, "float": float, "str": str, "Path": str}
    data: dict[str, Any] = {}
    args = iter(options)
    for flag in args:
        if flag in switches:
            data[switches[flag][0]] = switches[flag][1]
        elif flag in valued:
            value: Any = next(args, "")
            with contextlib.suppress(ValueError):  # a value that is not of its type stays text: never the same as now
                value = parse[valued[flag].kind](value)
            data[valued[flag].name] = value
    return data


def read_plan(out: Path) -> dict[str, Any]:
    """DIR/bench.json, {} when there is none; a BadInput naming it when it is not a plan."""
    path = out / PLAN
    if not path.exists():
        return {}
    plan = load_file(path)
    problem = _plan_problem(plan)
    if problem:
        raise BadInput(path, f"not a bench plan: {problem}")
    return plan


def _plan_problem(plan: Any) -> str:
    if not isinstance(plan, dict):
        return "not a JSON object"
    shapes = {
        "protocols": lambda v: isinstance(v, list) and all(isinstance(p, str) for p in v),
        "tasks": lambda v: isinstance(v, list) and all(isinstance(t, dict) for t in v),
        "k": lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
        "run_options": lambda v: isinstance(v, dict) and all(_options_shape(a) for a in v.values()),
        "version": lambda v: isinstance(v, str),
    }
    return next(
        (f"{name}: not of its type" for name, fits in shapes.items() if name in plan and not fits(plan[name])), ""
    )


def _options_shape(options: Any) -> bool:
    """A protocol's run options: settings data, or (in benches before that) a list of flags."""
    if isinstance(options, list):
        return all(isinstance(flag, str) for flag in options)
    return isinstance(options, dict) and all(isinstance(name, str) for name in options)
