"""Per-task analysis: the three buckets, the reward's spread (zero-variance tasks exported as a task filter), the
failure signatures read off a trial's events, and where solved and failed trials of a task first part."""

from __future__ import annotations

from oc_repl.bench.pertask import analyse, read_task_filter, task_filter
from oc_repl.bench.results import TrialResult
from oc_repl.bench.signatures import signatures, turn_actions
from oc_repl.outcome import Status
from tests.bench.test_bench_exact import trial
from tests.bench.test_bench_stats import write_bench
from tests.conftest import run_cli


def turn(n: int, *items: dict, completed: bool = True) -> list[dict]:
    events = [{"type": "turn.started", "turn": n}] + [{"type": "item.completed", "item": i} for i in items]
    return events + ([{"type": "turn.completed", "turn": n}] if completed else [])


def command(text: str, tool: str = "shell_exec") -> dict:
    return {"type": "command_execution", "tool": tool, "command": text, "aggregated_output": ""}


SCREEN = {"type": "command_execution", "tool": "terminal", "command": "(observation)", "aggregated_output": "$ "}


def test_signatures_name_how_a_trial_failed():
    stuck = [
        e for n in range(1, 5) for e in turn(n, {"type": "agent_message", "id": "m", "text": "again"}, command("ls /x"))
    ]
    assert signatures(stuck, Status.TURN_CAP) == ["turn_cap_repeating: 'ls /x' 4 times"]
    waiting = [{"type": "thread.started", "protocol": "terminus-json"}]  # its kind declares the idle turns
    waiting += turn(1, command("make\n", "keystrokes"), SCREEN) + turn(2, command("", "keystrokes"), SCREEN)
    waiting += turn(3, SCREEN) + turn(
        4, {"type": "agent_message", "id": "m", "text": '{"task_complete": true}'}, SCREEN
    )
    assert signatures(waiting, Status.VERIFY_FAILED) == ["idle_turns: 2 of 4 replies only waited"]
    assert signatures([{"type": "thread.started", "protocol": "raw"}, *waiting[1:]], Status.VERIFY_FAILED) == []
    broken = turn(1, {"type": "parse_error", "id": "p", "message": "no JSON"}) + turn(2)
    broken += [
        {"type": "verify.completed", "findings": [{"kind": "verifier_file", "path": "/tests/x", "affects_tests": True}]}
    ]
    assert signatures(broken, Status.TAMPERED) == [
        "parse_errors: 1",
        "empty_replies: 1 of 2",
        "tamper: verifier_file /tests/x",
    ]
    assert signatures(turn(1, command("ls")), Status.CONTEXT_LENGTH) == [
        "context_overflow: the conversation outgrew the model's context"
    ]


def test_turn_actions_are_what_each_turn_did():
    events = turn(1, command("ls"), command("cat a")) + turn(2, {"type": "file_change", "changes": [{"path": "/a"}]})
    events += turn(3, {"type": "parse_error", "message": "?"}) + turn(4, SCREEN)
    assert turn_actions(events) == ["ls ; cat a", "write /a", "(parse error)", ""]


def acted(task: str, attempt: int, solved: bool, actions: list[str], **more) -> TrialResult:
    outcome = Status.VERIFIED if solved else Status.VERIFY_FAILED
    return trial(task, "a", attempt, outcome, actions=actions, **more)


def test_buckets_spread_and_the_first_turn_where_trials_part():
    results = [
        acted("cold", 1, False, ["ls"], tests_passed=0, tests_total=3),
        acted("cold", 2, False, ["ls"], tests_passed=0, tests_total=3),
        acted("stuck", 1, False, ["ls"], tests_passed=1, tests_total=4),
        acted("stuck", 2, False, ["ls"], tests_passed=2, tests_total=4, signatures=["parse_errors: 2"]),
        acted("mixed", 1, True, ["ls", "cat a", "fix a"]),
        acted("mixed", 2, False, ["ls", "cat b", "rm b"], signatures=["parse_errors: 1", "empty_replies: 1 of 3"]),
        acted("easy", 1, True, ["fix"]),
        acted("easy", 2, True, ["fix"]),
        trial("easy", "a", 3, Status.SERVER_ERROR),  # infrastructure: not a trial of the model
    ]
    found = analyse(results)
    by = {t.task: t for t in found.tasks}
    assert {t: by[t].bucket for t in by} == {
        "cold": "truly-cold",
        "stuck": "partial-stuck",
        "mixed": "ever-solved",
        "easy": "ever-solved",
    }
    assert found.buckets == {"ever-solved": 2, "partial-stuck": 1, "truly-cold": 1}
    assert by["stuck"].reward_mean == 0.375 and by["stuck"].reward_sd == 0.125
    assert found.zero_variance == ["cold", "easy"] and by["easy"].trials == 2
    assert by["mixed"].signatures == {"empty_replies": 1, "parse_errors": 1}
    d = by["mixed"].divergence
    assert (d.turn, d.solved, d.solved_action, d.failed, d.failed_action) == (2, "a #1", "cat a", "a #2", "cat b")
    assert by["easy"].divergence is None and by["cold"].divergence is None
    assert read_task_filter(task_filter(found.zero_variance)) == {"cold", "easy"}
    assert analyse(results, count_infra=True).zero_variance == ["cold"]  # the server error now scores 0


def test_bench_tasks_prints_the_table_and_exports_the_zero_variance_tasks(tmp_path):
    out = tmp_path / "b"
    write_bench(
        out,
        [
            acted("a", 1, True, ["x"]),
            acted("a", 2, True, ["x"]),
            acted("b", 1, True, ["x"]),
            acted("b", 2, False, ["y"]),
        ],
    )
    proc = run_cli(["bench", "tasks", str(out), "--zero-variance", str(tmp_path / "skip.txt")], tmp_path)
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert "zero variance (no signal for a group-relative RL step): a" in text
    assert "turn 1: a #1 'x' / a #2 'y'" in text
    assert read_task_filter((tmp_path / "skip.txt").read_text()) == {"a"}


def test_bench_tasks_over_several_runs_names_each_trial_with_its_run(tmp_path):
    write_bench(tmp_path / "ckpt-1", [acted("b", 1, False, ["y"])])
    write_bench(tmp_path / "ckpt-2", [acted("b", 1, True, ["x"])])
    proc = run_cli(["bench", "tasks", str(tmp_path / "ckpt-1"), str(tmp_path / "ckpt-2")], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "turn 1: ckpt-2:a #1 'x' / ckpt-1:a #1 'y'" in " ".join(proc.stdout.split())
