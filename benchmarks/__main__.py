"""The benchmark suite: every benchmark script in turn, then one table of every figure next to its baseline measured
in the same run (and their ratio), its goal where there is one, and the load average while it ran.

Each script runs as its own process, as it would alone (its own printout is shown as it comes), and hands its figures
over as rows (`--rows FILE`, see rows.py); the two that only print are read by adapters.py. Benchmarks whose
prerequisites are missing (a docker daemon with the test image, tmux, bubblewrap, Harbor's virtualenv) are listed as
skipped with the reason. `--quick` makes every benchmark small enough for a smoke run: a few minutes in all, figures
too noisy to judge, no thresholds; the suite fails only when a benchmark itself fails.

Run: DOCKER_HOST=... python -m benchmarks [--quick] [--only NAME,...] [--harbor-venv DIR] [--markdown]
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks import adapters
from benchmarks.rows import SKIP, Row, read

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
IMAGE = "oc-repl-test:bookworm"


@dataclass(frozen=True)
class Bench:
    name: str
    script: str
    full: tuple[str, ...] = ()
    quick: tuple[str, ...] = ()
    needs: tuple[str, ...] = ()  # keys of CHECKS
    adapter: Callable[[str], list[Row]] | None = None  # for a script that only prints
    harbor: bool = False  # runs in Harbor's virtualenv


DOCKER_TERMINUS = ("--sandbox", f"docker-image:{IMAGE}")
BENCHES = [
    Bench("startup", "startup.py", quick=("--runs", "2")),
    Bench("turn_overhead", "turn_overhead.py", quick=("--turns", "20")),
    Bench("per_turn", "per_turn.py", quick=("--runs", "1", "--low", "1", "--high", "3")),
    Bench(
        "per_turn_docker",
        "per_turn.py",
        full=("--image", IMAGE, "--only-docker"),
        quick=("--image", IMAGE, "--only-docker", "--runs", "1", "--low", "1", "--high", "3"),
        needs=("docker", "docker-cli"),
    ),
    Bench("local_confine", "local_confine.py", quick=("--runs", "10")),
    Bench("output_memory", "output_memory.py", quick=("--gigabytes", "0.05")),
    Bench("terminus_wait", "terminus_wait.py", quick=("--commands", "3"), needs=("tmux",)),
    Bench("pty_render", "pty_render.py", quick=("--megabytes", "0.3")),
    Bench("report_scale", "report_scale.py", quick=("--trials", "1000")),
    Bench("export_scale", "export_scale.py", quick=("--trials", "10", "--turns", "50")),
    Bench("tokenize_cost", "tokenize_cost.py", quick=("--runs", "3", "--tokens", "4000")),
    Bench("wire_overhead", "wire_overhead.py", quick=("--turns", "5", "--tokens", "4000")),
    Bench(
        "terminus_docker",
        "terminus_wait.py",
        full=(*DOCKER_TERMINUS, "--commands", "10"),
        quick=(*DOCKER_TERMINUS, "--commands", "3"),
        needs=("docker",),
    ),
    Bench("docker_exec", "docker_exec_cost.py", quick=("-n", "5"), needs=("docker",), adapter=adapters.docker_exec),
    Bench("verdict_cost", "verdict_cost.py", quick=("--rounds", "1"), needs=("docker",)),
    Bench(
        "bench_trials",
        "bench_trials.py",
        quick=("-n", "1", "--jobs", "1", "--rounds", "1"),
        needs=("docker", "docker-cli"),
        adapter=adapters.bench_trials,
    ),
    Bench(
        "harbor_concurrency", "harbor_concurrency.py", quick=("--delay", "0.5"), needs=("harbor", "docker"), harbor=True
    ),
    Bench(
        "whole_evaluation",
        "whole_evaluation.py",
        quick=("-k", "1", "-j", "3"),
        needs=("harbor", "docker"),
        harbor=True,
    ),
    Bench(
        "harbor_vs_terminus2",
        "harbor_vs_terminus2.py",
        quick=("--rounds", "1", "--latency", "0.5"),
        needs=("harbor", "docker"),
        harbor=True,
    ),
]


def _docker() -> str | None:
    try:
        from oc_repl.errors import SandboxError
        from oc_repl.sandbox.docker_container import connect

        client = connect()
    except SandboxError as exc:
        return exc.message
    except ImportError as exc:
        return f"the docker SDK does not load: {exc}"
    try:
        client.images.get(IMAGE)
    except Exception as exc:  # docker.errors.ImageNotFound, or the daemon went away
        return f"the test image {IMAGE} is not there ({type(exc).__name__}): bash .ci/test-image.sh builds it"
    finally:
        client.close()
    return None


def _harbor(venv: Path | None) -> str | None:
    if venv is None:
        return "Harbor's virtualenv was not given (--harbor-venv DIR, Python 3.12 with harbor and this project)"
    missing = [p for p in (venv / "bin" / "python", venv / "bin" / "harbor") if not p.exists()]
    return f"not a Harbor virtualenv: {', '.join(map(str, missing))} missing" if missing else None


def _program(name: str) -> Callable[[argparse.Namespace], str | None]:
    return lambda _: None if shutil.which(name) else f"no `{name}` on PATH"


CHECKS: dict[str, Callable[[argparse.Namespace], str | None]] = {
    "docker": lambda _: _docker(),
    "docker-cli": _program("docker"),
    "tmux": _program("tmux"),
    "harbor": lambda opts: _harbor(opts.harbor_venv),
}


@dataclass
class Result:
    bench: Bench
    status: str  # ok, skipped, failed
    reason: str = ""
    rows: list[Row] = field(default_factory=list)
    load: tuple[float, float] = (0.0, 0.0)
    seconds: float = 0.0


def _restore_sigint() -> None:
    # started in the background, the suite may have SIGINT ignored; a benchmark must still stop (and clean up) on it
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _stream(proc: subprocess.Popen, timeout: float) -> tuple[str, bool]:
    """Everything the process printed, echoed as it comes; whether it ran out of time (then it was interrupted,
    so that it removes its containers, and killed if it did not end)."""
    expired = threading.Event()

    def stop() -> None:
        expired.set()
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()

    timer = threading.Timer(timeout, stop)
    timer.start()
    lines = []
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            print("  " + line, end="", flush=True)
            lines.append(line)
        proc.wait()
    finally:
        timer.cancel()
    return "".join(lines), expired.is_set()


def run(bench: Bench, opts: argparse.Namespace, tmp: Path) -> Result:
    if not (HERE / bench.script).exists():
        return Result(bench, "skipped", f"benchmarks/{bench.script} is not in this checkout")
    for need in bench.needs:
        if reason := CHECKS[need](opts):
            return Result(bench, "skipped", reason)
    python = str(opts.harbor_venv / "bin" / "python") if bench.harbor else sys.executable
    argv = [python, str(HERE / bench.script), *(bench.quick if opts.quick else bench.full)]
    if bench.name == "per_turn" and opts.mini_venv:
        argv += ["--mini-venv", str(opts.mini_venv)]
    rows_file = tmp / f"{bench.name}.json"
    if bench.adapter is None:
        argv += ["--rows", str(rows_file)]
    load = os.getloadavg()[0]
    print(f"\n== {bench.name}: {shlex.join(argv)}   [load {load:.2f}]", flush=True)
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=_restore_sigint
    )
    text, expired = _stream(proc, opts.timeout)
    result = Result(bench, "ok", load=(load, os.getloadavg()[0]), seconds=time.perf_counter() - start)
    last = text.strip().splitlines()[-1:] or [""]
    if expired:
        result.status, result.reason = "failed", f"still running after {opts.timeout:.0f} s; interrupted"
    elif proc.returncode == SKIP:
        result.status, result.reason = "skipped", last[0].removeprefix("skipped: ")
    elif proc.returncode != 0:
        result.status, result.reason = "failed", f"exit {proc.returncode}: {last[0]}"
    else:
        result.rows = bench.adapter(text) if bench.adapter else read(rows_file)
        if not result.rows:
            result.status, result.reason = "failed", "printed no figures the suite understands"
    return result


def _value(value: float | None, unit: str) -> str:
    if value is None:
        return ""
    return f"{value:.0f} {unit}" if abs(value) >= 1000 else f"{value:.4g} {unit}"  # four digits, never 1.2e+04


def _ratio(row: Row) -> str:
    ratio = row.ratio
    return "" if ratio is None else f"{ratio:.3f}x" if abs(ratio) < 1 else f"{ratio:.2f}x"


def _goal(row: Row) -> str:
    return "" if not row.goal else row.goal if row.met is None else f"{row.goal}: {'met' if row.met else 'NOT met'}"


HEAD = ("benchmark", "figure", "value", "baseline (same run)", "baseline", "ratio", "goal", "load 1m")


def table(results: list[Result], markdown: bool) -> str:
    body = [
        (r.bench.name, row.figure, _value(row.value, row.unit), row.baseline, _value(row.base_value, row.unit))
        + (_ratio(row), _goal(row), f"{r.load[0]:.1f}-{r.load[1]:.1f}")
        for r in results
        for row in r.rows
    ]
    if markdown:
        lines = ["| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
        return "\n".join(lines + ["| " + " | ".join(cells) + " |" for cells in body])
    widths = [max(len(cells[i]) for cells in [HEAD, *body]) for i in range(len(HEAD))]
    right = {2, 4, 5}  # numbers
    fmt = [(str.rjust if i in right else str.ljust) for i in range(len(HEAD))]
    return "\n".join(
        "  ".join(f(c, w) for f, c, w in zip(fmt, cells, widths, strict=True)).rstrip() for cells in [HEAD, *body]
    )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="every benchmark small: a smoke run, not figures")
    parser.add_argument("--only", help="comma-separated names of the benchmarks to run (see --list)")
    parser.add_argument("--list", action="store_true", help="name every benchmark and what it needs, then stop")
    parser.add_argument("--harbor-venv", type=Path, help="Harbor's virtualenv, for harbor_concurrency")
    parser.add_argument("--mini-venv", type=Path, help="mini-swe-agent's virtualenv for per_turn (default: cached)")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds one benchmark may take (3600)")
    parser.add_argument("--markdown", action="store_true", help="the final table in Markdown")
    opts = parser.parse_args()
    if opts.list:
        for b in BENCHES:
            print(f"{b.name:20s} benchmarks/{b.script} {' '.join(b.full)}  needs: {', '.join(b.needs) or '-'}")
        return
    chosen = BENCHES
    if opts.only:
        names = set(opts.only.split(","))
        if unknown := names - {b.name for b in BENCHES}:
            parser.error(f"no benchmark named {', '.join(sorted(unknown))} (see --list)")
        chosen = [b for b in BENCHES if b.name in names]
    started, load = time.perf_counter(), os.getloadavg()
    print(f"benchmark suite{' (quick)' if opts.quick else ''}: {os.cpu_count()} cpus, load {load[0]:.2f} {load[1]:.2f}")
    with tempfile.TemporaryDirectory(prefix="oc-repl-bench-") as tmp:
        results = [run(b, opts, Path(tmp)) for b in chosen]
    print(f"\n== figures, each next to its baseline from the same run ({time.perf_counter() - started:.0f} s in all)")
    print(table(results, opts.markdown))
    for r in results:
        if r.status != "ok":
            print(f"{r.status}: {r.bench.name}: {r.reason}")
    if opts.quick:
        print("quick run: the figures are too small a sample to judge; run without --quick for them")
    sys.exit(1 if any(r.status == "failed" for r in results) else 0)


if __name__ == "__main__":
    main()
