"""A task's image: built once from its Dockerfile (offline: a missing base image is an error, not a pull), and the
network each container made from it gets."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oc_repl.errors import BuildError, UsageError

if TYPE_CHECKING:
    from oc_repl.tasks.model import TaskDir

BUILD_LOG_TAIL = 15  # lines of the build's output shown when it fails
_ARG_USE = re.compile(r"\$\{(\w+)\}|\$(\w+)")


def image_tag(task: TaskDir) -> str:
    """The tag a task's image is built under; a task naming a ready image uses that instead."""
    if task.dockerfile is None and task.image:
        return task.image
    return f"oc-repl-task-{re.sub(r'[^a-z0-9_.-]', '-', task.name.lower())}:latest"


def base_images(dockerfile: Path) -> list[str]:
    bases, stages, defaults, seen_from = [], set(), {}, False
    for line in dockerfile.read_text(encoding="utf-8").splitlines():
        words = line.split()
        if len(words) >= 2 and words[0].upper() == "ARG" and not seen_from:  # an ARG that FROM lines can use
            name, _, value = words[1].partition("=")
            defaults[name] = value.strip("\"'")
        if len(words) >= 2 and words[0].upper() == "FROM":
            seen_from = True
            args = [w for w in words[1:] if not w.startswith("--")]
            # The build passes no build arguments, so `FROM ${BASE}` names ARG BASE's default; an ARG without one (or
            # `${BASE:-x}`) leaves a `$`, and the build itself checks that image.
            image = _ARG_USE.sub(lambda m: defaults.get(m[1] or m[2]) or m[0], args[0]) if args else ""
            if image and image not in stages and image.lower() != "scratch" and "$" not in image:
                bases.append(image)
            if len(args) >= 3 and args[1].upper() == "AS":
                stages.add(args[2])
    return bases


def _require(client: Any, image: str, task: TaskDir, what: str) -> None:
    import docker

    try:
        client.images.get(image)
    except docker.errors.ImageNotFound as exc:
        make = (  # the examples' base image has its own maker in this repository
            ".ci/test-image.sh builds it offline"
            if image.startswith("oc-repl-test:")
            else f"docker build -t {image} ..., or docker load"
        )
        raise BuildError(
            f"task {task.name} {what} {image}, which is not available locally",
            hint=f"make {image} available to this daemon first ({make}), then run again",
        ) from exc
    except docker.errors.APIError as exc:  # e.g. a name the daemon cannot parse
        raise BuildError(f"task {task.name} {what} {image}: {exc.explanation or exc}") from exc


def build_image(task: TaskDir, pull: bool = False) -> str:
    """Build the task's Dockerfile with the Engine API within the task's build timeout; returns the image's tag."""
    import docker

    from oc_repl.sandbox.docker_container import connect

    client = connect()
    if task.dockerfile is None:
        if not task.image:
            raise UsageError(f"task {task.name} has no Dockerfile and names no image")
        _require(client, task.image, task, "runs in")
        return task.image
    if not task.dockerfile.is_file():
        raise UsageError(f"task {task.name} has no Dockerfile", hint="pass --image to use an existing image")
    if not pull:
        for base in base_images(task.dockerfile):
            _require(client, base, task, "builds FROM")
    tag = image_tag(task)
    log: list[str] = []
    deadline = time.monotonic() + task.build_timeout_sec if task.build_timeout_sec else None
    failed = f"building the image of task {task.name} failed"
    dockerfile = str(task.dockerfile.relative_to(task.context))
    try:
        for chunk in client.api.build(
            path=str(task.context), dockerfile=dockerfile, tag=tag, rm=True, pull=pull, decode=True
        ):
            log.extend(str(chunk.get("stream") or "").splitlines())
            if "error" in chunk:
                raise BuildError(f"{failed}: {chunk['error'].strip()}", hint="\n".join(log[-BUILD_LOG_TAIL:]))
            if deadline is not None and time.monotonic() > deadline:
                raise BuildError(f"{failed}: it took longer than the task's {task.build_timeout_sec:g} s")
    except docker.errors.APIError as exc:
        raise BuildError(f"{failed}: {exc.explanation or exc}") from exc
    except docker.errors.DockerException as exc:
        raise BuildError(f"{failed}: {exc}") from exc
    return tag


def task_network(task: TaskDir) -> str:
    """The network the task's container gets: none, or for a task that declares one the daemon's bridge (none on a
    daemon started without one; the run's header says which)."""
    if task.network == "none":
        return "none"
    from oc_repl.sandbox.docker_container import connect

    return "bridge" if connect().networks.list(names=["bridge"]) else "none"
