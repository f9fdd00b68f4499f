"""The Python API: lazy exports, `run_task` (in this process, typed result and events), `iter_events` (a child
process, typed events as they come). How settings reach a child is pinned in test_options.py."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from oc_repl.errors import UsageError
from tests.cli.test_cli import answer
from tests.conftest import run_cli
from tests.docker_support import exec_call


def settings_for(server, tmp_path: Path, **more):
    from oc_repl import Settings

    work = tmp_path / "w"
    work.mkdir(exist_ok=True)
    return Settings(api_base=server.url, sandbox=f"local:{work}", yes=True, retries=0, **more)


def test_importing_oc_repl_stays_light_and_exports_resolve():
    code = (
        "import sys, oc_repl\n"
        "heavy = {'docker', 'rich', 'pydantic', 'httpx', 'openai'}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))\n"
        "from oc_repl import run_task, iter_events, load_task, Settings, TaskResult, Status\n"
        "print(Settings.__name__, Status.VERIFIED.value, callable(run_task) and callable(iter_events))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout.splitlines() == ["[]", "RunSettings verified True"], proc.stderr
    import oc_repl

    with pytest.raises(AttributeError):
        oc_repl.no_such_thing  # noqa: B018


def test_run_task_returns_a_typed_result_and_streams_typed_events(serve, tmp_path):
    from oc_repl import Status, run_task
    from oc_repl.events import ItemCompleted, ThreadCompleted, ThreadStarted, VerifyCompleted

    server = serve({"replies": [exec_call("echo hi > hello.txt"), answer("Written.")]})
    events: list = []
    transcript = tmp_path / "t.jsonl"
    settings = settings_for(server, tmp_path, verify="test -f hello.txt")
    result = run_task("write hello.txt", settings=settings, on_event=events.append, transcript=transcript)
    assert result.status is Status.VERIFIED and result.exit_code == 0 and result.attempt == 1
    assert result.final_answer == "Written." and result.turns == 2 and result.verify.passed
    assert isinstance(events[0], ThreadStarted) and isinstance(events[-1], ThreadCompleted)
    assert any(isinstance(e, VerifyCompleted) for e in events)
    assert any(isinstance(e, ItemCompleted) and e.item.type == "command_execution" for e in events)
    assert all(isinstance(e.ts, float) and abs(e.ts - time.time()) < 300 for e in events if hasattr(e, "ts"))
    assert transcript.read_text().count("\n") >= len([e for e in events if e.type != "item.updated"])
    assert (tmp_path / "w" / "hello.txt").read_text() == "hi\n"


def test_iter_events_runs_in_a_child_and_yields_typed_events(serve, tmp_path):
    from oc_repl import iter_events

    server = serve({"replies": [exec_call("echo from-child"), answer("Seen.")]})
    events = list(iter_events("say it", settings=settings_for(server, tmp_path, verify="true")))
    assert events[0].type == "thread.started" and events[-1].type == "thread.completed"
    assert events[-1].status == "verified" and events[-1].exit_code == 0
    commands = [e.item for e in events if e.type == "item.completed" and e.item.type == "command_execution"]
    assert commands[0].aggregated_output == "from-child"  # camel on rich 14 (the default): no final break


def test_iter_events_says_why_a_run_did_not_start(serve, tmp_path):
    from oc_repl import iter_events

    server = serve({"replies": [answer("never asked")]})
    with pytest.raises(UsageError, match="cannot write the transcript"):
        list(iter_events("x", settings=settings_for(server, tmp_path), transcript=Path("/proc/none/t.jsonl")))
    assert server.chat_requests() == []


def test_leaving_iter_events_early_stops_the_run_and_its_commands(serve, tmp_path):
    from oc_repl import iter_events

    marker = "sleep 37.125"
    server = serve({"replies": [exec_call(marker, timeout=60), answer("done")]})

    def running() -> bool:
        return bool(subprocess.run(["pgrep", "-f", marker], capture_output=True).stdout)

    for event in iter_events("wait", settings=settings_for(server, tmp_path)):
        if event.type == "item.started":
            deadline = time.monotonic() + 30
            while not running():
                assert time.monotonic() < deadline, "the command never started"
                time.sleep(0.05)
            break  # closes the generator: the child is terminated and cleans up
    deadline = time.monotonic() + 15
    while running():
        assert time.monotonic() < deadline, "the command outlived the run"
        time.sleep(0.1)


@pytest.mark.parametrize(
    ("extra", "told"),
    [
        ([], "until it is verified"),
        (["--verify", "true", "--sandbox", "local:.", "--yes"], "starts afresh"),
    ],
)
def test_attempts_need_a_verifier_and_a_fresh_sandbox(serve, tmp_path, extra, told):
    server = serve({"replies": [answer("never asked")]})
    proc = run_cli(["run", "--api-base", server.url, "--attempts", "2", *extra, "do it"], tmp_path)
    assert proc.returncode == 2 and told in " ".join(proc.stderr.split())
    assert server.chat_requests() == []
