"""The Harbor sandbox on a real Harbor environment: Harbor's own docker environment class (over Debian's
docker-compose 1.29, tests/harbor_support.py), started from a Harbor task on the test image, its coroutines running on
an asyncio loop of their own thread while the sandbox is driven from the test's thread, as the agent's worker drives it.

Needs Harbor (Python >= 3.12, `pip install '.[harbor]'`; skipped without it) and the docker daemon and test image (a
failure under CI=true when missing).
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

pytest.importorskip("harbor")

from oc_repl.errors import Deadline, SandboxError, SandboxLost  # noqa: E402
from oc_repl.integrations.harbor import environment as harbor_env  # noqa: E402
from oc_repl.integrations.harbor.environment import HarborSandbox, LoopBridge  # noqa: E402
from oc_repl.protocols.camel.tools import ToolCallError  # noqa: E402
from oc_repl.protocols.terminus.protocol import TerminusJson  # noqa: E402
from oc_repl.protocols.terminus.pty_terminal import PtyTerminal  # noqa: E402
from oc_repl.protocols.terminus.tmux import TmuxTerminal  # noqa: E402
from oc_repl.protocols.terminus.tmux_inside import InsideTmuxTerminal  # noqa: E402
from oc_repl.sandbox.docker import DockerImageSandbox  # noqa: E402
from oc_repl.tasks.evidence import Evidence  # noqa: E402
from tests.camel_scenarios import ATTEMPTS, SCENARIOS  # noqa: E402
from tests.docker_support import IMAGE, docker_session  # noqa: E402
from tests.harbor_support import TASK, started  # noqa: E402
from tests.protocols.camel.test_camel_tools import TERMINATED_EMPTY  # noqa: E402
from tests.protocols.camel.test_camel_tools import builtin_tools as camel_tools


def builtin_tools(box: Any, **options: Any) -> Any:
    """camel's tools, their blocking output as rich 15 gives it (a final line break kept): these tests are of the
    sandbox, and expect that text; the two lines of rich are held to rich's own in test_camel_text.py."""
    return camel_tools(box, camel_rich="15", **options)


pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    running = asyncio.new_event_loop()
    thread = threading.Thread(target=running.run_forever, name="harbor-loop", daemon=True)
    thread.start()
    yield running
    running.call_soon_threadsafe(running.stop)
    thread.join(30)


def on(loop: asyncio.AbstractEventLoop, coroutine: Any, timeout: float = 300) -> Any:
    return asyncio.run_coroutine_threadsafe(coroutine, loop).result(timeout)


@pytest.fixture(scope="module")
def environment(loop, tmp_path_factory) -> Iterator[Any]:
    client = docker_session()
    next(client)
    name = f"oc-repl-test-{uuid.uuid4().hex[:8]}"
    env = on(loop, started(TASK, tmp_path_factory.mktemp("trial"), name))
    yield env
    on(loop, env.stop(delete=True))
    client.close()


@pytest.fixture
def box(loop, environment) -> Iterator[HarborSandbox]:
    sandbox = on(loop, HarborSandbox.open(environment, LoopBridge(loop)))
    yield sandbox
    sandbox.close()


def processes(box: HarborSandbox) -> str:
    return box.exec("ps -eo args", timeout=30).output.decode()


def wait_until(check: Any, seconds: float = 60) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return False


# --- exec ----------------------------------------------------------------------------------------------------------


def test_exec_merges_both_streams_and_reports_the_exit_status(box):
    result = box.exec("echo out; sleep 0.2; echo err >&2; exit 3", timeout=30)
    assert (result.output, result.exit_code, result.timed_out) == (b"out\nerr\n", 3, False)
    assert box.exec("pwd; echo $TERM; test -t 0 || echo no tty", timeout=30).output == b"/workspace\ndumb\nno tty\n"


def test_exec_output_arrives_byte_for_byte(box):
    # Harbor decodes an exec's output as text, replacing invalid bytes; the sandbox's reports carry them as base64
    assert box.exec(r"printf 'caf\303\251 \377\376\000end'", timeout=30).output == b"caf\xc3\xa9 \xff\xfe\x00end"


def test_timeout_kills_the_commands_whole_group(box):
    result = box.exec("sleep 3001 & sleep 3002; echo never", timeout=1)
    assert result.timed_out and result.exit_code is None and result.output == b""
    assert wait_until(lambda: "sleep 300" not in processes(box))


def test_background_child_is_left_running_and_does_not_hold_the_exec(box):
    started_at = time.monotonic()
    result = box.exec("sleep 3003 & echo started", timeout=60)
    assert (result.output, result.exit_code, result.timed_out) == (b"started\n", 0, False)
    assert time.monotonic() - started_at < 30  # returned long before the child's end
    assert "sleep 3003" in processes(box)
    box.close()  # what the commands left running goes with the sandbox
    assert wait_until(lambda: "sleep 3003" not in processes(box))


def test_what_commands_left_is_listed_and_left_running_naming_the_commands_not_their_runners(box):
    box.exec("sleep 3011 >/dev/null 2>&1 &", timeout=30)
    box.spawn("sleep 3012", tty=False)
    box.spawn("sleep 3013", tty=True)
    terminal = TmuxTerminal(box)  # the protocol's own: never named
    left = box.agent_processes(keep=frozenset({terminal.pid}))
    assert sorted(found.command for found in left) == ["sleep 3011", "sleep 3012", "sleep 3013"]
    assert all(found.cwd == "/workspace" for found in left)
    ps = processes(box)
    assert "sleep 3011" in ps and "tmux" in ps  # Harbor's verifier runs beside them


def test_output_is_capped_when_read_and_freed_in_the_environment(loop, environment):
    box = on(loop, HarborSandbox.open(environment, LoopBridge(loop), output_limit=64 * 1024))
    try:
        proc = box.spawn("head -c 50000000 /dev/zero | tr '\\0' a; echo END", tty=False)
        assert proc.wait(120)
        output = proc.read_available()
        assert output.startswith(b"a" * 32768) and output.endswith(b"a" * 100 + b"END\n")
        assert proc.dropped == 50000004 - 65536 and f"{proc.dropped} bytes".encode() in output
        # the 50 MB output file keeps its length but no longer its blocks: the bytes read are freed
        du = box.exec(f"stat -c %s {proc.path}.out; du -k {proc.path}.out", timeout=30).output.split()
        assert int(du[0]) == 50000004 and int(du[1]) < 2048
    finally:
        box.close()


def test_terminal_process_takes_input_and_answers_as_a_pty(box):
    proc = box.spawn("python3 -i", tty=True)
    proc.write(b"print(6*7)\n")
    seen = b""

    def answered() -> bool:
        nonlocal seen
        seen += proc.read_available()
        return b"42\r\n>>> " in seen

    assert wait_until(answered), seen
    assert b">>> print(6*7)\r\n" in seen  # the terminal's echo, as a pty gives it
    proc.write(b"exit()\n")
    assert proc.wait(30) and proc.exit_code == 0


def test_write_and_read_files_as_the_agents_user(box):
    box.write_file("deep/dir/x.txt", b"caf\xc3\xa9\n")
    assert box.read_file("/workspace/deep/dir/x.txt") == b"caf\xc3\xa9\n"
    big = bytes(range(256)) * 1024  # over what one exec carries inline: staged by Harbor's upload_file
    box.write_file("/tmp/big.bin", big)
    assert box.read_file("/tmp/big.bin") == big


def test_a_command_holding_a_nul_byte_is_refused_not_run_without_it(box):
    with pytest.raises(SandboxError, match="embedded null byte"):
        box.exec("echo a\0b > /tmp/nul-ran", timeout=30)
    assert box.exec("ls /tmp/nul-ran* 2>&1", timeout=30).exit_code != 0


def test_long_command_goes_through_a_file(box):
    command = "echo " + "x" * 200_000 + " | wc -c"
    assert box.exec(command, timeout=60).output == b"200001\n"


# --- stopping from the loop's side -----------------------------------------------------------------------------------


def test_stop_cancels_the_waiting_call_and_raises_deadline_once(box):
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(box.exec, "sleep 3004", 600)
        assert wait_until(lambda: "sleep 3004" in processes(box))
        box.bridge.stop("stopped by the test")
        with pytest.raises(Deadline):
            waiting.result(timeout=30)
    # cleanup goes through after the stop, as oc-repl's own handling of a deadline needs
    assert box.exec("echo after", timeout=30).output == b"after\n"
    box.close()
    assert wait_until(lambda: "sleep 3004" not in processes(box))


def test_abandoned_bridge_refuses_calls_and_the_loop_kills_what_ran(loop, box):
    box.exec("sleep 3005 &", timeout=30)
    box.bridge.abandon()
    with pytest.raises(Deadline):  # the stop is still raised once
        box.exec("true", timeout=30)
    with pytest.raises(SandboxLost):
        box.exec("true", timeout=30)
    on(loop, box.aclose())
    assert "sleep 3005" not in on(loop, box.env.exec("ps -eo args")).stdout


# --- the protocols' tools and terminals, against docker: -------------------------------------------------------------


def _answers(sandbox: Any, calls: list[tuple[str, dict[str, Any]]]) -> list[str]:
    tools = builtin_tools(sandbox)
    found = []
    try:
        for name, arguments in calls:
            try:
                found.append(tools.call(name, arguments).text)
            except ToolCallError as exc:
                found.append(f"{exc.type_name}: {exc.message}")
    finally:
        tools.close_sessions()
    return [re.sub(f"(?:{re.escape(TERMINATED_EMPTY)})+", TERMINATED_EMPTY, text) for text in found]


@pytest.mark.timeout(1200)
def test_camel_tools_answer_as_they_do_in_docker(box):
    """Every scenario of the camel differential test (those without an image WORKDIR of their own), through the
    same tools on a docker-image: sandbox and on the Harbor sandbox, answer for answer. A session that ends while its
    output is collected races on both (tests/camel_scenarios.py): a scenario that differs runs again."""
    docker_box = DockerImageSandbox.from_spec(IMAGE, docker_network="none")
    differences: list[str] = []
    try:
        for name, calls, workdir in SCENARIOS:
            if workdir is not None:
                continue
            for _attempt in range(ATTEMPTS):
                with ThreadPoolExecutor(2) as pool:
                    theirs, ours = pool.map(_answers, [docker_box, box], [calls, calls])
                found = [
                    f"{name}: {tool}({arguments}):\n  docker {want!r}\n  harbor {got!r}"
                    for (tool, arguments), want, got in zip(calls, theirs, ours, strict=True)
                    # docker delivers a command's stdout and stderr as two streams, which may interleave at any byte
                    # (the Harbor sandbox keeps both in one file, in the order they were written): the same bytes in
                    # another order are the same answer
                    if want != got and Counter(want) != Counter(got)
                ]
                if not found:
                    break
            differences += found
    finally:
        docker_box.close()
    if differences:
        pytest.fail("\n".join(differences), pytrace=False)


@pytest.mark.parametrize("kind", [TmuxTerminal, InsideTmuxTerminal, PtyTerminal])
def test_terminus_terminals_show_what_they_show_in_docker(box, kind):
    docker_box = DockerImageSandbox.from_spec(IMAGE, docker_network="none")
    screens = []
    try:
        for sandbox in (docker_box, box):
            host = sandbox.exec("hostname", timeout=30).output.decode().strip()
            terminal = kind(sandbox, cwd="/tmp")
            try:
                shown = [terminal.observe()]
                for keys in ("echo hello; printf 'a\\tb\\n'\n", "python3\n", "print(6*7)\n", "C-d"):
                    terminal.run(keys, 5, time.monotonic(), observe=True)
                    shown.append(terminal.observe())
            finally:
                terminal.close()
            screens.append([(kind_, text.replace(host, "<host>")) for kind_, text in shown])
    finally:
        docker_box.close()
    assert screens[0] == screens[1]
    assert any("42" in text for _, text in screens[1])


def test_no_terminal_without_script(loop, environment, monkeypatch):
    box = on(loop, HarborSandbox.open(environment, LoopBridge(loop)))
    box.terminal = False  # as in an image without util-linux's `script`
    try:
        with pytest.raises(harbor_env.SandboxError, match="script"):
            box.spawn("cat", tty=True)
    finally:
        box.close()


# --- what a call costs here: one a command ---------------------------------------------------------------------------


def calls_made(box: HarborSandbox, work: Any) -> int:
    before = box.calls()[0]
    work()
    return box.calls()[0] - before


def test_the_terminal_waits_inside_the_environment_one_call_a_command(box, monkeypatch):
    monkeypatch.delenv("OC_REPL_TERMINAL", raising=False)
    assert box.call_latency() > 0.02  # what a call costs here decides the terminal; the setup exec measured it
    protocol = TerminusJson()
    terminals: list[Any] = []
    try:
        assert calls_made(box, lambda: terminals.append(protocol._terminal_for(box))) == 1  # its start
        (terminal,) = terminals
        assert isinstance(terminal, InsideTmuxTerminal)
        assert calls_made(box, terminal.observe) == 0  # the first screen came with the start
        for keys, shown in (("echo one-$((1+1))\n", "\none-2\n"), ("sleep 1; echo slept\n", "\nslept\n")):
            started_at = time.monotonic()

            def command(keys: str = keys, shown: str = shown, started_at: float = started_at) -> None:
                terminal.run(keys, 10.0, started_at, observe=True)
                assert shown in terminal.observe()[1] and terminal.alive()

            assert calls_made(box, command) == 1
            assert time.monotonic() - started_at < 5  # back once the shell was idle, not after 10 s
        # an empty turn: its observation and the probe the protocol takes after it are one call
        assert calls_made(box, lambda: (terminal.observe(), terminal.probe().idle)) == 1
    finally:
        protocol.close()


def test_the_discovery_comes_with_the_call_that_opens_the_sandbox(box):
    # the setup exec ran as root in the image's working directory, where Harbor's verifier runs: its answer says what
    # the tests will rely on, and the evidence's base is what is changed then
    assert box.calls()[0] == 1
    # what a trivial call costs (which decides how terminals wait) leaves out the discovery's time in that call
    assert 0 < box.call_latency() < box.calls()[1] - 0.005
    found = Evidence.opened(box, box.image_workdir, box.workdir, emit=lambda event: pytest.fail(f"it failed: {event}"))
    assert any(py.packages for py in found.discovery.pythons)  # the image's pytest was found
    assert found.snapshot().changes == {}  # an untouched environment shows nothing changed since
    # the answer is taken once: another attempt's discovery is a call of its own
    assert calls_made(box, lambda: Evidence.opened(box, box.image_workdir, box.workdir, emit=pytest.fail)) >= 1


def test_a_helper_the_model_removed_is_written_again(box):
    terminal = InsideTmuxTerminal(box, cwd="/tmp")
    try:
        terminal.run("rm -f /tmp/.oc-repl-term-*\n", 5, time.monotonic(), observe=True)
        terminal.observe()
        assert calls_made(box, lambda: terminal.run("echo back\n", 5, time.monotonic(), observe=True)) == 2
        assert "\nback\n" in terminal.observe()[1]
    finally:
        terminal.close()


def test_camel_tools_make_one_call_each(box):
    tools = builtin_tools(box)
    try:
        tools.ensure_workdir()
        run = {"id": "a", "command": "sleep 1; echo done", "block": True, "timeout": 20}
        assert calls_made(box, lambda: tools.call("shell_exec", run)) == 1
        tools.call("shell_exec", {"id": "s", "command": "sleep 30", "block": False})
        assert calls_made(box, lambda: tools.call("shell_view", {"id": "s"})) == 1
    finally:
        tools.close_sessions()
