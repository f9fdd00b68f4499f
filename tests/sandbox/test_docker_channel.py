"""The persistent channel into a container on a real dockerd: what a command sees, timeouts, output, the
fallback once the channel breaks; background children, and long commands
on both paths, the channel and one exec per command."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import docker
import pytest

from oc_repl.sandbox.docker import DockerSandbox
from oc_repl.sandbox.docker_channel import ChannelProcess
from oc_repl.sandbox.docker_exec import EXIT_GRACE, DockerProcess
from tests.docker_support import DOCKER, live_processes, wait_gone

pytestmark = DOCKER


@pytest.fixture
def container(own_container: Callable[..., Any]) -> Any:
    return own_container()


def sandbox(client: Any, container: Any, channel: bool = True, **options: Any) -> DockerSandbox:
    box = DockerSandbox(client, container, **options)
    box.channels.broken = not channel  # a broken pool is exactly the fallback: one exec per command
    return box


@pytest.fixture
def boxes(docker_client: Any, container: Any) -> Iterator[dict[str, DockerSandbox]]:
    """The same container through the channel and through one exec per command."""
    made = {"channel": sandbox(docker_client, container), "exec": sandbox(docker_client, container, channel=False)}
    yield made
    for box in made.values():
        box.close()


def server_pids(container: Any) -> list[str]:
    """The channel servers in the container: each leads its session, unlike the children it forks for a moment."""
    out = container.exec_run(["ps", "-eo", "pid=,sid=,args="]).output.decode()
    rows = [line.split(None, 2) for line in out.splitlines()]
    return [pid for pid, sid, args in rows if pid == sid and "oc-repl-channel" in args]


def launchers(container: Any) -> list[str]:
    return [args for args in live_processes(container) if "oc-repl-launch" in args]


def via_channel(box: DockerSandbox) -> bool:
    proc = box.spawn("true", tty=False)
    assert proc.wait(30)
    return isinstance(proc, ChannelProcess)


def until(check: Callable[[], Any], within: float = 10.0) -> Any:
    deadline = time.monotonic() + within
    while not (result := check()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return result


# --- what a command sees ---------------------------------------------------------------------------------------------

PROBE = r"""env | sort
grep -E '^Sig(Blk|Ign)' /proc/self/status
ls /proc/self/fd | sort -n | tr '\n' ' '; echo
read -r s < /proc/$$/stat; set -- ${s##*) }; [ "$3" = $$ ] && [ "$4" = $$ ] && echo leads its session and group
echo "$0 $# $- [$BASH_ARGV0]"; pwd; umask; id; test -t 0 || echo stdin is no terminal; cat; echo read done
"""


def test_a_channel_command_sees_what_an_exec_of_its_own_sees(boxes: dict[str, DockerSandbox]):
    assert via_channel(boxes["channel"]) and not via_channel(boxes["exec"])
    outputs = {}
    for name, box in boxes.items():
        result = box.exec(PROBE, timeout=30, cwd="/tmp")
        outputs[name] = result.output.decode()
        assert result.exit_code == 0 and "leads its session and group" in outputs[name], outputs[name]
    # ls names the fds only: an exec of its own has stdout and stderr on two pipes, the channel both on one FIFO
    assert outputs["channel"] == outputs["exec"], outputs
    assert "PWD=/tmp\n" in outputs["channel"] and "SHLVL=1\n" in outputs["channel"] and "OLDPWD" not in outputs["exec"]


def test_an_odd_container_environment_reaches_commands_unchanged(docker_client: Any, own_container: Any):
    """Names the server's own shell uses or sets, and names no shell can hold, pass as an exec would pass them."""
    odd = ["SHLVL=5", "PWD=/opt", "OLDPWD=/srv", "LC_ALL=C.UTF-8", "F=f", "v=v", "n=n", "A.B=1", "BASH_ENV=/etc/be"]
    container = own_container(environment=odd)
    # every `bash -c` reads BASH_ENV; this one would also end a server that read it
    container.exec_run(["sh", "-c", "echo 'echo from BASH_ENV; [ \"$0\" = oc-repl-channel ] && exit' > /etc/be"])
    boxes = [sandbox(docker_client, container), sandbox(docker_client, container, channel=False)]
    try:
        outputs = [box.exec("env | sort", timeout=30, cwd="/tmp").output for box in boxes]
        assert via_channel(boxes[0]) and outputs[0] == outputs[1], outputs
        assert outputs[0].startswith(b"from BASH_ENV\n") and b"SHLVL=6\n" in outputs[0] and b"A.B=1\n" in outputs[0]
    finally:
        for box in boxes:
            box.close()


def test_environment_working_directory_and_status_per_command(boxes: dict[str, DockerSandbox]):
    box = boxes["channel"]
    proc = box.spawn('echo "$FOO|$TERM"; pwd; exit 9', tty=False, cwd="/usr", env={"FOO": "a b=c"})
    assert isinstance(proc, ChannelProcess) and proc.wait(30)
    assert proc.read_available() == b"a b=c|dumb\n/usr\n" and proc.exit_code == 9
    assert box.exec("pwd; echo $FOO", timeout=30).output == b"/workspace\n\n"  # nothing carried over
    # `$_` before the first command is a plain `bash -c`'s (an exec of its own shows its pid prefix's instead)
    assert box.exec('echo "[$_]"', timeout=30).output == b"[bash]\n"
    # a working directory that does not exist is the daemon's to report, as it always was
    missing = [b.exec("pwd", timeout=30, cwd="/nonexistent") for b in boxes.values()]
    assert missing[0] == missing[1] and missing[0].exit_code == 126
    # so is a command that cannot be an argument at all
    nul = [b.exec("echo a\0b", timeout=30) for b in boxes.values()]
    assert nul[0] == nul[1] and nul[0].exit_code != 0
    assert via_channel(box)  # none of that broke the channel


def test_stdout_and_stderr_arrive_merged_in_order_binary_and_capped(docker_client: Any, container: Any):
    box = sandbox(docker_client, container, output_limit=1000)
    try:
        interleaved = box.exec("for i in 1 2 3; do echo out$i; echo err$i >&2; done", timeout=30)
        assert interleaved.output == b"out1\nerr1\nout2\nerr2\nout3\nerr3\n"
        assert box.exec(r"printf '\0\001\377\036x\036'", timeout=30).output == b"\0\1\xff\x1ex\x1e"
        big = box.exec("head -c 100000 /dev/zero | tr '\\0' a; echo; echo tail", timeout=30)
        assert big.dropped == 100006 - 1000 and big.output.startswith(b"a" * 500)
        assert big.output.endswith(b"a\ntail\n") and b"bytes of output dropped" in big.output
    finally:
        box.close()


def test_output_that_looks_like_the_protocol_does_not_end_a_command(boxes: dict[str, DockerSandbox]):
    box = boxes["channel"]
    # records of a made-up nonce, and one of the real nonce's shape but not its value
    fake = r"printf '\036%s end 0\036\n' 0123456789abcdef0123456789abcdef; printf '\036x ok 1\036\n'"
    result = box.exec(f"{fake}; sleep 0.3; echo after", timeout=30)
    assert result.output.endswith(b"after\n") and result.output.count(b"\x1e") == 4 and result.exit_code == 0


# --- timeouts and what commands leave behind -------------------------------------------------------------------------


def test_a_timed_out_command_is_killed_inside_the_container(boxes: dict[str, DockerSandbox], container: Any):
    box = boxes["channel"]
    assert via_channel(box)
    started = time.monotonic()
    result = box.exec("echo begun; sleep 201 & sleep 201", timeout=0.5)
    assert result.timed_out and result.exit_code is None and result.output == b"begun\n"
    assert time.monotonic() - started < 10
    assert wait_gone(container, "sleep 201") == []  # the whole group, background child included
    assert via_channel(box) and len(server_pids(container)) == 1  # the channel goes on, no second one needed


def test_a_command_that_outruns_its_wait_keeps_running_beside_new_ones(boxes: dict[str, DockerSandbox]):
    box = boxes["channel"]
    slow = box.spawn("sleep 1; echo slow done", tty=False)
    assert isinstance(slow, ChannelProcess) and not slow.wait(0.1)
    quick = box.exec("echo quick", timeout=30)  # a second channel takes it
    assert quick.output == b"quick\n"
    assert slow.wait(30) and slow.read_available() == b"slow done\n" and slow.exit_code == 0


def test_background_child_does_not_cost_the_timeout(boxes: dict[str, DockerSandbox], container: Any):
    for name, box in boxes.items():
        started = time.monotonic()
        result = box.exec("sleep 203 & echo started", timeout=60)
        assert result.output == b"started\n" and result.exit_code == 0, name
        assert time.monotonic() - started < 5, name  # not the 60 s timeout
        assert "sleep 203" in live_processes(container)  # the child lives on, as it would anywhere
    # a child that prints after the grace is not seen, and nothing of it reaches the next command (which runs while
    # it prints): it prints a second after the grace has ended, and the next command lasts two seconds beyond that
    box = boxes["channel"]
    late = EXIT_GRACE + 1
    assert box.exec(f"(sleep {late:g}; echo late) & echo first", timeout=60).output == b"first\n"
    assert box.exec(f"sleep {late + 2:g}; echo next", timeout=60).output == b"next\n"
    for box in boxes.values():
        box.close()
    assert wait_gone(container, "sleep 203") == []  # close() still finds what commands left behind


def test_a_300_kb_command_runs(boxes: dict[str, DockerSandbox], container: Any):
    payload = "x" * 300_000
    for name, box in boxes.items():
        result = box.exec(f"printf %s {payload} | wc -c; echo $0 $#", timeout=60)
        assert result.output == b"300000\nbash 0\n" and result.exit_code == 0, (name, result)
    leftovers = container.exec_run(["find", "/tmp/.oc-repl", "-type", "f", "-path", "*/c/*"]).output
    assert leftovers == b""  # the command files removed themselves once read


# --- the fallback --------------------------------------------------------------------------------------------------


def test_commands_fall_back_to_one_exec_each_once_the_channel_is_killed(boxes: dict[str, DockerSandbox], container):
    box = boxes["channel"]
    assert via_channel(box)
    [pid] = server_pids(container)
    container.exec_run(["kill", "-KILL", pid])
    assert box.exec("echo still here", timeout=30).output == b"still here\n"
    assert not via_channel(box)
    timed = box.exec("sleep 205", timeout=0.5)  # timeouts still kill through the fallback
    assert timed.timed_out and wait_gone(container, "sleep 205") == []


def test_commands_fall_back_after_the_container_restarts(boxes: dict[str, DockerSandbox], container: Any):
    box = boxes["channel"]
    assert via_channel(box)
    container.restart(timeout=0)
    assert box.exec("echo back", timeout=30).output == b"back\n"
    assert not via_channel(box)


def test_a_killed_relay_or_launcher_is_replaced_before_the_next_command(
    boxes: dict[str, DockerSandbox], container: Any
):
    box = boxes["channel"]
    assert via_channel(box)
    assert until(lambda: "cat" in live_processes(container))  # the next command's relay, made ready in advance
    container.exec_run(["pkill", "-KILL", "-x", "cat"])
    assert wait_gone(container, "cat") == []
    assert box.exec("echo relayed", timeout=30).output == b"relayed\n"
    # the same for the shell made ready to run the next command
    assert until(lambda: launchers(container))
    container.exec_run(["pkill", "-KILL", "-f", "oc-repl-launch"])
    assert until(lambda: not launchers(container))
    assert box.exec("echo launched", timeout=30).output == b"launched\n"
    assert via_channel(box) and len(server_pids(container)) == 1


def test_a_channel_killed_under_a_running_command_reports_it_ended(boxes: dict[str, DockerSandbox], container):
    box = boxes["channel"]
    proc = box.spawn("sleep 1; echo finished", tty=False)
    assert isinstance(proc, ChannelProcess)
    [pid] = until(lambda: server_pids(container))
    container.exec_run(["kill", "-KILL", pid])
    assert proc.wait(30) and proc.exit_code is None  # its status went with the server; its output did not
    assert proc.read_available() == b"finished\n"
    assert box.exec("echo next", timeout=30).output == b"next\n" and not via_channel(box)


def test_every_command_is_recorded_however_quickly_it_ends(docker_client: Any, container: Any):
    """close() finds what a command left behind through its pid file, so even a command that is over at once must
    have written one."""
    box = sandbox(docker_client, container)
    tokens = []
    for i in range(20):
        proc = box.spawn(f"sleep {400 + i} >/dev/null 2>&1 &", tty=False)
        assert isinstance(proc, ChannelProcess) and proc.wait(30) and proc.exit_code == 0
        tokens.append(proc.token)
    recorded = container.exec_run(["ls", box.pid_dir]).output.decode().split()
    assert set(tokens) <= set(recorded)
    box.close()
    for i in range(20):
        assert wait_gone(container, f"sleep {400 + i}") == []


def test_close_leaves_no_channel_behind(docker_client: Any, container: Any):
    box = sandbox(docker_client, container)
    box.exec("true", timeout=30)
    box.spawn("sleep 206 > /dev/null & sleep 206", tty=False)  # keeps a second channel busy
    box.exec("sleep 207 & echo detached", timeout=30)  # leaves a reader of its output behind
    assert len(server_pids(container)) == 2
    box.close()
    assert until(
        lambda: not server_pids(container) and not launchers(container) and "cat" not in live_processes(container)
    ), live_processes(container)
    assert wait_gone(container, "sleep 206") == [] and wait_gone(container, "sleep 207") == []


def test_commands_for_another_user_and_terminals_get_an_exec_each(docker_client: Any, own_container: Any):
    container = own_container(user="1000:1000")
    box = sandbox(docker_client, container)
    try:
        assert via_channel(box)
        assert box.exec("id -u", timeout=30).output == b"1000\n"
        assert isinstance(box.spawn("id -u", tty=False, user="root"), DockerProcess)
        assert box.exec("id -u", timeout=30, user="root").output == b"0\n"
        assert isinstance(box.spawn("cat", tty=True), DockerProcess)
    finally:
        box.close()


def test_quiet_connections_outlive_the_docker_client_timeout(container: Any):
    """The docker client's request timeout stays on the sockets it hands over; a quiet session or channel must not
    be cut off by it."""
    client = docker.from_env(timeout=2)
    box = sandbox(client, container)
    try:
        assert box.exec("sleep 3; echo quiet", timeout=30).output == b"quiet\n"
        assert via_channel(box)
        session = box.spawn("sleep 3; echo late", tty=True)
        assert session.wait(30) and b"late" in session.read_available()
    finally:
        box.close()
        client.close()
