"""The docker drivers on a real dockerd: camel tool semantics in a container, the driver's bookkeeping, attach mode.

Needs a reachable daemon (DOCKER_HOST) and the image .ci/test-image.sh builds. Without them these tests skip, except
under CI=true, where a missing daemon is a failure: CI must never pass by skipping the container tests.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from oc_repl import deviations
from oc_repl.protocols.camel.tools import OBSERVATION_LIMIT, CamelTerminalTools
from tests.conftest import ROOT, run_cli
from tests.docker_support import (
    DOCKER,
    IMAGE,
    answer,
    cli_args,
    completed_commands,
    events_of,
    exec_call,
    live_processes,
    wait_gone,
    write_call,
)
from tests.protocols.camel.test_camel_tools import (
    NO_OUTPUT,
    STILL_RUNNING,
    TERMINATED_EMPTY,
    M,
    N,
)
from tests.protocols.camel.test_camel_tools import (
    builtin_tools as camel_tools,
)


def builtin_tools(box: Any, **options: Any) -> Any:
    """camel's tools, their blocking output as rich 15 gives it (a final line break kept): these tests are of the
    sandbox, and expect that text; the two lines of rich are held to rich's own in test_camel_text.py."""
    return camel_tools(box, camel_rich="15", **options)


pytestmark = DOCKER


# --- camel tools in a container -------------------------------------------------------------------------------------


@pytest.fixture
def tools(docker_client: Any) -> Iterator[CamelTerminalTools]:
    from oc_repl.sandbox.docker import DockerImageSandbox

    box = DockerImageSandbox.from_spec(IMAGE)
    toolbox = builtin_tools(box)
    try:
        yield toolbox
    finally:
        toolbox.close_sessions()
        box.close()


def text_of(tools: CamelTerminalTools, name: str, **arguments: Any) -> str:
    return tools.call(name, arguments).text


def test_blocking_calls_are_fresh_shells_in_workspace_merged_and_without_status(tools: CamelTerminalTools):
    assert text_of(tools, "shell_exec", id="a", command="pwd") == "/workspace\n"
    assert text_of(tools, "shell_exec", id="a", command="cd /tmp && export X=1 && pwd") == "/tmp\n"
    assert text_of(tools, "shell_exec", id="a", command='pwd; echo "x${X}x"') == "/workspace\nxx\n"
    merged = tools.call("shell_exec", {"id": "a", "command": "echo out; echo err >&2; exit 3"})
    # both streams arrive, in an order the daemon does not promise; the status is for events only
    assert sorted(merged.text.splitlines()) == ["err", "out"] and merged.exit_code == 3
    assert text_of(tools, "shell_exec", id="a", command="exit 7") == NO_OUTPUT
    # a command that dies of SIGKILL in a running container is just a command that ended, not a lost sandbox
    killed = tools.call("shell_exec", {"id": "a", "command": "kill -KILL $$"})
    assert killed.status == "completed" and killed.exit_code == 137 and killed.text == NO_OUTPUT
    assert text_of(tools, "shell_exec", id="a", command="test -t 1 && echo tty || echo pipe") == "pipe\n"


def test_a_command_killed_in_a_running_container_is_known_to_have_ended_without_waiting_the_loss_out(
    tools: CamelTerminalTools,
):
    """A SIGKILLed command may be the container going; a command run in it says it is not, at once, instead of the
    seconds a stopping container can go on being shown running."""
    from oc_repl.sandbox.docker import LOSS_SETTLE

    started = time.monotonic()
    killed = tools.call("shell_exec", {"id": "a", "command": "kill -KILL $$"})
    assert killed.exit_code == 137 and time.monotonic() - started < LOSS_SETTLE / 2


def test_workspace_is_created_in_an_attached_container(docker_client: Any, own_container: Callable[..., Any]):
    from oc_repl.sandbox.docker import DockerSandbox

    container = own_container()
    assert container.exec_run(["test", "-e", "/workspace"]).exit_code != 0  # the image has none
    box = DockerSandbox(docker_client, container)
    toolbox = builtin_tools(box)
    try:
        assert text_of(toolbox, "shell_exec", id="a", command="pwd") == "/workspace\n"
        deep = builtin_tools(box, workdir="/srv/deep/work")
        assert text_of(deep, "shell_exec", id="a", command="pwd") == "/srv/deep/work\n"
    finally:
        toolbox.close_sessions()
        box.close()
    container.reload()
    assert container.status == "running"  # attach mode leaves the container alone


def test_timed_out_blocking_call_becomes_a_background_session(tools: CamelTerminalTools):
    started = time.monotonic()
    result = tools.call("shell_exec", {"id": "bg", "command": "echo begin; sleep 2; echo end", "timeout": 0.5})
    assert result.status == "timed_out" and "shell_view('bg')" in result.text
    assert time.monotonic() - started < 1.5
    assert text_of(tools, "shell_view", id="bg") == STILL_RUNNING
    deadline = time.monotonic() + 10
    while (view := text_of(tools, "shell_view", id="bg")) == STILL_RUNNING and time.monotonic() < deadline:
        time.sleep(0.1)
    assert view == M.render("view.completed", output="begin\nend\n")  # the whole output, then the marker, once
    assert text_of(tools, "shell_view", id="bg") == TERMINATED_EMPTY
    assert text_of(tools, "shell_view", id="bg") == TERMINATED_EMPTY


def test_interactive_python_session_answers_written_input(tools: CamelTerminalTools):
    started = text_of(tools, "shell_exec", id="py", command="python3 -i", block=False)
    assert "'py' started" in started
    out = text_of(tools, "shell_write_to_process", id="py", command="print(6*7)")
    assert "\r\n42\r\n" in out  # raw tty output: the echoed input, then the answer
    # a null `block` is non-blocking too, and such sessions have a terminal
    text_of(tools, "shell_exec", id="t", command="tty; sleep 0.2", block=None)
    deadline, seen = time.monotonic() + 5, ""
    while "/dev/pts/" not in seen and time.monotonic() < deadline:
        seen += text_of(tools, "shell_view", id="t")
        time.sleep(0.1)
    assert "/dev/pts/" in seen


def test_write_content_to_file_creates_missing_parents(tools: CamelTerminalTools):
    box = tools.sandbox
    first = tools.call("shell_write_content_to_file", {"content": "one\ntwo\n", "file_path": "notes/deep/a.txt"})
    assert first.status == "completed" and first.created and first.path == "/workspace/notes/deep/a.txt"
    assert box.read_file("/workspace/notes/deep/a.txt") == b"one\ntwo\n"
    absolute = tools.call("shell_write_content_to_file", {"content": "ü\n", "file_path": "/opt/new/dir/b.txt"})
    assert absolute.status == "completed" and absolute.path == "/opt/new/dir/b.txt"
    assert text_of(tools, "shell_exec", id="c", command="cat /opt/new/dir/b.txt") == "ü\n"
    again = tools.call("shell_write_content_to_file", {"content": "x", "file_path": "notes/deep/a.txt"})
    assert not again.created and box.read_file("notes/deep/a.txt") == b"x"  # overwritten, not appended


def test_timed_out_background_pair_leaves_no_sleep_behind(tools: CamelTerminalTools):
    container = tools.sandbox.container
    result = tools.call("shell_exec", {"id": "k", "command": "sleep 100 & sleep 100", "timeout": 0.5})
    assert result.status == "timed_out"
    assert live_processes(container).count("sleep 100") == 2  # as trained: it keeps running as a session
    tools.close_sessions()  # the end of the episode
    assert wait_gone(container, "sleep 100") == []
    # a driver-level timeout (verifiers, setup) kills the whole tree at once
    started = time.monotonic()
    timed = tools.sandbox.exec("sleep 101 & sleep 101", timeout=0.5)
    assert timed.timed_out and timed.exit_code is None and time.monotonic() - started < 3
    assert wait_gone(container, "sleep 101") == []


def test_huge_output_is_capped_at_capture(docker_client: Any):
    # Measured in a fresh interpreter, so the peak RSS it reports belongs to this command alone.
    script = f"""
import json, resource, time
from oc_repl.sandbox.docker import DockerImageSandbox
from tests.protocols.camel.test_camel_tools import builtin_tools
box = DockerImageSandbox.from_spec({IMAGE!r})
try:
    tools = builtin_tools(box, camel_rich="15")
    # a first result of the kept size sets the baseline: turning 1 MB of lines into text has a cost of its own
    tools.call("shell_exec", {{"id": "w", "command": "yes | head -c 2000000"}})
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.monotonic()
    result = tools.call("shell_exec", {{"id": "h", "command": "yes | head -c 200000000", "timeout": 120}})
    seconds = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    raw = box.exec("yes | head -c 50000000", timeout=60)
    report = {{"growth_kib": after - before, "text": result.text, "seconds": seconds}}
    print(json.dumps({{**report, "raw_len": len(raw.output), "raw_dropped": raw.dropped}}))
finally:
    box.close()
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=110, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["growth_kib"] < 16 * 1024, report  # 200 MB went through; a few MB stayed
    # the driver keeps head and tail of its 1 MiB limit and counts the rest, before any text is made
    assert report["raw_len"] < (1 << 20) + 100 and report["raw_dropped"] == 50_000_000 - (1 << 20)
    text = report["text"]
    cut = re.escape(N.texts["observation_cut"]).replace(re.escape("{kept}"), str(OBSERVATION_LIMIT))
    assert len(text) <= OBSERVATION_LIMIT + 100 and re.search(cut.replace(re.escape("{omitted}"), r"\d+"), text)
    assert text.startswith("y\ny\n") and text.endswith("y\ny\n")


def test_cleaning_tmp_breaks_neither_output_nor_timeouts(tools: CamelTerminalTools):
    assert text_of(tools, "shell_exec", id="a", command="rm -rf /tmp/* /tmp/.[!.]*; echo clean") == "clean\n"
    assert text_of(tools, "shell_exec", id="a", command="echo hi") == "hi\n"  # nothing about a missing pid file
    timed = tools.sandbox.exec("sleep 102", timeout=0.5)
    assert timed.timed_out and timed.output == b""
    assert wait_gone(tools.sandbox.container, "sleep 102") == []


def test_clients_sharing_a_container_keep_their_processes_apart(docker_client: Any, own_container: Any):
    from oc_repl.sandbox.docker import DockerSandbox

    container = own_container()
    first, second = DockerSandbox(docker_client, container), DockerSandbox(docker_client, container)
    proc = second.spawn("sleep 103", tty=False)
    deadline = time.monotonic() + 5
    while "sleep 103" not in live_processes(container) and time.monotonic() < deadline:
        time.sleep(0.05)
    first.close()  # must not take the other client's handles on its processes with it
    proc.kill()
    assert wait_gone(container, "sleep 103") == []
    second.close()


def test_closing_stops_what_commands_left_behind_in_one_exec(docker_client: Any, own_container: Any):
    from oc_repl.sandbox.docker import DockerSandbox

    container = own_container()
    container.exec_run(["sleep", "105"], detach=True)  # the user's own process, none of ours
    box = DockerSandbox(docker_client, container)
    tools = builtin_tools(box)
    assert text_of(tools, "shell_exec", id="a", command="sleep 104 >/dev/null & echo left") == "left\n"
    for _ in range(10):
        text_of(tools, "shell_exec", id="a", command="true")
    box.exec("sleep 106 >/dev/null &", timeout=10)
    responses: list[Any] = []
    box.api.hooks["response"].append(lambda response, *args, **kwargs: responses.append(response))
    try:
        box.close()
    finally:
        box.api.hooks["response"].pop()
    assert len(responses) == 2  # one exec (create, start), however many commands ran
    assert wait_gone(container, "sleep 104") == [] and wait_gone(container, "sleep 106") == []
    assert "sleep 105" in live_processes(container)


def test_non_root_default_user_writes_its_workspace_and_its_commands_are_killed(docker_client, own_container):
    from oc_repl.sandbox.docker import DockerSandbox

    container = own_container(user="1000:1000")  # as `docker run --user 1000:1000` starts it
    box = DockerSandbox(docker_client, container)
    tools = builtin_tools(box)
    try:
        made = text_of(tools, "shell_exec", id="a", command="touch made && echo ok > f && cat f && id -u")
        assert made == "ok\n1000\n"
        assert text_of(tools, "shell_exec", id="a", command="stat -c %u:%g /workspace") == "1000:1000\n"
        # a file from the write tool belongs to that user too, so its commands can change it
        assert tools.call("shell_write_content_to_file", {"content": "x\n", "file_path": "w.txt"}).status == "completed"
        assert text_of(tools, "shell_exec", id="a", command="echo y >> w.txt && cat w.txt") == "x\ny\n"
        # the pid of a command run as that user is recorded, so its timeout kills the whole tree
        timed = box.exec("sleep 300 & sleep 300", timeout=1)
        assert timed.timed_out and wait_gone(container, "sleep 300") == []
        session = tools.call("shell_exec", {"id": "k", "command": "sleep 301 & sleep 301", "timeout": 0.5})
        assert session.status == "timed_out"
        tools.close_sessions()
        assert wait_gone(container, "sleep 301") == []
        box.exec("sleep 302 >/dev/null &", timeout=10)  # left behind by a finished command: close stops it
    finally:
        tools.close_sessions()
        box.close()
    assert wait_gone(container, "sleep 302") == []
    # a workdir that already exists keeps its owner
    DockerSandbox(docker_client, container, workdir="/opt").close()
    assert container.exec_run(["stat", "-c", "%u", "/opt"]).output == b"0\n"


def test_closing_spares_a_process_that_got_a_recorded_pid_later(docker_client: Any, own_container: Any):
    from oc_repl.sandbox.docker import DockerSandbox

    container = own_container()
    container.exec_run(["setsid", "sleep", "1000"], detach=True)  # the user's, leading its own session and group
    deadline = time.monotonic() + 5
    while "sleep 1000" not in live_processes(container) and time.monotonic() < deadline:
        time.sleep(0.05)
    ps = container.exec_run(["ps", "-eo", "pid=,args="]).output.decode().splitlines()
    other = next(line.split()[0] for line in ps if line.split(None, 1)[1] == "sleep 1000")
    box = DockerSandbox(docker_client, container)
    box.exec("sleep 107 >/dev/null &", timeout=10)
    # as a command long finished would have left it, had the user's process got its pid after it (pids wrap):
    # the pid is in use again, by a process that started at another time
    for name, record in [("old", f"{other} 1"), ("bare", other)]:
        container.exec_run(["sh", "-c", f"echo {record} > {box.pid_dir}/{name}"])
    box.close()
    assert wait_gone(container, "sleep 107") == []  # ours still go
    time.sleep(0.3)  # a SIGKILL, had one been sent, has landed by now
    assert "sleep 1000" in live_processes(container)


# --- attach mode through the CLI ------------------------------------------------------------------------------------


def test_attach_mode_episode_leaves_the_container_running_with_its_file(serve, tmp_path, own_container):
    container = own_container()
    server = serve(
        {
            "replies": [
                write_call("kept\n", "out/r.txt"),
                exec_call("cat out/r.txt; pwd"),
                answer("Wrote out/r.txt."),
            ]
        }
    )
    proc = run_cli(cli_args(server, f"docker:{container.name}", "--json", "write the file"), tmp_path)
    assert proc.returncode == 0, proc.stderr
    events = events_of(proc.stdout)
    assert events[0].sandbox == f"docker:{container.name}"
    # the default rich line (14) drops the final line break
    assert [c.aggregated_output for c in completed_commands(events)] == ["kept\n/workspace"]
    assert events[-1].status == "done" and events[-1].kept_container == ""
    container.reload()
    assert container.status == "running"
    assert container.exec_run(["cat", "/workspace/out/r.txt"]).output == b"kept\n"


def test_attach_to_missing_container_fails_before_any_model_call(serve, tmp_path):
    server = serve({"replies": [answer("never asked")]})
    name = f"oc-repl-absent-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    proc = run_cli(cli_args(server, f"docker:{name}", "hello"), tmp_path)
    assert proc.returncode == 6, proc.stderr
    assert f"no container named '{name}'" in proc.stderr and "Traceback" not in proc.stderr
    assert server.chat_requests() == [] and time.monotonic() - started < 15


@pytest.mark.parametrize("how", ["created", "killed"])
def test_attach_to_stopped_container_is_a_sandbox_error(serve, tmp_path, own_container, how):
    container = own_container(start=how != "created")
    if how == "killed":
        container.kill()  # `sleep` as PID 1 ignores SIGTERM, so a stop would take its full grace period
        container.reload()
    server = serve({"replies": [answer("never asked")]})
    proc = run_cli(cli_args(server, f"docker:{container.name}", "hello"), tmp_path)
    assert proc.returncode == 6, proc.stderr
    assert f"container '{container.name}' is {container.status}, not running" in proc.stderr
    assert f"docker start {container.name}" in proc.stderr
    assert server.chat_requests() == []


@pytest.mark.parametrize(("image", "lands"), [(IMAGE, True), ("oc-repl-task-write-greeting:latest", False)])
def test_upstream_relative_paths_resolve_against_root(docker_client: Any, image: str, lands: bool):
    """Relative paths against / (`--relative-paths root`) replay upstream: the parent is made under the image's
    WORKDIR, the file goes under /, so it lands in /rel/... when WORKDIR is / and fails when the image has a WORKDIR
    such as /app."""
    from oc_repl.sandbox.docker import DockerImageSandbox

    if image != IMAGE:  # a task image with WORKDIR /app
        from oc_repl.tasks.terminal_bench import build_image, load_task_dir

        image = build_image(load_task_dir(ROOT / "examples" / "tasks" / "write-greeting"))
    box = DockerImageSandbox.from_spec(image)
    try:
        result = builtin_tools(box, deviations=deviations.defaults().replace(relative_paths_in_workdir=False)).call(
            "shell_write_content_to_file", {"content": "x\n", "file_path": "rel/deep/x.txt"}
        )
        assert (result.status == "completed") is lands, result.text
        assert (box.exec("cat /rel/deep/x.txt", timeout=10).exit_code == 0) is lands
    finally:
        box.close()


def test_a_look_whose_exec_came_back_with_nothing_is_run_again_not_called_a_sandbox_error(
    docker_client: Any, own_container: Any
):
    from oc_repl.sandbox.docker import DockerSandbox

    box = DockerSandbox(docker_client, own_container())
    box.host = None  # the daemon's own exec, as for a daemon on another machine: where the output can be lost
    real, lost = box.run_quick, []

    def losing(script: str, user: str = "root") -> bytes:
        answer = real(script, user)
        if "@@OCR:" in script and len(lost) < 2:  # it ran; only what it printed did not come back, twice
            lost.append(answer)
            return b""
        return answer

    try:
        box.exec("sleep 108 >/dev/null 2>&1 &", timeout=10)
        box.run_quick = losing  # type: ignore[method-assign]
        assert [p.command for p in box.agent_processes()] == ["sleep 108"]
        assert len(lost) == 2 and all(b"done@@" in answer for answer in lost)
        lost.clear()
        box.end_agent_processes()
        assert len(lost) == 2 and wait_gone(box.container, "sleep 108") == []
    finally:
        box.run_quick = real  # type: ignore[method-assign]
        box.close()
