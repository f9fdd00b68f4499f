"""The sandbox kinds, as the core sees them: plain data, cheap to import. A spec is `scheme:target`; each kind names
its driver ("module:Class", imported only when chosen, with `options_from(settings)` and `from_spec(target, **opts)`)
and says what the core must know of it, so no part outside the drivers branches on a scheme."""

from __future__ import annotations

from dataclasses import dataclass

from oc_repl.errors import UsageError


@dataclass(frozen=True)
class SandboxKind:
    scheme: str
    driver: str  # "module:Class"
    form: str  # how a spec of this kind is written
    on_host: bool = False  # model-chosen commands run on this machine: consent first, and the shell asks each time
    fresh: bool = False  # each open starts afresh (a new container), so attempts can repeat in it
    from_image: bool = False  # made from an image: a task's sandbox is one of these
    reattachable: bool = False  # a conversation can be taken up in the same sandbox later (`resume`)


KINDS: dict[str, SandboxKind] = {
    kind.scheme: kind
    for kind in (
        SandboxKind("local", "oc_repl.sandbox.local:LocalSandbox", "local:<dir>", on_host=True, reattachable=True),
        SandboxKind("docker", "oc_repl.sandbox.docker:DockerSandbox", "docker:<container>", reattachable=True),
        SandboxKind(
            "docker-image",
            "oc_repl.sandbox.docker:DockerImageSandbox",
            "docker-image:<image>",
            fresh=True,
            from_image=True,
        ),  # fmt: skip
    )
}
FORMS = ", ".join(kind.form for kind in KINDS.values())
CONTAINERS = ", ".join(kind.form for kind in KINDS.values() if not kind.on_host)


def kind_of(spec: str) -> SandboxKind:
    """The kind a spec names; a usage error for a spec of no known kind, or of none at all."""
    scheme, sep, target = spec.partition(":")
    if not sep or not target:
        raise UsageError(f"sandbox {spec!r} is not of the form scheme:target", hint=f"use {FORMS}")
    kind = KINDS.get(scheme)
    if kind is None:
        known = ", ".join(KINDS)
        raise UsageError(f"sandbox {spec!r}: unknown scheme {scheme!r} (known: {known})", hint=f"use {FORMS}")
    return kind


def target_of(spec: str) -> str:
    return spec.partition(":")[2]


def image_spec(image: str) -> str:
    """The spec of a sandbox made afresh from `image` (a task's)."""
    kind = next(kind for kind in KINDS.values() if kind.from_image)
    return f"{kind.scheme}:{image}"
