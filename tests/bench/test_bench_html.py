"""The HTML reports in a real headless Chromium (Debian's, driven by Playwright by its path), offline: they load,
plotly draws the figures, the tables of scores (both denominators), comparisons, infrastructure failures and per-task
buckets are there, each trial links to its transcript, and its recording plays in the page to the run's last screen."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from oc_repl.bench.results import TRANSCRIPT, trial_dir
from oc_repl.render.sanitize import sanitize
from tests.bench.test_bench_stats import cell_results, write_bench
from tests.cli.test_cli import answer
from tests.conftest import run_cli
from tests.docker_support import exec_call
from tests.render.test_cast import camel_transcript, last_screen, terminus_transcript

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


@pytest.fixture
def measured_dir(serve, tmp_path: Path) -> tuple[Path, Path]:
    """Trial records of two arms with partial scores and one server failure, each with a real terminus transcript
    beside it; and that transcript."""
    transcript = terminus_transcript(serve, tmp_path)
    out = tmp_path / "bench"
    results = []
    for r in cell_results():
        passed = 2 if r.resolved else int(r.task != "c")
        r = replace(r, tests_passed=passed, tests_total=2)
        if (r.task, r.protocol, r.attempt) == ("c", "q", 3):
            r = replace(r, outcome="server_error", failure_mode="server_error", error="HTTP 503: overloaded")
        results.append(r)
    write_bench(out, results)
    for r in results:
        shutil.copy(transcript, trial_dir(out, r.task, r.protocol, r.attempt) / TRANSCRIPT)
    return out, transcript


def test_the_html_report_shows_scores_comparisons_buckets_and_plays_recordings(browser, measured_dir, tmp_path):
    out, transcript = measured_dir
    report = tmp_path / "report.html"
    proc = run_cli(["bench", "report", str(out), "--html", str(report)], tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    page = browser.new_page()
    page.goto(report.as_uri())
    page.wait_for_selector("#sweep .main-svg", timeout=30_000)
    scores = page.locator("#scores tr")
    assert scores.count() == 3
    p, q = (scores.nth(n).locator("td").all_inner_texts() for n in (1, 2))
    # arm, tasks, trials, infra, resolved, pass@1 planned, pass@1 finished, partial planned, partial finished
    assert p[:5] == ["p", "3", "9/9", "0", "4"] and q[:5] == ["q", "3", "8/9", "1", "4"]
    assert p[5].startswith("44.4% [") and p[6].startswith("44.4% [")
    assert q[5].startswith("44.4% [") and q[6].startswith("50.0% [")  # the conservative denominator first
    assert p[7].startswith("55.6% [") and q[7].startswith("55.6% [") and q[8].startswith("62.5% [")
    comparison = " ".join(page.locator("#comparisons").inner_text().split())
    assert "not separable at this sample size" in comparison
    assert "q vs p: 50.0% vs 44.4% of trials resolved" in comparison and "gained: none; lost: none" in comparison
    assert "q: 1 of 9 trials failed on infrastructure (server_error 1)" in page.locator("#infrastructure").inner_text()
    tasks = {row[0]: row for row in (r.locator("td").all_inner_texts() for r in page.locator("#tasks tr").all()[1:])}
    assert {task: row[3] for task, row in tasks.items()} == {"a": "ever-solved", "b": "ever-solved", "c": "truly-cold"}
    assert "zero variance (no RL signal): c" in page.locator("body").inner_text()
    assert page.locator("#grid button.play").count() == 18 and page.locator("#grid a.cast").count() == 18
    page.screenshot(path=str(tmp_path / "report.png"), full_page=True)

    assert page.locator("#player").is_hidden()
    page.locator("#grid button.play").first.click()
    page.select_option("#player-speed", "16")
    page.wait_for_selector("#player[data-state=ended]", timeout=30_000)
    assert page.locator("#player").is_visible()
    screen = "\n".join(line.rstrip() for line in sanitize(last_screen(transcript)).split("\n")).rstrip()
    assert page.evaluate("window.ocScreenText()") == screen  # the last frame is the run's last screen
    assert page.locator("#player-screen").inner_text().rstrip() == screen
    box = page.locator("#player-screen").bounding_box()
    assert box is not None and box["width"] > 300 and box["height"] > 100  # drawn where it can be seen
    page.screenshot(path=str(tmp_path / "player.png"), full_page=True)
    assert [url for url in browser.requested if not url.startswith("file://")] == []  # nothing fetched


def test_the_compare_page_has_the_reports_sections_per_run_and_plays_each_runs_own_recording(
    browser, measured_dir, serve, tmp_path
):
    first, transcript = measured_dir
    second = tmp_path / "other"
    shutil.copytree(first, second)
    camel = camel_transcript(serve, tmp_path)
    for path in (second / "trials").glob(f"*/*/*/{TRANSCRIPT}"):  # the same trial names, other recordings
        shutil.copy(camel, path)
    page_path = tmp_path / "compare.html"
    proc = run_cli(["bench", "compare", str(first), str(second), "--html", str(page_path)], tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    page = browser.new_page()
    page.goto(page_path.as_uri())
    page.wait_for_selector("#sweep .main-svg", timeout=30_000)
    page.wait_for_selector("#failure-modes .main-svg", timeout=30_000)
    arms = ["bench:p", "bench:q", "other:p", "other:q"]
    assert page.locator("#sweep .scatterlayer .trace").count() == 1  # pass@1 of each arm as one line
    assert [r.locator("td").first.inner_text() for r in page.locator("#scores tr").all()[1:]] == arms
    assert "not separable at this sample size" in page.locator("#comparisons").inner_text()
    assert "other:q: 1 of 9 trials failed on infrastructure" in page.locator("#infrastructure").inner_text()
    head = page.locator("#per-task tr").first.locator("th").all_inner_texts()
    assert head[:3] == ["task", "bench:p resolved", "bench:p partial"] and head[-1] == "other:q − bench:p"
    rows = {r[0]: r for r in (row.locator("td").all_inner_texts() for row in page.locator("#per-task tr").all()[1:])}
    assert sorted(rows) == ["a", "b", "c"] and rows["c"][7] == "0/2"  # other:q on c: one trial lost to the server
    assert page.locator("#grid tr").first.locator("th").all_inner_texts() == ["task", *arms]
    assert page.locator("#grid a.chip").count() == 36
    page.screenshot(path=str(tmp_path / "compare.png"), full_page=True)

    terminus = "\n".join(line.rstrip() for line in sanitize(last_screen(transcript)).split("\n")).rstrip()
    for column, run in ((1, first), (3, second)):  # bench:p, then other:p: trials of the same names
        page.locator("#grid tr").nth(1).locator("td").nth(column).locator("button.play").first.click()
        page.select_option("#player-speed", "16")
        page.wait_for_function(
            "run => { const p = document.getElementById('player');"
            " return p.dataset.state === 'ended' && (p.dataset.recording || '').includes(run); }",
            arg=f"/{run.name}/trials/",
            timeout=30_000,
        )
        shown = page.evaluate("window.ocScreenText()")
        assert shown == terminus if run == first else "cast-camel-output" in shown and "cast-check-one" not in shown
    assert [url for url in browser.requested if not url.startswith("file://")] == []
