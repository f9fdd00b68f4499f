"""Task directories run through the reference harnesses with their own oracle or nop agent, and each task's verdict
as that harness gives it: terminal-bench 0.2.18 (`tb run`) and Harbor 0.25 (`harbor run`). Tests hold oc-repl's
verdicts against these on the same tasks and images.

terminal-bench 0.2.18 needs Python >= 3.12: it is installed in a cached virtualenv made by a 3.12 interpreter (this
one, `python3.12`, or pyenv's). It runs `docker compose -p NAME -f TASK/docker-compose.yaml build|up -d|down` (the v2
command line) and everything else through the docker SDK; the v2 command line reaches Debian's docker-compose 1.29
through tests/fixtures/terminal-bench/docker-compose, a CLI plugin in a DOCKER_CONFIG of the run's own. It runs with
--no-cleanup (its own cleanup also prunes the daemon's build cache, which other runs share); its containers and the
images it built (tb__TASK__client) are removed here afterwards.

Harbor 0.25 is imported (tests/harbor_support.py), so harbor_verdicts runs only in Harbor's own virtualenv, like the
tests in tests/integrations; it builds each task's environment/Dockerfile and removes the image itself.

A harness that cannot be had skips the test (fails it under CI=true); a harness run that fails is the test's failure;
a task the harness gave no verdict for (its trial failed) maps to None.
"""

from __future__ import annotations

import fcntl
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from tests.packages import cache_root, cached_venv, unavailable

ROOT = Path(__file__).resolve().parent.parent
LIVE_TASKS = ROOT / "tests" / "fixtures" / "live_tasks"
TB_COMPOSE_PLUGIN = ROOT / "tests" / "fixtures" / "terminal-bench" / "docker-compose"
TB_PIN = "terminal-bench==0.2.18"


def task_names(tasks: Path) -> list[str]:
    """The task directories in `tasks`, by name (a task's name is its directory's, in both harnesses)."""
    marks = ("task.yaml", "task.toml")
    return sorted(p.name for p in tasks.iterdir() if p.is_dir() and any((p / m).is_file() for m in marks))


def python312() -> str | None:
    """An interpreter that runs and is Python >= 3.12: this one, one of OC_REPL_TEST_PYTHONS, python3.12, or pyenv's
    (in the real home: the suite points HOME at a fresh directory)."""
    if sys.version_info >= (3, 12):
        return sys.executable
    listed = [p for p in os.environ.get("OC_REPL_TEST_PYTHONS", "").split(os.pathsep) if p]
    home = Path(pwd.getpwuid(os.getuid()).pw_dir)
    pyenv = [str(p) for p in sorted(home.glob(".pyenv/versions/3.12*/bin/python"))]
    for candidate in [*listed, "python3.12", *pyenv]:  # pyenv's shims exist for versions they will not start
        with suppress(OSError, subprocess.SubprocessError):
            check = [candidate, "-c", "import sys; assert sys.version_info >= (3, 12)"]
            if subprocess.run(check, capture_output=True, timeout=60).returncode == 0:
                return candidate
    return None


def need_compose_v1() -> None:
    """Both harnesses' `docker compose` runs on Debian's docker-compose 1.x here (skips, or fails under CI=true,
    without it)."""
    if shutil.which("docker-compose") is None or shutil.which("docker") is None:
        unavailable("the reference harnesses run compose on docker-compose 1.x and the docker CLI: not installed")


def terminal_bench() -> Path:
    """The `tb` of terminal-bench 0.2.18 in its cached virtualenv (skips, or fails under CI=true, without it)."""
    need_compose_v1()
    python = python312()
    if python is None:
        unavailable("terminal-bench 0.2.18 needs Python >= 3.12: python3.12 is not installed (nor pyenv's 3.12)")
    venv_python = cached_venv("terminal-bench-0.2.18-venv", [TB_PIN], "terminal-bench 0.2.18", interpreter=python)
    return venv_python.parent / "tb"


def tb_env(docker_config: Path) -> dict[str, str]:
    """What `tb run` runs with: nothing of a model's or of oc-repl's, litellm's bundled cost map (a remote fetch would
    be retried offline), the compose plugin's DOCKER_CONFIG, a 1 s stop timeout for compose v1 (the client's PID 1
    ignores SIGTERM, so each `down` would wait 10 s)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "OC_REPL_"))}
    env.update(LITELLM_LOCAL_MODEL_COST_MAP="True", DOCKER_CONFIG=str(docker_config), COMPOSE_V1_STOP_TIMEOUT="1")
    env.update(NO_COLOR="1")
    return env


@contextmanager
def one_tb_run_at_a_time() -> Iterator[None]:
    """terminal-bench names a task's image after the task alone (tb__NAME__client): two runs of one task on a daemon
    would build, use and remove the same image, so the runs of this cache wait for each other."""
    cache_root().mkdir(parents=True, exist_ok=True)
    with (cache_root() / "terminal-bench-run.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def remove_tb_leftovers(run_id: str, names: list[str]) -> None:
    """The containers of the run (tb's own `down` removes them unless the run broke off) and the images it built."""
    import docker

    client = docker.from_env()
    try:
        for container in client.containers.list(all=True, filters={"name": run_id}):
            with suppress(docker.errors.NotFound):
                container.remove(force=True)
        for name in names:
            with suppress(docker.errors.ImageNotFound):
                client.images.remove(f"tb__{name}__client".replace(".", "-"), force=True)
    finally:
        client.close()


@contextmanager
def directory(out: Path | None, prefix: str) -> Iterator[Path]:
    """`out` as it is (the caller keeps what the harness wrote there), or a temporary directory."""
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        yield out
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as scratch:
        yield Path(scratch)


def tb_run(tb: Path, tasks: Path, agent: str, names: list[str], concurrency: int, runs: Path, timeout: float) -> Path:
    """One `tb run` of the tasks `names` of `tasks`; its run directory (results.json, each trial's panes and logs)."""
    run_id = f"oc-{agent}-{uuid.uuid4().hex[:8]}"  # containers are TASK-1-of-1-RUN_ID: a run's own are found by it
    with tempfile.TemporaryDirectory(prefix="oc-repl-tb-") as scratch:
        config = Path(scratch) / "docker-config"
        (config / "cli-plugins").mkdir(parents=True)
        (config / "cli-plugins" / "docker-compose").symlink_to(TB_COMPOSE_PLUGIN)
        command = [str(tb), "run", "--dataset-path", str(tasks), "--agent", agent, "--output-path", str(runs)]
        command += ["--run-id", run_id, "--no-cleanup", "--n-concurrent", str(concurrency)]
        command += [arg for name in names for arg in ("--task-id", name)]
        with one_tb_run_at_a_time():
            try:
                done = subprocess.run(
                    command,
                    capture_output=True,
                    text=True,
                    timeout=timeout,
                    env=tb_env(config),
                    cwd=scratch,
                    stdin=subprocess.DEVNULL,
                )
            finally:
                remove_tb_leftovers(run_id, names)
    results = runs / run_id / "results.json"
    assert done.returncode == 0 and results.is_file(), f"tb run failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    return runs / run_id


def capture_lost(run: Path, trial: dict[str, Any]) -> bool:
    """The tests printed pytest's summary, but tb read an empty pane: the docker SDK's exec_run sometimes returns no
    output on a loaded daemon (docker-py #2042), and tb then files a parse_error. The tests' tmux session is also
    piped to /logs/tests.log (the task's compose file mounts /logs), which shows what they printed."""
    if trial.get("failure_mode") != "parse_error":
        return False
    log = run / trial["task_id"] / trial["trial_name"] / "sessions" / "tests.log"
    return log.is_file() and "short test summary info" in log.read_text(errors="replace")


def terminal_bench_results(
    tasks: Path, agent: str, concurrency: int = 4, out: Path | None = None, timeout: float = 1500, attempts: int = 3
) -> dict[str, dict[str, Any]]:
    """Each task's entry of results.json (`is_resolved`, `failure_mode`, `parser_results`, ...) after
    `tb run --dataset-path TASKS --agent AGENT` (oracle or nop); the runs' files stay in `out` when it is given. A task
    whose verdict tb lost reading the tests' output (see capture_lost) is run again, up to `attempts` runs in all."""
    tb = terminal_bench()
    found: dict[str, dict[str, Any]] = {}
    pending = task_names(tasks)
    with directory(out, "oc-repl-tb-") as runs:
        for _ in range(attempts):
            run = tb_run(tb, tasks, agent, pending, concurrency, runs, timeout)
            trials = json.loads((run / "results.json").read_text())["results"]
            found.update((trial["task_id"], trial) for trial in trials)
            pending = [trial["task_id"] for trial in trials if capture_lost(run, trial)]
            if not pending:
                break
    return found


def terminal_bench_verdicts(
    tasks: Path, agent: str, concurrency: int = 4, out: Path | None = None
) -> dict[str, bool | None]:
    """Whether terminal-bench 0.2.18 resolved each task in `tasks` (None: the trial gave no verdict)."""
    found = terminal_bench_results(tasks, agent, concurrency, out)
    return {name: found.get(name, {}).get("is_resolved") for name in task_names(tasks)}


def harbor_trials(
    tasks: Path, agent: str, concurrency: int = 4, out: Path | None = None, timeout: float = 1500
) -> dict[str, dict[str, Any]]:
    """Each task's trial result.json (its directory under `dir`) after `harbor run -p TASKS -a AGENT` (oracle or nop)
    on Harbor's docker environment over compose v1 (tests/harbor_support.py); the job stays in `out` when it is given.
    Only in Harbor's virtualenv."""
    try:
        from tests.harbor_support import harbor_run, trial_results
    except ImportError as exc:
        unavailable(f"needs Harbor beside this interpreter: {exc}")
    need_compose_v1()
    with directory(out, "oc-repl-harbor-") as jobs:
        args = ["-p", str(tasks), "-a", agent, "-n", str(concurrency)]
        done, job = harbor_run(jobs, f"{agent}-{uuid.uuid4().hex[:8]}", *args, timeout=timeout)
        assert done.returncode == 0, f"harbor run failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
        return {trial["task_name"]: trial for trial in trial_results(job)}


def harbor_verdicts(tasks: Path, agent: str, concurrency: int = 4, out: Path | None = None) -> dict[str, float | None]:
    """The reward Harbor 0.25 gave each task in `tasks` (None: the trial gave none)."""
    found = harbor_trials(tasks, agent, concurrency, out)

    def reward(trial: dict[str, Any]) -> float | None:
        return ((trial.get("verifier_result") or {}).get("rewards") or {}).get("reward")

    return {name: reward(found[name]) if name in found else None for name in task_names(tasks)}
