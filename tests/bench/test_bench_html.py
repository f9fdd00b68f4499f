"""The HTML report in a real headless Chromium (Debian's, driven by Playwright by its path), with no network: it
loads, plotly draws both figures, the table and the grid are there, and each trial links to its transcript."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from oc_repl.bench.results import TRANSCRIPT, trial_dir
from tests.bench.test_bench_stats import cell_results, write_bench
from tests.cli.test_cli import answer
from tests.conftest import run_cli
from tests.docker_support import exec_call

CHROMIUM = os.environ.get("OC_REPL_CHROMIUM", "/usr/bin/chromium")
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]
FLAGS += ["--no-first-run"]


def unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}; CI=true, so the browser test may not be skipped", pytrace=False)
    pytest.skip(reason)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    """A fresh offline Chromium profile; every request it makes is recorded in `context.requested`."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("playwright is not installed (pip install '.[test]')")
    if not Path(CHROMIUM).is_file():
        unavailable(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=CHROMIUM, headless=True, offline=True, args=FLAGS
        )
        context.requested = []
        context.on("request", lambda request: context.requested.append(request.url))
        try:
            yield context
        finally:
            context.close()


@pytest.fixture
def bench_dir(serve, tmp_path: Path) -> Path:
    """Trial records of two protocols on three tasks, each with a real transcript beside it."""
    server = serve({"replies": [exec_call("echo report-check"), answer("Done.")]})
    transcript = tmp_path / "one.jsonl"
    args = ["run", "--api-base", server.url, "--sandbox", f"local:{tmp_path / 'w'}", "--yes", "--verify", "true"]
    proc = run_cli([*args, "--transcript", str(transcript), "check the report"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "bench"
    results = cell_results()
    write_bench(out, results)
    for r in results:
        shutil.copy(transcript, trial_dir(out, r.task, r.protocol, r.attempt) / TRANSCRIPT)
    return out


def test_the_html_report_opens_offline_with_its_figures_table_and_links(browser, bench_dir, tmp_path):
    report = tmp_path / "elsewhere" / "report.html"
    proc = run_cli(["bench", "report", str(bench_dir), "--html", str(report)], tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    page = browser.new_page()
    page.goto(report.as_uri())
    page.wait_for_selector("#pass-at-k .main-svg", timeout=30_000)
    page.wait_for_selector("#failure-modes .main-svg", timeout=30_000)
    assert page.evaluate("typeof window.Plotly") == "object"
    assert page.locator("#pass-at-k .scatterlayer .trace").count() == 2  # a curve per protocol
    assert page.locator("#failure-modes .barlayer .trace").count() == 2  # resolved, unresolved
    rows = page.locator("#protocols tr")
    assert rows.count() == 3
    assert rows.nth(1).locator("td").all_inner_texts()[:6] == ["p", "3", "9", "4", "0.444", "0.667"]
    chips = page.locator("#grid a.chip")
    assert chips.count() == 18 and page.locator("#grid tr").count() == 4
    assert "gained" in page.locator("#comparisons").inner_text()
    page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
    chips.first.click()
    page.wait_for_load_state()
    assert page.url.endswith("/trials/a/p/1/transcript.html")
    text = page.locator("body").inner_text()
    assert "check the report" in text and "report-check" in text and "PASS" in text
    assert [url for url in browser.requested if not url.startswith("file://")] == []  # nothing fetched
