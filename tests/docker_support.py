"""What the docker tests share: a client or a skip (a failure under CI=true), containers of the test image,
and the scripted-model helpers of the CLI runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import pytest

from oc_repl.event_read import parse_event
from tests.conftest import cli_env, default_sigint
from tests.fakeserver import call_text

IMAGE = os.environ.get("OC_REPL_TEST_IMAGE", "oc-repl-test:bookworm")
TEST_LABEL = "oc-repl-test"  # containers these tests create themselves (attach mode)
# A hostile model's command: a reward writer in a session of its own, which no kill of the command's group or session
# reaches (only the stop before the verifier does).
REWARD_WRITER = (
    "mkdir -p /logs/verifier; setsid sh -c 'while :; do echo 1 > /logs/verifier/reward.txt; done' >/dev/null 2>&1 &"
)


def docker_session() -> Iterator[Any]:
    """A docker client, or a skip (a failure under CI=true) when the daemon or the test image is missing."""
    import docker

    def unavailable(reason: str) -> None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI=true, so the docker tests may not be skipped", pytrace=False)
        pytest.skip(reason)

    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        unavailable(f"docker daemon unreachable (DOCKER_HOST={os.environ.get('DOCKER_HOST', '')}): {exc}")
    try:
        client.images.get(IMAGE)
    except docker.errors.ImageNotFound:
        unavailable(f"test image {IMAGE} is missing; .ci/test-image.sh builds it")
    yield client
    client.close()


def make_container(client: Any, start: bool = True, **options: Any) -> Any:
    """A container of our own for attach mode, as a user would start it: no network, `sleep infinity`.
    `options` go to `containers.create` (e.g. `user`, as `docker run --user` gives)."""
    name = f"oc-repl-test-{uuid.uuid4().hex[:10]}"
    container = client.containers.create(
        IMAGE, ["sleep", "infinity"], name=name, network_mode="none", labels={TEST_LABEL: "1"}, **options
    )
    if start:
        container.start()
    return container


def container_factory(client: Any) -> Iterator[Callable[..., Any]]:
    """Makes attach-mode containers, each removed when the test ends, whatever happened."""
    made: list[Any] = []

    def make(start: bool = True, **options: Any) -> Any:
        made.append(make_container(client, start, **options))
        return made[-1]

    yield make
    for container in made:
        with suppress(Exception):  # removed by the test itself
            container.remove(force=True)


# Every docker test module's marks; the fixtures below reach every test module (this module is a plugin of
# tests/conftest.py).
DOCKER = [pytest.mark.docker, pytest.mark.usefixtures("docker_client")]


@pytest.fixture(scope="module", name="docker_client")
def docker_client_fixture() -> Iterator[Any]:
    """A module's docker client."""
    yield from docker_session()


@pytest.fixture(name="own_container")
def own_container_fixture(docker_client: Any) -> Iterator[Callable[..., Any]]:
    """Attach-mode containers of the test's own (see `container_factory`)."""
    yield from container_factory(docker_client)


def live_processes(container: Any) -> list[str]:
    """Command lines of the container's processes, zombies left out: `sleep infinity` as PID 1 reaps nothing."""
    out = container.exec_run(["ps", "-eo", "stat=,args="]).output.decode()
    return [line.split(None, 1)[1] for line in out.splitlines() if line.strip() and not line.lstrip().startswith("Z")]


def wait_gone(container: Any, args: str, within: float = 3.0) -> list[str]:
    """The processes running `args`, once they are gone or `within` seconds have passed (SIGKILL is not instant)."""
    deadline = time.monotonic() + within
    while True:
        left = [p for p in live_processes(container) if p == args]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def exec_call(command: str, call_id: str = "s1", **extra: Any) -> dict:
    return {"text": call_text("shell_exec", {"id": call_id, "command": command, "block": True, **extra})}


def write_call(content: str, file_path: str) -> dict:
    return {"text": call_text("shell_write_content_to_file", {"content": content, "file_path": file_path})}


def answer(text: str) -> dict:
    return {"text": f"<think>\n\n</think>\n\n{text}"}


def cli_args(server: Any, sandbox: str, *more: str) -> list[str]:
    return ["run", "--api-base", server.url, "--sandbox", sandbox, "--retries", "0", *more]


def events_of(stdout: str) -> list[Any]:
    return [parse_event(line) for line in stdout.splitlines()]


def completed_commands(events: list[Any]) -> list[Any]:
    return [e.item for e in events if e.type == "item.completed" and e.item.type == "command_execution"]


def started_cli(args: list[str], tmp_path: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "oc_repl", *args],
        env=cli_env(tmp_path),
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
    )


def wait_for_command(transcript: Path, command: str, proc: subprocess.Popen, within: float = 30.0) -> None:
    """Block until the transcript shows `command` started (only whole lines are read; the writer flushes per event)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        text = transcript.read_text() if transcript.exists() else ""
        for line in text.splitlines(keepends=True):
            event = json.loads(line) if line.endswith("\n") else {}
            if event.get("type") == "item.started" and event["item"].get("command") == command:
                return
        if proc.poll() is not None:
            pytest.fail(f"the run ended before {command!r} started: {proc.communicate()}")
        time.sleep(0.05)
    pytest.fail(f"{command!r} never started")
