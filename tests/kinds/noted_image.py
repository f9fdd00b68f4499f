"""A sandbox kind: a container made afresh from an image (as docker-image: makes one), holding a note of one
setting's words at /NOTE, so a task's check can tell it opened there."""

from __future__ import annotations

import shlex
from typing import Any

from oc_repl.rows import FILE, FLAG, row
from oc_repl.sandbox.docker import DockerImageSandbox
from oc_repl.sandbox.kinds import CREATED_OPTIONS, SandboxKind


class NotedImageSandbox(DockerImageSandbox):
    @classmethod
    def from_spec(cls, rest: str, image_note: str | None = None, **opts: Any) -> NotedImageSandbox:
        box = super().from_spec(rest, **opts)
        box.spec = f"noted-image:{rest}"
        box.exec(f"printf %s {shlex.quote(image_note or 'no note')} > /NOTE", timeout=30)
        return box  # type: ignore[return-value]


KIND = SandboxKind(
    "noted-image",
    "tests.kinds.noted_image:NotedImageSandbox",
    "noted-image:<image>",
    fresh=True,
    from_image=True,
    options=(row("image_note", "str", None, "noted-image: the note at /NOTE", FLAG, FILE), *CREATED_OPTIONS),
    takes=("workdir", "max_processes", "memory_mb", "lifetime"),
    doctor="oc_repl.sandbox.checks:docker_check",  # it needs what docker-image: needs
)
