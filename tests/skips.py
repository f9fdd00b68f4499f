"""The end of a test run says how many tests were skipped, for want of what, and the one command that provides it.

A skip is recognised by its reason, as the tests word it; a reason no entry knows is shown as it is. Docker tests are
always counted, also when none was skipped: where a daemon answers and the test image exists, the line says 0.
Loaded by tests/conftest.py (and with `-p tests.skips` by its own tests, which run pytest outside this suite).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Need:
    what: str  # what the skipped tests need
    reason: str  # a regex that finds it in a skip's reason
    fix: str  # the one command that provides it
    docker: bool = False  # the tests that need it are docker tests


NEEDS = (
    # The image before the daemon: a reason that names both ("docker or the test image") says which in its detail.
    Need("the test image", r"test image \S+ is missing|No such image", ".ci/test-image.sh", docker=True),
    Need(
        "a docker daemon",
        r"docker daemon unreachable|cannot reach the docker daemon|docker or the test image is missing",
        'eval "$(.ci/dockerd.sh)" && .ci/test-image.sh   (or point DOCKER_HOST at a daemon that answers)',
        docker=True,
    ),
    Need("tmux", r"tmux is not installed", "apt-get install tmux"),
    Need("bubblewrap (confined local: sandboxes)", r"no confinement here", "apt-get install bubblewrap"),
    Need("docker-compose", r"docker-compose", "apt-get install docker-compose"),
    Need("Chromium", r"no Chromium at", "apt-get install chromium"),
    Need("playwright", r"playwright is not installed", "pip install '.[test]'"),
    Need(
        "the tiny model's server",
        r"OC_REPL_TINY_VENV|tiny-model\.sh",
        "export OC_REPL_TINY_VENV=$(examples/tiny-model/install.sh)",
    ),
    Need(
        "Harbor (Python >= 3.12)",
        r"needs Harbor|could not import 'harbor'",
        "python3.12 -m venv V && V/bin/pip install '.[harbor,test]' && V/bin/python -m pytest -q tests/integrations",
    ),
    Need("OC_REPL_SLOW_TESTS=1 (slow tests)", r"OC_REPL_SLOW_TESTS=1", "OC_REPL_SLOW_TESTS=1 python -m pytest -q"),
    Need(
        "other Python versions",
        r"python3\.\d+ is not installed",
        "OC_REPL_TEST_PYTHONS=/path/to/python3.X:... python -m pytest -q   (or install python3.X on PATH)",
    ),
    Need("the package index", r"could not be downloaded", "pip download --no-deps <the package it names>"),
    Need("the tokenizers package", r"tokenizers package is not installed", "pip install '.[test]'"),
    Need(
        "the pinned upstream files (../shared/upstream)",
        r"pinned upstream file",
        "run the suite from a checkout with ../shared/upstream beside it",
    ),
)


def reason_of(report: Any) -> str:
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return text.removeprefix("Skipped: ")


def need_of(reason: str) -> Need | None:
    return next((need for need in NEEDS if re.search(need.reason, reason)), None)


def summary(reports: list[Any]) -> list[str]:
    """The lines that end a run: skipped tests by what they need, the fix for each, and the docker count."""
    needs: Counter[Need] = Counter()
    others: Counter[str] = Counter()
    docker = 0
    for report in reports:
        reason = reason_of(report)
        need = need_of(reason)
        if need is None:
            others[reason] += 1
        else:
            needs[need] += 1
        marked = "docker" in getattr(report, "keywords", {})
        docker += bool(marked or (need and need.docker))
    lines = []
    for need, count in needs.most_common():
        lines += [f"{count:4}  need {need.what}", f"      fix: {need.fix}"]
    for reason, count in others.most_common():
        lines.append(f"{count:4}  {reason}")
    lines.append(f"docker tests skipped: {docker}")
    return lines


# Tests that run only where something on the machine turns them on (no flag): the run says they ran, and why.
TURNED_ON = {
    "realmodel": "the tiny model's tests ran ({n}): a real llama-cpp-python server, minutes on a loaded machine; on "
    "the venv OC_REPL_TINY_VENV names, else the quick start's (~/.cache/oc-repl/tiny-venv). OC_REPL_TINY_VENV=/nowhere "
    "leaves them out",
}


def turned_on(reports: list[Any]) -> list[str]:
    """A line for each kind of test that ran because something on the machine turned it on."""
    return [
        said.format(n=n)
        for marker, said in TURNED_ON.items()
        if (n := sum(marker in getattr(report, "keywords", {}) for report in reports))
    ]


def pytest_terminal_summary(terminalreporter: Any) -> None:
    reports = terminalreporter.stats.get("skipped", [])
    terminalreporter.write_sep("=", f"skipped: {len(reports)}" + (", by what they need" if reports else ""))
    for line in summary(reports):
        terminalreporter.write_line(line)
    ran = [r for kind in ("passed", "failed") for r in terminalreporter.stats.get(kind, []) if r.when == "call"]
    for line in turned_on(ran):
        terminalreporter.write_line(line)
