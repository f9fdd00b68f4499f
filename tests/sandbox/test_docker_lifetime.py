"""On a real dockerd: every container oc-repl creates carries a label and, unless kept, a finite
lifetime and a lease its client renews; expired ones, and those whose client died, are swept when a docker sandbox is
opened."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import suppress
from typing import Any

import docker
import pytest

from oc_repl.errors import SandboxLost
from oc_repl.sandbox.docker import DockerImageSandbox, DockerSandbox
from oc_repl.sandbox.docker_container import INIT, NOBODY, USER_LABEL
from oc_repl.sandbox.docker_lifetime import DEFAULT_LIFETIME, EXPIRES, KEPT, LABEL, LEASE, LEASED, sweep
from tests.conftest import ROOT
from tests.docker_support import DOCKER, IMAGE, TEST_LABEL

pytestmark = DOCKER


@pytest.fixture
def boxes() -> Iterator[list[DockerImageSandbox]]:
    made: list[DockerImageSandbox] = []
    yield made
    for box in made:
        box.keep = False  # kept ones too: the test is over
        box.close()


def exists(client: Any, name: str) -> bool:
    try:
        client.containers.get(name)
    except docker.errors.NotFound:
        return False
    return True


def test_created_containers_carry_a_label_and_a_finite_lifetime(docker_client: Any, boxes: list):
    started = time.time()
    boxes += [DockerImageSandbox.from_spec(IMAGE, lifetime=90), DockerImageSandbox.from_spec(IMAGE)]
    for box, seconds in zip(boxes, [90, DEFAULT_LIFETIME], strict=True):
        attrs = docker_client.api.inspect_container(box.id)
        # the first process is the image's bash, protected (docker_container.py), with the lifetime and the lease
        assert attrs["Config"]["Entrypoint"] == [INIT] and attrs["Config"]["User"] == NOBODY
        assert attrs["Config"]["Cmd"][0] == "-c" and attrs["Config"]["Cmd"][-2:] == [str(seconds), str(LEASE)]
        labels = attrs["Config"]["Labels"]
        assert labels[LABEL] == "1" and int(started) + seconds <= int(labels[EXPIRES]) <= time.time() + seconds
        assert labels[LEASED] == str(LEASE)
    kept = DockerImageSandbox.from_spec(IMAGE, keep=True, lifetime=90)
    boxes.append(kept)
    attrs = docker_client.api.inspect_container(kept.id)
    assert attrs["Config"]["Cmd"][-2:] == [str(KEPT), str(KEPT)]  # kept on purpose: no end, no expiry
    assert attrs["Config"]["Labels"] == {LABEL: "1", USER_LABEL: ""}


def running(client: Any, container_id: str) -> bool:
    import docker

    try:
        return client.api.inspect_container(container_id)["State"]["Running"]
    except docker.errors.NotFound:  # expired and swept already, by a sandbox opened meanwhile (tests run in parallel)
        return False


def test_a_container_stops_when_its_lifetime_is_over(docker_client: Any, boxes: list):
    box = DockerImageSandbox.from_spec(IMAGE, lifetime=5)
    boxes.append(box)
    box.spawn("sleep 100", tty=False)  # a channel open, and a command running, when the end comes
    deadline = time.monotonic() + 60
    while running(docker_client, box.id) and time.monotonic() < deadline:
        time.sleep(0.1)
    with pytest.raises(SandboxLost, match="lifetime ended"):
        box.exec("echo too late", timeout=30)


def test_expired_containers_are_swept_when_a_sandbox_opens(docker_client: Any):
    # "Expired" ones expire only once they are all made and started: a sandbox opened by a test running beside this
    # one sweeps too, and must not remove one between its creation and its start.
    past, future = int(time.time()) + 3, int(time.time()) + 3600
    made = {}
    for name, labels, start in [
        ("expired-running", {LABEL: "1", EXPIRES: str(past)}, True),
        ("expired-stopped", {LABEL: "1", EXPIRES: str(past)}, False),
        ("alive", {LABEL: "1", EXPIRES: str(future)}, True),
        ("kept", {LABEL: "1"}, True),
        ("someone-elses", {TEST_LABEL: "1", EXPIRES: str(past)}, True),
    ]:
        container = docker_client.containers.create(
            IMAGE,
            ["sleep", "infinity"],
            name=f"oc-repl-sweep-{name}-{uuid.uuid4().hex[:6]}",
            labels=labels,
            network_mode="none",
        )
        if start:
            container.start()
        made[name] = container
    while time.time() <= past:  # the moment of expiry, not a guess at how long anything takes
        time.sleep(0.1)
    try:
        DockerSandbox.from_spec(made["alive"].name).close()  # attaching sweeps too
        left = {name for name, container in made.items() if exists(docker_client, container.name)}
        assert left == {"alive", "kept", "someone-elses"}
    finally:
        for container in made.values():
            with suppress(docker.errors.NotFound):
                container.remove(force=True)


CLIENT = """
import sys, time
from oc_repl.sandbox.docker import DockerImageSandbox
box = DockerImageSandbox.from_spec(sys.argv[1], lease=float(sys.argv[2]))
print(box.id, flush=True)
time.sleep(3600)
"""


def test_the_container_of_a_client_killed_outright_stops_a_lease_later_and_is_swept(docker_client: Any):
    lease = 8
    client = subprocess.Popen(
        [sys.executable, "-c", CLIENT, IMAGE, str(lease)], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    assert client.stdout is not None
    container_id = client.stdout.readline().strip()
    try:
        alive_until = time.monotonic() + 2 * lease
        while time.monotonic() < alive_until:  # a living client renews its lease: the container outlives it
            assert running(docker_client, container_id) and client.poll() is None
            time.sleep(0.5)
        os.kill(client.pid, signal.SIGKILL)
        client.wait(timeout=30)
        killed = time.monotonic()
        while running(docker_client, container_id) and time.monotonic() < killed + 120:
            time.sleep(0.2)
        assert not running(docker_client, container_id)
        assert time.monotonic() - killed < lease + 60  # a lease (and a round of its loop), not the day's lifetime
        sweep(docker_client.api, time.time())
        # a sandbox another test opens meanwhile sweeps too: its removal may still be under way when this one returns
        swept = time.monotonic() + 60
        while exists(docker_client, container_id) and time.monotonic() < swept:
            time.sleep(0.2)
        assert not exists(docker_client, container_id)
    finally:
        client.kill()
        with suppress(docker.errors.APIError):  # gone already, or a removal under way
            docker_client.api.remove_container(container_id, force=True)


def test_the_lease_leaves_nothing_that_looks_like_the_agents(boxes: list):
    box = DockerImageSandbox.from_spec(IMAGE, lease=2)
    boxes.append(box)
    time.sleep(3)  # renewals and rounds of the container's own loop
    until = time.monotonic() + 4  # twenty renewals: looks meet them, and list none of them
    while time.monotonic() < until:
        assert [left for left in box.agent_processes() if not left.own] == []
    assert box.exec("echo still here", timeout=30).output.strip() == b"still here"


# What a command inside might do to end its own container early (a sandbox error is the infrastructure's, not the
# model's): signal the first process, take its sleep away, write a lease of its own where one might be kept.
ENDING_IT = (
    "for s in $(seq 1 64); do [ $s = 10 ] || kill -s $s 1 2>/dev/null; done; kill 1; rm -rf /tmp/.oc-repl-wait; "
    "for f in /tmp/.oc-repl-lease /tmp/.oc-repl-lease.wait; do rm -rf $f; echo 0 > $f; done; echo tried"
)


def test_a_command_cannot_end_its_containers_lease_while_the_client_renews_it(docker_client: Any, boxes: list):
    lease = 4
    box = DockerImageSandbox.from_spec(IMAGE, lease=lease)
    boxes.append(box)
    assert box.exec(ENDING_IT, timeout=30).output.strip().endswith(b"tried")
    until = time.monotonic() + 3 * lease + 6  # the loop looks every 5 s at most
    while time.monotonic() < until:
        assert running(docker_client, box.id)
        time.sleep(0.5)
    assert box.exec("echo still here", timeout=30).output.strip() == b"still here"
