"""A bench's finished trials and its plan, from wherever they were run: an oc-repl bench directory, or Harbor's
job directories (harbor_jobs.py). Every reader of benches (report, compare, tasks, the HTML, export) reads here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from oc_repl.bench import harbor_jobs
from oc_repl.bench.benchplan import read_plan
from oc_repl.bench.results import TrialResult, load_results


def read_bench(out: Path) -> tuple[list[TrialResult], dict[str, Any]]:
    """Its trials (task, arm, attempt order) and plan; BadInput naming a file in it that is not what it should be."""
    if harbor_jobs.jobs_in(out):
        return harbor_jobs.load(out)
    return load_results(out), read_plan(out)
