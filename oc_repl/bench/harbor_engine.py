"""`oc-repl bench --harbor ENV`: the bench's trials handed to Harbor as the engine.

The bench writes a Harbor job config (the tasks or a registry dataset, k attempts, -j trials at once, the environment,
one oc-repl agent per arm with the arm's run settings as its options) and runs `harbor run -c` with it; a job started
before is resumed with Harbor's own `harbor job resume`. The result is a Harbor job directory, which every bench
command reads (harbor_jobs.py); while Harbor runs it, the bench follows it as `bench watch` does. The key goes by
Harbor's environment (OPENAI_API_KEY), never into its files.

What Harbor does not do as the local bench does is refused, not dropped: terminal-bench-format task directories
(Harbor reads its own format), run settings its agent does not take. Harbor's verifier, not oc-repl's, judges every
trial; `--retry-infra N` becomes Harbor's `max_retries` (Harbor retries what its error policy says is worth it).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from oc_repl.apikey import KEY_ENV
from oc_repl.bench import harbor_jobs
from oc_repl.config import HARBOR, RunSettings, options_on
from oc_repl.errors import UsageError
from oc_repl.private import write_atomic
from oc_repl.sources import to_data

AGENT = harbor_jobs.OC_REPL_AGENT
CONFIG = "oc-repl-job.json"  # the config the job was started from, kept beside Harbor's own in the job directory
LOG = "harbor.log"  # Harbor's own output
INSTALL = "pip install 'oc-repl[harbor]' (Python 3.12 or later) into the environment whose `harbor` is on PATH"


def harbor_command() -> str:
    """Harbor's command: the one beside this interpreter (the same environment), else the one on PATH."""
    beside = Path(sys.executable).parent / "harbor"
    found = str(beside) if beside.is_file() else shutil.which("harbor")
    if not found:
        raise UsageError("bench --harbor needs Harbor", hint=INSTALL)
    return found


def agent_options(settings: RunSettings) -> dict[str, Any]:
    """An arm's run settings as the options of oc-repl's Harbor agent; a usage error naming those it does not take."""
    offered = {option.name for option in options_on(HARBOR)}
    data = to_data(settings)
    refused = sorted(name for name in data if name not in offered)
    if refused:
        raise UsageError(
            f"Harbor's oc-repl agent does not take {', '.join(refused)}",
            hint="drop them with --harbor (`harbor agent schema oc_repl.harbor:OcRepl` lists what it takes)",
        )
    return data


def job_config(
    out: Path,
    settings: dict[str, RunSettings],
    tasks: list[Any],
    dataset: str | None,
    k: int,
    jobs: int,
    environment: str,
    retries: int,
    skipped: set[str],
) -> dict[str, Any]:
    """The Harbor job config of a bench: `tasks` (Harbor task directories) or `dataset` (name@version)."""
    agents, labels = [], {}
    for arm, each in settings.items():
        agent = {"import_path": AGENT, "kwargs": agent_options(each)}
        if each.model:
            agent["model_name"] = each.model
        label = harbor_jobs.arm_label(agent, {})
        if label in labels:
            raise UsageError(f"arms {labels[label]} and {arm} look the same to Harbor ({label})",
                             hint="give each arm its own protocol or model")  # fmt: skip
        labels[label] = arm
        agents.append(agent)
    kind = {"import_path": environment} if ":" in environment else {"type": environment}
    config: dict[str, Any] = {
        "job_name": out.name,
        "jobs_dir": str(out.parent.resolve()),
        "n_attempts": k,
        "n_concurrent_trials": jobs,
        "quiet": True,
        "retry": {"max_retries": retries},
        "environment": kind,
        "agents": agents,
    }
    if dataset:
        name, _, version = dataset.partition("@")
        config["datasets"] = [{"name": name, **({"version": version} if version else {})}]
        if skipped:
            config["datasets"][0]["exclude_task_names"] = sorted(skipped)
    else:
        other = [t.name for t in tasks if t.format != "harbor"]
        if other:
            raise UsageError(
                f"Harbor runs tasks in its own format; not: {', '.join(other)}",
                hint="run them with the local bench (leave out --harbor), or convert them with Harbor's adapters",
            )
        config["tasks"] = [{"path": str(t.path.resolve())} for t in tasks if t.name not in skipped]
    return config


def run(out: Path, config: dict[str, Any] | None, api_key: str, interval: float = 2.0) -> int:
    """Start the job (`config`) or resume the one at `out` (None), follow it until Harbor is done; Harbor's exit."""
    from oc_repl.bench.watch import Watcher

    command = harbor_command()
    out.mkdir(parents=True, exist_ok=True)
    if config is None:
        again = harbor_jobs.never_ran(out)
        for trial in again:
            shutil.rmtree(trial)
        if again:
            sys.stderr.write(f"bench: {len(again)} trials Harbor stopped before they ran are run again\n")
        argv = [command, "job", "resume", "-p", str(out), "-f", "CancelledError"]
    else:
        write_atomic(out / CONFIG, json.dumps(config, indent=2) + "\n")
        argv = [command, "run", "-c", str(out / CONFIG), "-y"]
    env = {**os.environ, **({KEY_ENV: api_key} if api_key else {})}
    with (out / LOG).open("ab") as log:
        harbor = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env)
    try:
        while not harbor_jobs.is_job(out) or not (out / harbor_jobs.LOCK).is_file():
            if harbor.poll() is not None:
                return _ended(harbor, out)
            time.sleep(0.2)
        if Watcher(out).follow(interval, until=lambda: harbor.poll() is not None) == 130:
            harbor.send_signal(signal.SIGINT)  # Harbor cancels its trials and writes what it has
        harbor.wait()
    except KeyboardInterrupt:
        harbor.send_signal(signal.SIGINT)
        harbor.wait()
        return 130
    return _ended(harbor, out)


def _ended(harbor: subprocess.Popen, out: Path) -> int:
    if harbor.returncode:
        tail = (out / LOG).read_text(errors="replace").strip().splitlines()[-5:] if (out / LOG).is_file() else []
        sys.stderr.write(f"harbor exited {harbor.returncode}; its output is in {out / LOG}\n" + "\n".join(tail) + "\n")
    return harbor.returncode or 0
