"""Tamper evidence on `local:` sandboxes: what the agent planted where the verifier runs makes the run `tampered`;
what it left running is stopped before the verifier."""

from __future__ import annotations

from tests.cli.test_cli import answer, base_args, exec_call
from tests.conftest import run_cli
from tests.docker_support import events_of
from tests.tasks.test_tamper_docker import WATCHER, session_call

CONFTEST = "printf 'def pytest_collection_modifyitems(items):\\n    items.clear()\\n' > conftest.py"


def verdict(stdout: str) -> tuple[list, object]:
    events = events_of(stdout)
    return events, next(e for e in events if e.type == "verify.completed")


def test_a_conftest_planted_where_the_verifier_runs_makes_a_local_run_tampered(serve, tmp_path):
    work = tmp_path / "w"
    server = serve({"replies": [exec_call(CONFTEST), answer("Done.")]})
    proc = run_cli([*base_args(server, work, "--json", "--verify", "true"), "make it pass"], tmp_path, timeout=120)
    assert proc.returncode == 8, proc.stderr
    events, verify = verdict(proc.stdout)
    assert events[-1].status == "tampered"
    assert [(f.kind, f.path, f.affects_tests) for f in verify.findings] == [
        ("import_hook", str(work / "conftest.py"), True)
    ]


def test_a_watcher_left_in_a_local_sandbox_is_stopped_and_the_run_tampered(serve, tmp_path):
    check = tmp_path / "check.sh"
    check.write_text("exit 1\n")
    server = serve({"replies": [exec_call(WATCHER), answer("Done.")]})
    args = base_args(server, tmp_path / "w", "--json", "--verify-file", str(check))
    proc = run_cli([*args, "wait"], tmp_path, timeout=120)
    assert proc.returncode == 8, proc.stderr
    events, verify = verdict(proc.stdout)
    assert verify.processes_stopped and not verify.passed
    assert [f.kind for f in verify.findings if f.affects_tests] == ["process"]


def test_a_session_left_open_in_a_local_sandbox_is_noted_and_the_run_verified(serve, tmp_path):
    server = serve({"replies": [session_call("sleep 600"), answer("Done.")]})
    proc = run_cli([*base_args(server, tmp_path / "w", "--json", "--verify", "true"), "wait"], tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    events, verify = verdict(proc.stdout)
    assert events[-1].status == "verified" and verify.processes_stopped
    # named as it runs when it was stopped: its shell may not have handed over to sleep yet
    [found] = verify.findings
    assert (found.kind, found.affects_tests) == ("process", False) and found.path in ("sleep 600", "bash -c sleep 600")
