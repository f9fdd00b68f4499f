"""A thread starts with `thread.started` whatever ends it, also before it could say everything: a refused plan, a
refused directory, a sandbox or an image that cannot be had, a server that cannot be reached. And the library never
reads a terminal for consent: that is a hook the command line fills."""

from __future__ import annotations

import io
import json
import shutil
import socket
import sys
import uuid

import pytest

from oc_repl.api import Settings, run_task
from tests.conftest import ROOT, run_cli
from tests.docker_support import answer

TASKS = ROOT / "examples" / "tasks"


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def one_thread(events: list) -> tuple:
    """The thread's first and last events, checked to be its start and its end, with nothing started twice."""
    assert [e.type for e in events].count("thread.started") == 1, [e.type for e in events]
    assert events[0].type == "thread.started" and events[-1].type == "thread.completed"
    return events[0], events[-1]


def test_a_run_without_an_instruction_starts_its_thread_then_says_why(serve):
    events: list = []
    result = run_task("", settings=Settings(api_base=serve({"replies": []}).url, retries=0), on_event=events.append)
    started, completed = one_thread(events)
    assert result.status.value == completed.status == "usage" and completed.exit_code == 2
    assert started.task == "" and started.protocol == "camel-terminal-toolkit"
    assert any(e.type == "error" and e.message == "no task given" for e in events)


def test_a_refused_task_plan_starts_its_thread_with_the_task_named(serve, tmp_path):
    task = tmp_path / "my-task"
    shutil.copytree(TASKS / "write-greeting", task)
    events: list = []
    settings = Settings(api_base=serve({"replies": []}).url, retries=0)
    result = run_task("and also this", task=task, settings=settings, on_event=events.append)
    started, completed = one_thread(events)
    assert result.status.value == completed.status == "usage"
    assert started.task_name == "my-task" and started.sandbox == "none"
    assert any(e.type == "error" and "brings its own instruction" in e.message for e in events)


def test_a_refused_directory_starts_its_thread_and_nothing_reads_stdin(serve, tmp_path, monkeypatch):
    class Terminal(io.StringIO):  # a terminal nobody may read from
        reads: list[str] = []

        def isatty(self) -> bool:
            return True

        def readline(self, *args) -> str:
            self.reads.append("readline")
            raise AssertionError("the library read stdin")

        read = readline

    monkeypatch.setattr(sys, "stdin", Terminal())
    server = serve({"replies": [answer("never asked")]})
    events: list = []
    settings = Settings(api_base=server.url, sandbox=f"local:{tmp_path / 'w'}", retries=0)
    result = run_task("list the files", settings=settings, on_event=events.append)
    started, completed = one_thread(events)
    assert result.status.value == completed.status == "usage" and Terminal.reads == []
    assert started.sandbox == f"local:{tmp_path / 'w'}" and started.task == "list the files"
    assert any(e.type == "error" and "without consent" in e.message for e in events)
    assert server.chat_requests() == []


def test_consent_is_the_callers_hook_asked_with_the_question(serve, tmp_path):
    server = serve({"replies": [answer("nothing to do")]})
    asked: list[str] = []

    def consent(question: str) -> bool:
        asked.append(question)
        return True

    settings = Settings(api_base=server.url, sandbox=f"local:{tmp_path / 'w'}", retries=0)
    result = run_task("say hi", settings=settings, consent=consent)
    assert result.status.value == "done"
    assert len(asked) == 1 and "run commands on this host" in asked[0] and "confined" in asked[0]


def test_an_unreachable_server_starts_the_thread_with_the_sandbox_it_opened(tmp_path):
    events: list = []
    settings = Settings(api_base=closed_port_url(), sandbox=f"local:{tmp_path / 'w'}", yes=True, retries=0)
    result = run_task("say hi", settings=settings, on_event=events.append)
    started, completed = one_thread(events)
    assert result.status.value == completed.status == "server_error" and completed.exit_code == 5
    assert started.model == "" and started.sandbox == f"local:{(tmp_path / 'w').resolve()}"
    assert started.workdir == str((tmp_path / "w").resolve()) and started.assets
    assert started.isolation.confinement == "bubblewrap"
    assert any(e.type == "error" and e.kind == "server_unreachable" for e in events)


def test_the_json_stream_of_a_run_that_fails_early_begins_with_thread_started(tmp_path):
    args = ["run", "--json", "--api-base", closed_port_url(), "--retries", "0", "--sandbox", f"local:{tmp_path}/w"]
    proc = run_cli([*args, "--yes", "say hi"], tmp_path)
    assert proc.returncode == 5, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert lines[0]["type"] == "thread.started" and lines[-1]["type"] == "thread.completed"


@pytest.mark.docker
def test_a_sandbox_that_cannot_be_had_starts_the_thread_with_the_sandbox_asked_for(serve, docker_client):
    events: list = []
    spec = f"docker-image:oc-repl-no-such-image-{uuid.uuid4().hex[:6]}:never"
    settings = Settings(api_base=serve({"replies": []}).url, sandbox=spec, retries=0)
    result = run_task("say hi", settings=settings, on_event=events.append)
    started, completed = one_thread(events)
    assert result.status.value == completed.status == "sandbox_error" and completed.exit_code == 6
    assert started.sandbox == spec and started.task == "say hi" and started.assets


@pytest.mark.docker
def test_an_image_that_cannot_be_built_starts_the_thread_with_the_task_and_its_image(serve, tmp_path, docker_client):
    task = tmp_path / f"tb-unbuilt-{uuid.uuid4().hex[:6]}"
    shutil.copytree(TASKS / "write-greeting", task)
    (task / "Dockerfile").write_text("FROM oc-repl-no-such-base:never\n")
    events: list = []
    result = run_task(task=task, settings=Settings(api_base=serve({"replies": []}).url), on_event=events.append)
    started, completed = one_thread(events)
    assert result.status.value == completed.status == "build_error" and completed.exit_code == 6
    assert started.task_name == task.name and started.task.startswith("Create")
    assert started.sandbox == f"docker-image:oc-repl-task-{task.name}:latest"
