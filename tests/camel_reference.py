"""Runs scenarios of tool calls through camel-ai's real TerminalToolkit (docker backend), for the differential test.

Started by tests/protocols/camel/test_camel_exact.py with the python of the sync's camel virtualenv (camel-ai 0.2.90,
docker, rich), as `python camel_reference.py SCENARIOS.json RESULTS.json`; it imports nothing of oc-repl. Each
scenario gets a fresh container of the image (network none), and the toolkit is built and called the way the training
harness did (`TerminalToolkit(timeout=20.0, working_directory=None, use_docker_backend=True,
docker_container_name=..., session_logs_dir=..., safe_mode=False)`, each call `await
asyncio.to_thread(partial(method, **arguments))`). What a call returns is recorded as text, what it raises as its
exception's type name and message: the test words those with the harness's own template, as oc-repl does.

One change to the toolkit's surroundings, none to the toolkit: it connects its low-level docker client to the fixed
address unix://var/run/docker.sock, while everything else (its other client, the `docker cp` it runs) follows
DOCKER_HOST; that one address is pointed at DOCKER_HOST too.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import tempfile
import uuid
from functools import partial
from typing import Any

import docker

_DEFAULT_SOCKET = "unix://var/run/docker.sock"


def follow_docker_host() -> None:
    host = os.environ.get("DOCKER_HOST")
    if not host:
        return
    base = docker.APIClient

    class APIClient(base):  # type: ignore[misc, valid-type]
        def __init__(self, base_url: str | None = None, *args: Any, **kwargs: Any) -> None:
            super().__init__(host if base_url == _DEFAULT_SOCKET else base_url, *args, **kwargs)

    docker.APIClient = APIClient


async def call(method: Any, arguments: dict[str, Any]) -> dict[str, Any]:
    try:
        result = await asyncio.to_thread(partial(method, **arguments))
    except Exception as exc:
        return {"raised": [type(exc).__name__, str(exc)]}
    return {"text": result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)}


def run_scenario(client: Any, image: str, scenario: dict[str, Any]) -> dict[str, Any]:
    from camel.toolkits import TerminalToolkit

    options: dict[str, Any] = {"network_mode": "none", "detach": True, "name": f"camel-ref-{uuid.uuid4().hex[:10]}"}
    if scenario.get("image_workdir"):
        options["working_dir"] = scenario["image_workdir"]
    container = client.containers.run(image, ["sleep", "infinity"], **options)
    try:
        logs = tempfile.mkdtemp(prefix="camel-ref-")
        toolkit = TerminalToolkit(
            timeout=20.0,
            working_directory=None,
            use_docker_backend=True,
            docker_container_name=container.name,
            session_logs_dir=logs,
            safe_mode=False,
        )
        results = []
        for name, arguments in scenario["calls"]:
            results.append(asyncio.run(call(getattr(toolkit, name), arguments)))
        toolkit.cleanup()
        container.reload()
        return {"results": results, "container": [container.id, container.name]}
    finally:
        container.remove(force=True)


def main() -> None:
    follow_docker_host()
    logging.disable(logging.CRITICAL)
    os.environ.setdefault("CAMEL_WORKDIR", tempfile.mkdtemp(prefix="camel-ref-work-"))
    with open(sys.argv[1], encoding="utf-8") as handle:
        plan = json.load(handle)
    client = docker.from_env()
    report = {scenario["name"]: run_scenario(client, plan["image"], scenario) for scenario in plan["scenarios"]}
    with open(sys.argv[2], "w", encoding="utf-8") as out:
        json.dump(report, out, ensure_ascii=False)


if __name__ == "__main__":
    main()
