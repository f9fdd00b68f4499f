"""oc-repl's host helper on real containers: the sealed verifier runs beside what the agent left with its own files,
out of its processes' reach, with what a `docker exec` of the container gets; the container's change set, processes and
files are read from outside it; and everything the agent left ends after the verifier.

Needs root beside the docker daemon (the helper enters a container's namespaces itself) and the test image.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from oc_repl.sandbox.docker import DockerImageSandbox
from oc_repl.types import VerifierJob
from tests.docker_support import DOCKER, IMAGE

pytestmark = [*DOCKER, pytest.mark.skipif(os.geteuid() != 0, reason="the host helper needs root")]


@pytest.fixture
def box() -> Iterator[DockerImageSandbox]:
    sandbox = DockerImageSandbox.from_spec(IMAGE)
    assert sandbox.host is not None, sandbox.unsealed_why
    yield sandbox
    sandbox.close()


def job(command: str, **more: Any) -> VerifierJob:
    return VerifierJob(**{"command": command, "cwd": "/", "timeout": 60, "user": "root", **more})


def test_the_verifier_has_its_own_tests_and_the_agents_processes_cannot_look_into_it(box):
    box.exec("mkdir -p /tests && echo agent > /tests/planted", timeout=30)
    probe = (
        "p=$(pgrep -x sleep -n) && cat /proc/$p/root/tests/mine; "
        "python3 -c 'import ctypes, os, sys; r = ctypes.CDLL(None, use_errno=True).ptrace(16, int(sys.argv[1]), 0, 0);"
        ' print("attach", r, os.strerror(ctypes.get_errno()))\' $p'
    )
    box.spawn(f"sleep 1; {{ {probe}; }} > /tmp/probe.txt 2>&1", tty=False)  # the agent's, beside the verifier
    run = box.run_verifier(
        job(
            "ls /tests; grep -E 'Seccomp|CapPrm' /proc/self/status; sleep 3050",
            files=[("/tests/mine", b"v", 0o644)],
            private=["/tests"],
            timeout=4,
        )
    )
    assert run.sealed and run.timed_out
    listing = run.output.decode()
    assert "mine" in listing and "planted" not in listing  # its own /tests, not the container's
    assert "Seccomp:\t2" in listing  # the container's filters
    assert box.exec("ls /tests", timeout=30).output == b"planted\n"  # the container's /tests, untouched
    found = box.exec("cat /tmp/probe.txt", timeout=30).output.decode()
    assert "/root/tests/mine: Permission denied" in found and "attach -1 Operation not permitted" in found


def test_the_change_set_walked_from_the_host_is_the_daemons_diff(box):
    box.exec(
        "mkdir -p /app/new && echo x > /app/new/f && rm /etc/issue && echo z >> /etc/profile && "
        "ln -s /etc/passwd /app/link && rm -rf /usr/share/doc/bash && touch /usr/share/doc/x",
        timeout=30,
    )
    kinds = {0: "changed", 1: "created", 2: "removed"}
    daemon = sorted((d["Path"], kinds[d["Kind"]]) for d in box.api.diff(box.id))
    helper = sorted((c.path, c.what) for c in box.look().changes())  # type: ignore[union-attr]
    assert helper == daemon and ("/etc/issue", "removed") in helper and ("/app/new/f", "created") in helper


def test_a_link_is_read_inside_the_container_never_on_the_host(box):
    box.exec("ln -s /etc/hostname /app-host-name", timeout=30)
    facts = box.look().files(["/app-host-name"])["/app-host-name"]  # type: ignore[union-attr]
    assert facts.link == "/etc/hostname" and facts.target == "/etc/hostname"
    inside = box.exec("cat /etc/hostname", timeout=30).output.strip()
    assert box.look().read(["/etc/hostname"])["/etc/hostname"].strip() == inside  # type: ignore[union-attr,index]


def wait_for(check: Any, within: float = 30) -> bool:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_a_process_whose_first_thread_ended_is_listed_and_every_process_the_agent_left_ends(box):
    script = (  # its other thread says once the first one has ended
        "import ctypes, os, threading, time, platform\n"
        "def wait():\n"
        "    leader = '/proc/self/task/%d/stat' % os.getpid()\n"
        "    while open(leader).read().rsplit(') ', 1)[1][0] != 'Z': time.sleep(0.01)\n"
        "    open('/tmp/z-ready', 'w').close(); time.sleep(600)\n"
        "threading.Thread(target=wait).start()\n"
        "ctypes.CDLL(None).syscall(60 if platform.machine() == 'x86_64' else 93, 0)\n"
    )
    box.write_file("/opt/z.py", script.encode())
    box.exec(
        "(setsid nohup python3 /opt/z.py >/dev/null 2>&1 &); (setsid nohup sleep 3060 >/dev/null 2>&1 &)", timeout=30
    )
    assert wait_for(lambda: box.exec("test -e /tmp/z-ready", timeout=30).exit_code == 0)
    assert wait_for(lambda: len([p for p in box.agent_processes() if not p.own]) >= 2)
    left = {p.command: p for p in box.agent_processes() if not p.own}
    assert left["python3 /opt/z.py"].threads == 2 and "sleep 3060" in left
    assert box.end_agent_processes() == 0
    assert [p for p in box.agent_processes() if not p.own] == []
    assert box.exec("echo the container lives on", timeout=30).output == b"the container lives on\n"


def test_what_the_verifier_opens_runs_and_writes_is_seen(box):
    box.exec("printf '#!/bin/sh\\necho ran\\n' > /usr/local/bin/mine && chmod +x /usr/local/bin/mine", timeout=30)
    run = box.run_verifier(job("mine; python3 -c 'import textwrap' ; echo w > /tmp/w.txt"))
    assert run.opened is not None and run.written is not None
    opened = {path: outside for _d, _i, path, outside in run.opened}
    assert opened.get("/usr/local/bin/mine") is True  # run by the script itself, not by pytest's tests
    assert any(p.endswith("textwrap.cpython-311.pyc") or p.endswith("textwrap.py") for p in opened)
    written = box.look().files(["/tmp/w.txt"])["/tmp/w.txt"]  # type: ignore[union-attr]
    assert (written.dev, written.ino) in {tuple(w) for w in run.written}


def test_a_command_not_yet_started_by_its_channel_is_the_agents(box):
    box.exec("true", timeout=30)  # a channel, with its launcher waiting for the next command (made meanwhile)
    launcher = "pgrep -f '^(/[^ ]*/)?(setsid )?bash --posix -c IFS= read .* oc-repl-launch'"
    held = box.exec(  # held before it has read its command
        f"for i in $(seq 300); do p=$({launcher}) && break; sleep 0.1; done; kill -STOP $p", timeout=60, user="root"
    )
    assert held.exit_code == 0, held.output
    box.spawn("sleep 3070", tty=False)
    left = [p for p in box.agent_processes() if not p.own]
    assert [p.command for p in left if "oc-repl-launch" in p.command], left
    box.exec(f"kill -CONT $({launcher})", timeout=30, user="root")
    assert wait_for(lambda: "sleep 3070" in [p.command for p in box.agent_processes() if not p.own])


def test_an_exec_of_oc_repls_own_running_meanwhile_is_not_taken_for_the_agents(box):
    own = threading.Thread(target=box.run_quick, args=("sleep 2",))
    own.start()
    assert wait_for(lambda: any("sleep 2" in " ".join(p) for p in box.api.top(box.id)["Processes"]))
    assert [p.command for p in box.agent_processes() if not p.own] == []  # it waited for the exec to end
    own.join(30)
    assert box.exec("echo the container lives on", timeout=30).output == b"the container lives on\n"


def _helper_servers() -> set[int]:
    """This process's own host helpers (never another client's: other tests' requests would die with theirs)."""
    found = set()
    for entry in Path("/proc").iterdir():
        try:
            if not entry.name.isdigit() or b"oc_repl.hostns\0--serve" not in (entry / "cmdline").read_bytes():
                continue
            if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == os.getpid():
                found.add(int(entry.name))
        except (OSError, IndexError, ValueError):  # ended meanwhile
            continue
    return found


def test_a_host_helper_that_ended_is_started_again_at_the_next_request(box):
    facts = box.look().read(["/etc/hostname"])  # type: ignore[union-attr]
    before = _helper_servers()
    assert before
    for pid in before:
        os.kill(pid, 9)
    deadline = time.monotonic() + 60
    while _helper_servers() & before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert box.look().read(["/etc/hostname"]) == facts  # type: ignore[union-attr]
    assert _helper_servers() - before
