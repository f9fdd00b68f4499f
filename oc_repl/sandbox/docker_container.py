"""Reaching the docker daemon and making a container: the connection, a container's limits, its creation from an
image (with its lifetime, docker_lifetime.py). docker.py drives the container once it runs.

A container's first process holds its lifetime, and as pid 1 nothing inside may signal it; it must not be traceable
either (a process that takes it over with ptrace and execve would outlive every kill of what the agent left). So where
the image has no ENTRYPOINT of its own and has bash, the first process is that bash, copied before the container starts
to a file its user may run but not read (INIT), run as `nobody`: the kernel then makes it not dumpable, so no process in
the container, root included, can trace it, re-execute it or open its memory or descriptors (no container process
holds CAP_SYS_PTRACE). Commands run as the image's own user (USER_LABEL), not as the container's.
"""

from __future__ import annotations

import io
import os
import posixpath
import tarfile
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


INIT = "/.oc-repl-init"
NOBODY = "65534:65534"
USER_LABEL = "oc-repl.user"  # the user commands run as (the image's USER, "" for its default): set on protected ones


def _program(container: Any, path: str, depth: int = 0) -> bytes | None:
    """The content of an executable in a container not started yet, links followed (within its own filesystem)."""
    import docker

    try:
        stream, _stat = container.get_archive(path)
    except docker.errors.APIError:
        return None
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
        member = tar.next()
        if member is None:
            return None
        if member.issym() and depth < 4:
            return _program(container, posixpath.join(posixpath.dirname(path), member.linkname), depth + 1)
        data = tar.extractfile(member) if member.isfile() else None
        return data.read() if data is not None else None


def _install_init(container: Any) -> bool:
    """Put the image's bash at INIT, executable by anyone and readable by no one but root; False without bash."""
    program = _program(container, "/usr/bin/bash") or _program(container, "/bin/bash")
    if program is None:
        return False
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(INIT.lstrip("/"))
        info.size, info.mode, info.uid, info.gid = len(program), 0o111, 0, 0
        tar.addfile(info, io.BytesIO(program))
    container.put_archive("/", buf.getvalue())
    return True


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
    options = {"detach": True, "network_mode": network or "none", **limits}
    try:
        config = client.images.get(image).attrs.get("Config") or {}
        if not config.get("Entrypoint"):
            own = {**labels, USER_LABEL: config.get("User") or ""}
            name = f"oc-repl-{uuid.uuid4().hex[:10]}"
            made = client.containers.create(
                image, docker_lifetime.protected(own), entrypoint=[INIT], user=NOBODY, name=name, labels=own, **options
            )
            if _install_init(made):
                return made
            made.remove(force=True)  # no bash: the first process is the image's own sleep, as root
        return client.containers.create(
            image, command, name=f"oc-repl-{uuid.uuid4().hex[:10]}", labels=labels, **options
        )
    except docker.errors.ImageNotFound as exc:
        raise SandboxError(f"image {image!r} not found", hint="build it first, e.g. docker build -t NAME DIR") from exc
    except docker.errors.APIError as exc:
        raise SandboxError(f"cannot create a container from {image!r}: {exc.explanation or exc}") from exc
