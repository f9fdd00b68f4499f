"""On a real dockerd: the network and the limits of every container oc-repl creates (`docker-image:` sandboxes and
task containers) are what the run's header and `thread.started` say, seen from inside the container; an attached
container keeps its own, and the header says they are its own."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.bench_scripts import TASKS
from tests.conftest import run_cli
from tests.docker_support import (  # the fixtures too: docker_client, own_container
    IMAGE,
    answer,
    cli_args,
    completed_commands,
    events_of,
    exec_call,
)

MB = 1 << 20
# What the container's cgroups hold, v2 or v1: its process limit, its memory limit, and its swap beyond that (v2:
# memory.swap.max, 0 for none; v1: memory and swap together, equal to the memory limit for none).
PROBE = (
    "ls /sys/class/net | tr '\\n' ' '; echo; "
    "cat /sys/fs/cgroup/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids/pids.max; "
    "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes; "
    "cat /sys/fs/cgroup/memory.swap.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.memsw.limit_in_bytes"
)


pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("docker_client")]


@pytest.fixture
def own_network(docker_client: Any) -> Iterator[str]:
    """A network of the test's own; internal, so it reaches nothing outside the daemon."""
    network = docker_client.networks.create(f"oc-repl-test-{uuid.uuid4().hex[:8]}", driver="bridge", internal=True)
    yield network.name
    network.remove()


def probed(proc: Any) -> tuple[Any, dict[str, Any]]:
    """The run's thread.started and what the probe found inside: interfaces, pids, memory, swap."""
    assert proc.returncode in (0, 1), proc.stderr
    events = events_of(proc.stdout)
    interfaces, pids, memory, swap = completed_commands(events)[0].aggregated_output.strip().split("\n")
    return events[0], {"interfaces": interfaces.split(), "pids": pids, "memory": int(memory), "swap": swap}


def no_swap_beyond(found: dict[str, Any]) -> bool:
    return found["swap"] in ("0", str(found["memory"]))


def run_probe(serve: Any, tmp_path: Any, sandbox: str, *more: str) -> Any:
    server = serve({"replies": [exec_call(PROBE), answer("Seen.")]})
    return run_cli(cli_args(server, sandbox, "--json", *more, "look around"), tmp_path)


def test_a_created_container_has_no_network_and_the_default_limits(serve, tmp_path):
    started, found = probed(run_probe(serve, tmp_path, f"docker-image:{IMAGE}"))
    assert found["interfaces"] == ["lo"]
    assert found["pids"] == "4096" and found["memory"] == 4096 * MB and no_swap_beyond(found)
    iso = started.isolation
    assert (iso.confinement, iso.network, iso.limits) == ("container", "none", "oc-repl")
    assert (iso.max_processes, iso.memory_mb) == (4096, 4096)


def test_the_header_states_a_created_containers_network_and_limits(serve, tmp_path):
    server = serve({"replies": [answer("Nothing to do.")]})
    proc = run_cli(
        cli_args(server, f"docker-image:{IMAGE}", "--max-processes", "64", "--memory-mb", "256", "hi"), tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert "sandbox: in a container · network none · limits: 64 processes, 256 MB memory, swap included" in proc.stderr


def test_the_limits_given_are_the_limits_inside(serve, tmp_path):
    started, found = probed(
        run_probe(serve, tmp_path, f"docker-image:{IMAGE}", "--max-processes", "64", "--memory-mb", "256")
    )
    assert found["pids"] == "64" and found["memory"] == 256 * MB and no_swap_beyond(found)
    assert (started.isolation.max_processes, started.isolation.memory_mb) == (64, 256)


def test_docker_network_puts_a_created_container_on_that_network(serve, tmp_path, own_network):
    started, found = probed(run_probe(serve, tmp_path, f"docker-image:{IMAGE}", "--docker-network", own_network))
    assert sorted(found["interfaces"]) == ["eth0", "lo"]
    assert started.isolation.network == own_network


def test_an_attached_container_keeps_its_own_limits_and_the_header_says_whose(serve, tmp_path, own_container):
    container = own_container(pids_limit=100, mem_limit="300m")
    started, found = probed(run_probe(serve, tmp_path, f"docker:{container.name}", "--memory-mb", "128"))
    assert found["pids"] == "100" and found["memory"] == 300 * MB
    iso = started.isolation
    assert (iso.limits, iso.max_processes, iso.memory_mb, iso.network) == ("container", 100, 300, "none")
    container.reload()
    assert container.attrs["HostConfig"]["PidsLimit"] == 100 and container.attrs["HostConfig"]["Memory"] == 300 * MB
    server = serve({"replies": [answer("Nothing to do.")]})
    proc = run_cli(cli_args(server, f"docker:{container.name}", "hi"), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "sandbox: in a container · network none · limits: the container's own (100 processes, 300 MB memory)" in (
        proc.stderr
    )


def test_a_terminal_bench_task_without_a_network_and_with_oc_repls_limits(serve, tmp_path):
    # write-greeting's docker-compose.yaml says network_mode: none; the format names no memory, so oc-repl's holds
    server = serve({"replies": [exec_call(PROBE), answer("Seen.")]})
    args = ["run", "--api-base", server.url, "--retries", "0", "--json", "--task", str(TASKS / "write-greeting")]
    started, found = probed(run_cli([*args, "--memory-mb", "512"], tmp_path, timeout=120))
    assert found["interfaces"] == ["lo"] and started.isolation.network == "none"
    assert found["pids"] == "4096" and found["memory"] == 512 * MB and no_swap_beyond(found)


def test_a_harbor_tasks_own_memory_and_cpus_win_and_docker_network_chooses(serve, tmp_path, own_network):
    server = serve({"replies": [exec_call(PROBE), answer("Seen.")]})
    args = ["run", "--api-base", server.url, "--retries", "0", "--json", "--task", str(TASKS / "count-words")]
    more = ["--memory-mb", "2048", "--max-processes", "200", "--docker-network", own_network]
    started, found = probed(run_cli([*args, *more], tmp_path, timeout=120))
    assert found["pids"] == "200" and found["memory"] == 512 * MB and no_swap_beyond(found)  # memory_mb = 512
    assert sorted(found["interfaces"]) == ["eth0", "lo"]
    iso = started.isolation
    assert (iso.network, iso.max_processes, iso.memory_mb, iso.cpus) == (own_network, 200, 512, 1.0)
