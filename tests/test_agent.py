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


def test_the_record_between_two_requests_is_written_in_order_before_the_reply(serve, tmp_path):
    """A turn's end, the next turn's start and its request are emitted once the request is on its way (its body
    written), so writing them overlaps the server's work: still in order, and before the reply comes."""
    import time

    from oc_repl import Settings, run_task

    delay = 1.5  # seconds the server takes over each reply
    server = serve({"replies": [{**exec_call("true"), "delay": delay}, {**answer("done"), "delay": delay}]})
    work = tmp_path / "w"
    work.mkdir()
    settings = Settings(api_base=server.url, sandbox=f"local:{work}", yes=True, retries=0)
    seen: list[tuple[str, float]] = []
    result = run_task("go", settings=settings, on_event=lambda e: seen.append((e.type, time.perf_counter())))
    assert result.final_answer == "done"
    kinds = [kind for kind, _ in seen if kind != "item.updated"]
    turn = ["turn.started", "request.sent", "response.received"]
    tool = ["item.started", "item.completed"]
    assert kinds[1:-1] == [*turn, *tool, "turn.completed", *turn, "item.completed", "turn.completed"], kinds
    # the server's clock is this process's: the held events of each turn come well before its reply
    arrived = [request["received"] for request in server.chat_requests()]
    held = [at for kind, at in seen if kind in ("turn.started", "request.sent")]
    held.insert(2, next(at for kind, at in seen if kind == "turn.completed"))
    for at, came in zip(held, [arrived[0], arrived[0], arrived[1], arrived[1], arrived[1]], strict=True):
        assert at < came + delay - 0.5, (held, arrived)


def test_a_request_that_failed_is_recorded_before_the_retry_that_follows_it(serve, tmp_path):
    from oc_repl import Settings, run_task

    server = serve({"replies": [{"http_error": 500}, answer("done")]})
    work = tmp_path / "w"
    work.mkdir()
    settings = Settings(api_base=server.url, sandbox=f"local:{work}", yes=True, retries=1)
    seen: list = []
    result = run_task("go", settings=settings, on_event=seen.append)
    assert result.final_answer == "done"
    kinds = [e.type for e in seen if e.type != "item.updated"]
    assert kinds[1:5] == ["turn.started", "request.sent", "error", "response.received"], kinds
    assert seen[kinds.index("error")].retrying
