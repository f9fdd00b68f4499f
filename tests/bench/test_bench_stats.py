"""The bench's numbers without containers: pass@k against hand-computed values and against its definition, failure
modes from outcomes, the paired comparison, and `bench report` on a directory of trial records."""

from __future__ import annotations

import itertools
import json
from dataclasses import asdict
from fractions import Fraction
from pathlib import Path

import pytest

from benchmarks.report_scale import synthetic
from oc_repl.bench.compare import arms_of, summarize
from oc_repl.bench.results import TrialResult, read_result, trial_dir, write_result
from oc_repl.bench.stats import bootstrap_ci, pass_at_k
from oc_repl.outcome import FAILURE_MODES, Status
from tests.conftest import ROOT, cli_env, run_cli


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (3, 1, 1, Fraction(1, 3)),
        (3, 1, 2, Fraction(2, 3)),  # 1 - C(2,2)/C(3,2) = 1 - 1/3
        (3, 1, 3, Fraction(1)),
        (5, 2, 3, Fraction(9, 10)),  # 1 - C(3,3)/C(5,3) = 1 - 1/10
        (10, 3, 1, Fraction(3, 10)),
        (10, 3, 5, Fraction(11, 12)),  # 1 - C(7,5)/C(10,5) = 1 - 21/252
        (4, 0, 2, Fraction(0)),
        (4, 4, 1, Fraction(1)),
    ],
)
def test_pass_at_k_is_the_unbiased_estimator(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(float(expected), abs=1e-12)


def test_pass_at_k_is_the_chance_that_k_of_the_n_trials_include_a_resolved_one():
    for n in range(1, 7):
        for c in range(n + 1):
            trials = [True] * c + [False] * (n - c)
            for k in range(1, n + 1):
                subsets = list(itertools.combinations(trials, k))
                assert pass_at_k(n, c, k) == pytest.approx(sum(map(any, subsets)) / len(subsets), abs=1e-12)


def test_pass_at_k_refuses_k_beyond_the_trials():
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)


@pytest.mark.parametrize(
    ("status", "timed_out", "mode"),
    [
        (Status.VERIFIED, False, "resolved"),
        (Status.VERIFY_FAILED, False, "unresolved"),
        (Status.VERIFY_FAILED, True, "test_timeout"),
        (Status.TAMPERED, False, "tampered"),
        (Status.TAMPERED, True, "tampered"),  # a cheat is that, whatever its tests did
        (Status.AGENT_TIMEOUT, False, "agent_timeout"),
        (Status.AGENT_TIMEOUT, True, "test_timeout"),
        (Status.PARSE_ERRORS, False, "parse_error"),
        (Status.TURN_CAP, False, "turn_cap"),
        (Status.LOOP, False, "loop"),
        (Status.CONTEXT_LENGTH, False, "context_length_exceeded"),
        (Status.SERVER_ERROR, False, "server_error"),
        (Status.SANDBOX_ERROR, False, "sandbox_error"),
        (Status.BUILD_ERROR, False, "build_error"),
    ],
)
def test_failure_modes_come_from_the_outcome(status, timed_out, mode):
    assert status.failure_mode(timed_out) == mode


def test_every_outcome_but_an_interruption_has_a_failure_mode():
    modes = {s.failure_mode() for s in Status if s is not Status.INTERRUPTED}
    assert modes <= set(FAILURE_MODES)
    with pytest.raises(ValueError):
        Status.INTERRUPTED.failure_mode()


def result(task: str, protocol: str, attempt: int, resolved: bool, **more) -> TrialResult:
    mode = "resolved" if resolved else more.pop("failure_mode", "unresolved")
    return TrialResult(task, protocol, attempt, "verified" if resolved else "verify_failed", mode, resolved, 0, **more)


# (task, protocol) -> resolved per attempt
CELLS = {
    ("a", "p"): [True, True, True],
    ("b", "p"): [False, True, False],
    ("c", "p"): [False, False, False],
    ("a", "q"): [True, False, False],
    ("b", "q"): [True, True, True],
    ("c", "q"): [False, False, False],
}


def cell_results() -> list[TrialResult]:
    return [
        result(task, protocol, n, ok, turns=n, tool_calls_native=2, tool_calls_salvaged=n - 1, parse_errors=n % 2)
        for (task, protocol), outcomes in CELLS.items()
        for n, ok in enumerate(outcomes, 1)
    ]


def summary_of(results: list[TrialResult], order: list[str], **plan: object) -> object:
    return summarize(arms_of(results, {"protocols": order, **plan}))


def test_protocol_table_from_trials():
    summary = summary_of(cell_results(), ["q", "p"])
    q, p = summary.arms
    assert (q.label, p.label) == ("q", "p")  # in the order asked for
    assert (p.tasks, p.trials, p.resolved, p.k) == (3, 9, 4, 3)
    assert p.pass_at[1] == pytest.approx((1 + 1 / 3 + 0) / 3)
    assert p.pass_at[2] == pytest.approx((1 + 2 / 3 + 0) / 3)
    assert p.pass_at[3] == pytest.approx(2 / 3)
    assert q.pass_at[1] == pytest.approx((1 / 3 + 1 + 0) / 3)
    assert p.mean_turns == pytest.approx(2.0)
    assert p.parse_error_rate == pytest.approx(6 / 18)  # attempts 1 and 3 of each of 3 tasks, per turn
    assert p.salvaged_call_rate == pytest.approx(9 / 27)
    assert p.failure_modes == {"resolved": 4, "unresolved": 5}


def test_the_trials_times_added_up_are_not_called_the_wall_total():
    from rich.console import Console

    from oc_repl.bench.report import protocol_table

    console = Console(record=True, width=300, highlight=False)
    console.print(protocol_table(summary_of(cell_results(), ["q", "p"])))
    shown = console.export_text()
    assert "trial time, summed" in shown and "wall total" not in shown


def test_a_server_that_sent_no_token_counts_is_not_shown_as_zero_tokens(tmp_path):
    from rich.console import Console

    from oc_repl.bench.html import _table
    from oc_repl.bench.report import protocol_table

    summary = summary_of(cell_results(), ["q", "p"])  # the fake trials carry no token counts
    console = Console(record=True, width=300, highlight=False)
    console.print(protocol_table(summary))
    for shown in (console.export_text(), _table(summary)):
        assert "not sent" in shown and "0 / 0" not in shown


def test_paired_comparison_names_flips_and_brackets_the_difference():
    summary = summary_of(cell_results(), ["p", "q"])
    (c,) = summary.comparisons
    assert (c.baseline, c.other, c.tasks) == ("p", "q", 3)
    assert c.difference == pytest.approx(((1 / 3 - 1) + (1 - 1 / 3) + 0) / 3)
    assert c.gained == [] and c.lost == []  # every task resolved at least once by both or by neither
    assert c.ci_low <= c.difference <= c.ci_high
    assert bootstrap_ci([0.5] * 7) == (0.5, 0.5)  # no spread, no interval
    assert bootstrap_ci([1.0, -1.0, 0.0, 1.0]) == bootstrap_ci([1.0, -1.0, 0.0, 1.0])  # seeded: reproducible


def write_bench(out: Path, results: list[TrialResult]) -> None:
    for r in results:
        directory = trial_dir(out, r.task, r.protocol, r.attempt)
        directory.mkdir(parents=True, exist_ok=True)
        write_result(directory, r)
    plan = {"tasks": [{"name": t} for t in "abc"], "protocols": ["p", "q"], "k": 3, "run_options": {}}
    (out / "bench.json").write_text(json.dumps(plan))


def test_result_json_round_trips_and_is_written_whole(tmp_path):
    r = result("a", "p", 1, True, assets=[{"name": "system.txt", "sha256": "0" * 64, "source": "built-in"}])
    write_result(tmp_path, r)
    assert read_result(tmp_path) == r
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]  # no temporary file left beside it
    (tmp_path / "result.json").write_text('{"schema": "oc-repl-bench/1", "task": ')  # a torn file
    assert read_result(tmp_path) is None


def test_bench_report_prints_the_table_and_json(tmp_path):
    out = tmp_path / "b"
    write_bench(out, [r for r in cell_results() if not (r.task == "c" and r.protocol == "q" and r.attempt == 3)])
    text = run_cli(["bench", "report", str(out)], tmp_path)
    assert text.returncode == 0, text.stderr
    first_table = text.stdout.split("└")[0]
    rows = {
        cells[0]: cells[1:]
        for line in first_table.splitlines()
        if line.startswith("│ ") and (cells := [c.strip() for c in line.split("│")[1:-1]])
    }
    assert rows["p"][:6] == ["3", "9", "4", "0.444", "0.556", "2.0"]  # pass@2: k is the fewest trials of a task
    assert rows["q"][:4] == ["3", "8", "4", "0.444"]
    assert "1 of 18 planned trials are unfinished" in " ".join(text.stdout.split())
    data = json.loads(run_cli(["bench", "report", "--json", str(out)], tmp_path).stdout)
    assert [a["label"] for a in data["arms"]] == ["p", "q"] and data["trials_finished"] == 17
    assert data["arms"][0]["pass_at"]["2"] == pytest.approx((1 + 2 / 3 + 0) / 3)


def test_a_report_and_a_compare_hold_at_a_real_benchmarks_size(tmp_path):
    # 2 arms x 1 000 trials (100 tasks x 10 attempts): the exact tests' integers outgrew a float at this size
    out = tmp_path / "b"
    results = synthetic(out, tasks=100, attempts=10)
    report = run_cli(["bench", "report", "--json", str(out)], tmp_path)
    assert report.returncode == 0, report.stderr[-2000:]
    data = json.loads(report.stdout)
    assert [a["resolved"] for a in data["arms"]] == [sum(r.resolved for r in results if r.protocol == a) for a in "pq"]
    (comparison,) = data["comparisons"]
    assert 0 < comparison["fisher_p"] < 0.05  # 52% vs 45% over 1 000 trials each
    assert run_cli(["bench", "report", str(out)], tmp_path).returncode == 0


def test_bench_report_of_an_empty_dir_is_a_usage_error(tmp_path):
    proc = run_cli(["bench", "report", str(tmp_path)], tmp_path)
    assert proc.returncode == 2 and "no finished trial" in proc.stderr


def test_result_fields_are_those_the_issue_lists():
    fields = set(asdict(result("a", "p", 1, True)))
    wanted = {"task", "protocol", "attempt", "outcome", "failure_mode", "tests_passed", "tests_total", "turns"}
    wanted |= {"tokens_in", "tokens_out", "parse_errors", "tool_calls_native", "tool_calls_salvaged", "wall_time_s"}
    wanted |= {"model", "server", "assets"}
    assert wanted <= fields


@pytest.mark.parametrize(
    ("extra", "told"),
    [
        (["--verify", "true"], "bench sets --verify for each trial itself"),
        (["--sandbox", "local:."], "bench sets --sandbox"),
        (["--protocol", "camel-terminal-toolkit,no-such"], "unknown protocol no-such"),
    ],
)
def test_bench_refuses_what_it_sets_per_trial(tmp_path, extra, told):
    proc = run_cli(["bench", str(ROOT / "examples" / "tasks"), "--out", str(tmp_path / "o"), *extra], tmp_path)
    assert proc.returncode == 2 and told in " ".join(proc.stderr.split())
    assert not (tmp_path / "o").exists()


def test_bench_without_a_daemon_is_one_clear_error(tmp_path):
    env = {**cli_env(tmp_path), "DOCKER_HOST": "unix:///nonexistent.sock"}
    proc = run_cli(["bench", str(ROOT / "examples" / "tasks"), "--out", str(tmp_path / "o")], tmp_path, env=env)
    assert proc.returncode == 6 and "DOCKER_HOST=unix:///nonexistent.sock" in " ".join(proc.stderr.split())
    assert not (tmp_path / "o").exists()  # nothing recorded: no trial failed, none ran


def test_compare_lists_each_task_whose_rate_moved_not_only_the_flips(tmp_path):
    # a: 1/4 -> 4/4 (no flip: both solved it at least once); b: 2/4 both times; c: 0/4 -> 1/4 (a flip, and a move)
    runs = {"A": {"a": 1, "b": 2, "c": 0}, "B": {"a": 4, "b": 2, "c": 1}}
    for run, solved in runs.items():
        out = tmp_path / run
        for task, n in solved.items():
            for attempt in range(1, 5):
                directory = trial_dir(out, task, "p", attempt)
                directory.mkdir(parents=True, exist_ok=True)
                write_result(directory, result(task, "p", attempt, attempt <= n))
        plan = {"tasks": [{"name": t} for t in solved], "protocols": ["p"], "k": 4, "run_options": {}}
        (out / "bench.json").write_text(json.dumps(plan))
    dirs = [str(tmp_path / "A"), str(tmp_path / "B")]
    data = json.loads(run_cli(["bench", "compare", "--json", *dirs], tmp_path).stdout)
    (c,) = data["comparisons"]
    assert c["gained"] == ["c"] and c["lost"] == []
    assert [(m["task"], m["baseline"], m["other"]) for m in c["moved"]] == [
        ("a", [1, 4], [4, 4]),
        ("c", [0, 4], [1, 4]),
    ]
    assert c["moved"][0]["change"] == 0.75 and 0.1 < c["moved"][0]["p_value"] < 0.2  # Fisher: 1/4 vs 4/4, p = 0.14
    text = " ".join(run_cli(["bench", "compare", *dirs], tmp_path).stdout.split())
    assert "a 1/4 → 4/4 (+75 pp" in text and "c 0/4 → 1/4 (+25 pp" in text and "b 2/4" not in text
    page = tmp_path / "c.html"
    assert run_cli(["bench", "compare", "--html", str(page), *dirs], tmp_path).returncode == 0
    assert "<td>a</td><td>1/4</td><td>4/4</td><td>+75 pp</td>" in page.read_text()
