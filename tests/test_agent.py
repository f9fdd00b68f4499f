"""The turn-capped loop: what counts as a loop, and what does not."""

from __future__ import annotations

from tests.cli.test_cli import answer, base_args, exec_call
from tests.cli.test_run_outcomes import call
from tests.conftest import run_cli


def test_polling_a_silent_background_job_is_not_a_loop(serve, tmp_path):
    views = [call("shell_view", id="job") for _ in range(5)]
    start = call("shell_exec", id="job", command="sleep 4; echo finished", block=False, timeout=None)
    server = serve({"replies": [start, *views, exec_call("sleep 4"), call("shell_view", id="job"), answer("done")]})
    run = run_cli(base_args(server, tmp_path / "w", "--max-turns", "12", "go"), tmp_path)
    assert run.returncode == 0, run.stderr


def test_the_same_finished_look_is_still_a_loop(serve, tmp_path):
    views = [call("shell_view", id="job") for _ in range(5)]
    start = call("shell_exec", id="job", command="true", block=False, timeout=None)
    server = serve({"replies": [start, exec_call("sleep 0.5"), *views, answer("done")]})
    run = run_cli(base_args(server, tmp_path / "w", "go"), tmp_path)
    assert run.returncode == 4, run.stderr
