"""camel-terminal-toolkit on a real local sandbox: tool semantics, parse errors, history modes, assets."""

from __future__ import annotations

import os
import shutil
import time
import uuid
from pathlib import Path

import pytest

from oc_repl import deviations
from oc_repl.protocols import data_dir
from oc_repl.protocols.camel.protocol import AGENT_SPEC, NOTICES_SPEC
from oc_repl.protocols.camel.tools import TOOLKIT_SPEC, CamelTerminalTools
from oc_repl.protocols.templates import Templates, parse
from oc_repl.sandbox.local import LocalSandbox
from oc_repl.types import ToolCall


def builtin(filename: str, spec: dict) -> Templates:
    return Templates(parse((data_dir("camel-terminal-toolkit") / filename).read_bytes(), spec, filename))


# The built-in texts: what the tools answer is asserted through them, so any wording (built-in or synced) passes.
M = builtin("toolkit.toml", TOOLKIT_SPEC)
N = builtin("notices.toml", NOTICES_SPEC)
A = builtin("agent.toml", AGENT_SPEC)
NO_OUTPUT = M.render("exec.no_output")
STILL_RUNNING = M.render("view.still_running")
IDLE = M.render("view.idle")
TERMINATED_EMPTY = M.render("view.terminated_empty")


@pytest.fixture(autouse=True, name="own_directories")
def own_directories_fixture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Protocols built here read the built-in assets, never a sync or an override in the user's own folders."""
    for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))


@pytest.fixture(name="sandbox")
def sandbox_fixture(tmp_path: Path):
    box = LocalSandbox(tmp_path / "box")
    yield box
    box.close()


def builtin_tools(sandbox: LocalSandbox, **options) -> CamelTerminalTools:
    return CamelTerminalTools(sandbox, M, N, **options)


@pytest.fixture
def tools(sandbox: LocalSandbox):
    toolbox = builtin_tools(sandbox)
    yield toolbox
    toolbox.close_sessions()


def run(tools: CamelTerminalTools, name: str, **arguments) -> str:
    return tools.call(name, arguments).text


def call(name: str, call_id: str = "", **arguments) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=arguments)


def wait_until_ended(tools: CamelTerminalTools, session_id: str, within: float = 5.0) -> None:
    assert tools._sessions[session_id].proc.wait(within)


# --- blocking shell_exec ------------------------------------------------------------------------------------------


def test_blocking_exec_output_no_output_and_no_exit_status(tools: CamelTerminalTools, sandbox: LocalSandbox):
    assert run(tools, "shell_exec", id="s", command="echo hi; echo oops >&2; exit 3") == "hi\noops"
    result = tools.call("shell_exec", {"id": "s", "command": "exit 4"})
    assert result.text == NO_OUTPUT and result.exit_code == 4  # known to the events, never to the model
    assert run(tools, "shell_exec", id="s", command="printf '  \\n'") == NO_OUTPUT


def test_blocking_exec_starts_fresh_in_the_working_directory(tools: CamelTerminalTools, sandbox: LocalSandbox):
    assert run(tools, "shell_exec", id="s", command="cd /tmp; export X=1; pwd") == "/tmp"
    assert run(tools, "shell_exec", id="s", command="pwd; echo x${X}x") == f"{sandbox.root}\nxx"


def test_blocking_exec_output_is_terminal_text_of_the_chosen_rich_line(sandbox: LocalSandbox):
    command = r"printf '\033[31m10%%\r100%%\033[0m\nok\bk\n'"
    for line, text in (("14", "10%\n100%\nokk"), ("15", "100%\nokk\n")):  # text.py: how the two lines split
        toolbox = builtin_tools(sandbox, camel_rich=line)
        assert run(toolbox, "shell_exec", id="s", command=command, block=True) == text, line


def test_working_directory_is_created(sandbox: LocalSandbox, tmp_path: Path):
    toolbox = builtin_tools(sandbox, workdir=str(tmp_path / "work" / "space"))
    assert run(toolbox, "shell_exec", id="s", command="pwd") == f"{tmp_path}/work/space"


def test_timeout_turns_into_a_background_session(tools: CamelTerminalTools):
    result = tools.call("shell_exec", {"id": "slow", "command": "sleep 1; echo done", "timeout": 0.5})
    assert result.status == "timed_out"
    assert result.text == M.render("exec.timeout", id="slow", timeout="0.5")
    assert run(tools, "shell_view", id="slow") == STILL_RUNNING
    wait_until_ended(tools, "slow")
    assert run(tools, "shell_view", id="slow") == M.render("view.completed", output="done")
    assert run(tools, "shell_view", id="slow") == TERMINATED_EMPTY
    assert run(tools, "shell_view", id="slow") == TERMINATED_EMPTY


def test_silent_timed_out_command_still_reports_completion(tools: CamelTerminalTools):
    assert tools.call("shell_exec", {"id": "q", "command": "sleep 0.6", "timeout": 0.2}).status == "timed_out"
    wait_until_ended(tools, "q")
    assert run(tools, "shell_view", id="q") == M.render("view.completed", output="")


# --- sessions -----------------------------------------------------------------------------------------------------


def test_python_session_driven_by_input(tools: CamelTerminalTools):
    started = run(tools, "shell_exec", id="py", command="python3 -i", block=False)
    assert started == M.render("exec.session_started", id="py")
    answer = run(tools, "shell_write_to_process", id="py", command="print(6*7)")
    assert "42" in answer and "print(6*7)" in answer  # the terminal echoes the input
    assert "\r\n" in answer  # raw tty output


def test_write_that_ends_the_process_reports_it_like_upstream(tools: CamelTerminalTools):
    run(tools, "shell_exec", id="py", command="python3 -i", block=None)  # null starts a session too
    started = time.monotonic()
    out = run(tools, "shell_write_to_process", id="py", command="exit()")
    assert time.monotonic() - started < 3
    assert out.startswith("exit()")
    assert out.endswith(M.render("collect.still_outputting", output=""))
    assert out.count(TERMINATED_EMPTY) >= 5
    assert run(tools, "shell_view", id="py") == TERMINATED_EMPTY


def test_view_is_raw_and_incremental_then_terminated(tools: CamelTerminalTools):
    run(tools, "shell_exec", id="v", command=r"printf 'a\033[31mb\n'; read x; echo got-$x", block=False)
    deadline = time.monotonic() + 3
    first = ""
    while not first.strip() and time.monotonic() < deadline:
        time.sleep(0.05)
        first = run(tools, "shell_view", id="v")
        first = "" if first == IDLE else first
    assert first == "a\x1b[31mb\r\n"
    assert run(tools, "shell_view", id="v") == IDLE
    tools._sessions["v"].proc.write(b"z\n")
    wait_until_ended(tools, "v")
    assert run(tools, "shell_view", id="v") == M.render("view.terminated", output="z\r\ngot-z\r\n")
    assert run(tools, "shell_view", id="v") == TERMINATED_EMPTY


def test_view_of_a_silent_ended_session(tools: CamelTerminalTools):
    run(tools, "shell_exec", id="t", command="true", block=False)
    wait_until_ended(tools, "t")
    assert run(tools, "shell_view", id="t") == TERMINATED_EMPTY


def test_session_ids_reused_and_unknown(tools: CamelTerminalTools):
    run(tools, "shell_exec", id="srv", command="sleep 30", block=False)
    reused = tools.call("shell_exec", {"id": "srv", "command": "echo again", "block": False})
    assert (reused.status, reused.text) == ("failed", M.render("exec.already_running", id="srv"))
    assert run(tools, "shell_view", id="nope") == M.render("view.unknown", id="nope")
    assert run(tools, "shell_write_to_process", id="nope", command="x") == M.render("write.unknown", id="nope")
    run(tools, "shell_exec", id="done", command="true", block=False)
    wait_until_ended(tools, "done")
    assert run(tools, "shell_exec", id="done", command="true", block=False) == M.render(
        "exec.session_started", id="done"
    )


def test_close_sessions_kills_them(tools: CamelTerminalTools):
    run(tools, "shell_exec", id="a", command="sleep 30", block=False)
    tools.call("shell_exec", {"id": "b", "command": "sleep 30", "timeout": 0.1})
    procs = [s.proc for s in tools._sessions.values()]
    tools.close_sessions()
    assert all(not p.alive() for p in procs)
    assert run(tools, "shell_view", id="a") == M.render("view.unknown", id="a")


# --- files --------------------------------------------------------------------------------------------------------


@pytest.fixture
def unconfined(tmp_path: Path):
    """A sandbox that may write anywhere its user can, as an unconfined local: does (confined ones refuse)."""
    box = LocalSandbox(tmp_path / "box", confine=False)
    yield box
    box.close()


def test_file_write_relative_and_absolute_with_missing_parents(unconfined: LocalSandbox, tmp_path: Path):
    tools = builtin_tools(unconfined)
    result = tools.call("shell_write_content_to_file", {"content": "print('hi')\n", "file_path": "src/pkg/a.py"})
    assert (result.status, result.text, result.created) == (
        "completed",
        M.render("file.ok", file_path="src/pkg/a.py"),
        True,
    )
    assert (tools.sandbox.root / "src/pkg/a.py").read_text() == "print('hi')\n"
    target = tmp_path / "elsewhere" / "deep" / "b.txt"
    written = run(tools, "shell_write_content_to_file", content="é\n", file_path=str(target))
    assert written == M.render("file.ok", file_path=str(target))
    assert target.read_text(encoding="utf-8") == "é\n"
    again = tools.call("shell_write_content_to_file", {"content": "x", "file_path": str(target)})
    assert not again.created and target.read_text() == "x"


def test_relative_paths_against_root_like_upstream(unconfined: LocalSandbox):
    sandbox = unconfined
    toolbox = builtin_tools(sandbox, deviations=deviations.defaults().replace(relative_paths_in_workdir=False))
    unique = f"oc-repl-test-{uuid.uuid4().hex[:8]}"
    try:
        failed = toolbox.call("shell_write_content_to_file", {"content": "1", "file_path": f"tmp/{unique}/x.txt"})
        missing = N.render("no_directory", path=f"/tmp/{unique}")
        assert failed.status == "failed"  # the parent was made under the workdir only
        assert failed.text == M.render("file.error", file_path=f"tmp/{unique}/x.txt", error=missing)
        assert (sandbox.root / "tmp" / unique).is_dir()
        os.mkdir(f"/tmp/{unique}")
        assert toolbox.call("shell_write_content_to_file", {"content": "2", "file_path": f"tmp/{unique}/x.txt"})
        assert Path(f"/tmp/{unique}/x.txt").read_text() == "2"
    finally:
        shutil.rmtree(f"/tmp/{unique}", ignore_errors=True)


def test_exact_names_a_sandbox_that_is_no_container_container_in_the_daemons_words(unconfined: LocalSandbox):
    toolbox = builtin_tools(unconfined, deviations=deviations.none())
    file_path = f"tmp/oc-repl-test-{uuid.uuid4().hex[:8]}/x.txt"
    failed = toolbox.call("shell_write_content_to_file", {"content": "1", "file_path": file_path})
    error = f"Error response from daemon: Could not find the file {os.path.dirname(file_path)} in container container\n"
    assert (failed.status, failed.text) == ("failed", M.render("file.error", file_path=file_path, error=error))
