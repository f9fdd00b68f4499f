"""`bench watch DIR DIR` (and --html): two running benches side by side, as text and as the page a browser reloads
(in headless Chromium)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.bench.test_bench_html import browser  # noqa: F401 (the fixture)
from tests.bench.test_bench_watch import record, running
from tests.conftest import cli_env, run_cli


def checkpoint(out: Path, solved: set[str], running_task: str | None = None) -> None:
    """Tasks t0..t3, one arm, one trial each: those in `solved` resolved, the others not, one (if named) running."""
    names = ["t0", "t1", "t2", "t3"]
    plan = {"tasks": [{"name": n} for n in names], "protocols": ["camel"], "k": 1, "run_options": {}}
    out.mkdir(parents=True)
    (out / "bench.json").write_text(json.dumps(plan))
    for name in names:
        if name == running_task:
            running(out, name, "camel")
        elif name in solved:
            record(out, name, "camel", "verified", "resolved")
        else:
            record(out, name, "camel", "verify_failed", "unresolved")


def test_two_running_benches_show_scores_the_paired_difference_the_decision_so_far_and_health(tmp_path):
    checkpoint(old := tmp_path / "ckpt200", {"t0"})
    checkpoint(new := tmp_path / "ckpt215", {"t0", "t1", "t2"}, running_task="t3")
    proc = run_cli(
        ["bench", "watch", "--once", str(old), str(new)], tmp_path, env={**cli_env(tmp_path), "COLUMNS": "200"}
    )
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stderr.split())
    assert "trials 7/8 finished in 2 runs" in text
    assert "│ ckpt200 │" in proc.stderr and "│ ckpt215 │" in proc.stderr  # the scores table, a row a run
    assert "25.0% [4.6%–69.9%]" in text and "75.0% [30.1%–95.4%]" in text  # pass@1 of planned trials: 1/4, 3/4
    assert "ckpt215 vs ckpt200:" in text and "on 3 common tasks: pass@1 +0.667" in text
    # the round is not whole until t3 lands: the sequential test waits for it
    assert "sequential decision so far: ckpt215 vs ckpt200: not decided yet after 0 rounds" in text
    assert "ckpt215: 3 finished, 1 running; server: 1 requests in flight" in text
    assert "last error: HTTP 503" in text


def test_the_watch_page_opens_in_a_browser_shows_both_runs_and_reloads_itself(browser, tmp_path):  # noqa: F811
    checkpoint(old := tmp_path / "ckpt200", {"t0"})
    checkpoint(new := tmp_path / "ckpt215", {"t0", "t1"}, running_task="t3")
    page_file = tmp_path / "watch.html"
    args = ["bench", "watch", "--once", "--html", str(page_file), "--interval", "3", str(old), str(new)]
    proc = run_cli(args, tmp_path)
    assert proc.returncode == 0, proc.stderr
    page = browser.new_page()
    page.goto(page_file.as_uri())
    body = page.inner_text("body")
    assert "trials 7/8 finished in 2 runs" in body and "ckpt215 vs ckpt200" in body
    assert "sequential decision so far" in body and "ckpt215: 3 finished, 1 running" in body
    assert page.locator('meta[http-equiv="refresh"]').get_attribute("content") == "3"
    record(new, "t3", "camel", "verified", "resolved")  # the running trial lands; the next look rewrites the page
    assert run_cli(args, tmp_path).returncode == 0
    page.reload()
    assert "trials 8/8 finished in 2 runs" in page.inner_text("body")
