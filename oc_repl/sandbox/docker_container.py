"""Reaching the docker daemon and making a container: the connection, a container's limits, its creation from an
image (with its lifetime, docker_lifetime.py). docker.py drives the container once it runs."""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

from oc_repl.errors import SandboxError
from oc_repl.sandbox import docker_lifetime


def connect() -> Any:
    import docker

    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        # Name the variable itself: a wrong DOCKER_HOST is the usual cause, and the user must know where to look.
        host = os.environ.get("DOCKER_HOST")
        where = f"DOCKER_HOST={host}" if host else "unix:///var/run/docker.sock (DOCKER_HOST is not set)"
        raise SandboxError(
            f"cannot reach the docker daemon at {where}: {exc}",
            hint="start dockerd, or point DOCKER_HOST at the daemon's socket",
        ) from exc
    return client


def container_limits(max_processes: int | None, memory_mb: int | None, cpus: float | None) -> dict[str, Any]:
    """The Engine API's limits for a container: processes, memory with no swap beyond it, CPUs."""
    limits: dict[str, Any] = {}
    if max_processes:
        limits["pids_limit"] = max_processes
    if memory_mb:
        limits.update(mem_limit=f"{memory_mb}m", memswap_limit=f"{memory_mb}m")
    if cpus:
        limits["nano_cpus"] = int(cpus * 1e9)
    return limits


def create_container(
    client: Any,
    image: str,
    network: str | None,
    keep: bool,
    lifetime: float | None,
    limits: dict[str, Any],
    lease: float = docker_lifetime.LEASE,
) -> Any:
    """A new container (created, not started) from `image`, once the expired ones are swept away."""
    import docker

    now = time.time()
    docker_lifetime.sweep(client.api, now)
    command, labels = docker_lifetime.creation(lifetime, keep, now, lease)
    try:
        return client.containers.create(
            image,
            command,
            detach=True,
            network_mode=network or "none",
            name=f"oc-repl-{uuid.uuid4().hex[:10]}",
            labels=labels,
            **limits,
        )
    except docker.errors.ImageNotFound as exc:
        raise SandboxError(f"image {image!r} not found", hint="build it first, e.g. docker build -t NAME DIR") from exc
    except docker.errors.APIError as exc:
        raise SandboxError(f"cannot create a container from {image!r}: {exc.explanation or exc}") from exc
