"""The sandbox kinds, as the core sees them: plain data, cheap to import. A spec is `scheme:target`; each kind names
its driver ("module:Class", imported only when chosen, with `from_spec(target, **opts)` and `gone(target)`), its
settings, and what the core must know of it, so no part outside the drivers branches on a scheme."""

from __future__ import annotations

from dataclasses import dataclass

from oc_repl.errors import UsageError
from oc_repl.plugins import SANDBOXES, registered
from oc_repl.rows import FILE, FLAG, TRIAL, Option, row


@dataclass(frozen=True)
class SandboxKind:
    scheme: str
    driver: str  # "module:Class"
    form: str  # how a spec of this kind is written
    on_host: bool = False  # model-chosen commands run on this machine: consent first, and the shell asks each time
    fresh: bool = False  # each open starts afresh (a new container), so attempts can repeat in it
    from_image: bool = False  # made from an image: a task's sandbox is one of these
    reattachable: bool = False  # a conversation can be taken up in the same sandbox later (`resume`)
    options: tuple[Option, ...] = ()  # its settings: the driver opens a sandbox with these and the core's it takes
    takes: tuple[str, ...] = ()  # the core's sandbox facts its driver takes (plan.py: `sandbox_options`)
    doctor: str = ""  # "module:name" of its check of this machine, for `doctor`: () -> (name, status, finding, fix)

    @property
    def name(self) -> str:
        return self.scheme


LOCAL_OPTIONS = (
    row(
        "confine",
        "bool",
        True,
        "local: run the model's commands in bubblewrap: the host read-only, the sandbox directory and a private /tmp "
        "writable, no network",
        FLAG,
        FILE,
    ),
    row("network", "bool", False, "local: let confined commands use the network", FLAG, FILE),
    row(
        "writable_vcs",
        "bool",
        False,
        "local: let confined commands write the sandbox directory's .git, .hg and .svn",
        FLAG,
        FILE,
        shown="read-only",
    ),
)
CREATED_OPTIONS = (  # of a container oc-repl creates
    row("docker_network", "str", None, "Network of a created container", FLAG, FILE, shown="none; a task's own"),
    row("keep", "bool", False, "Keep a created container and print its name", FLAG, TRIAL),
)


KINDS: dict[str, SandboxKind] = {
    kind.scheme: kind
    for kind in (
        SandboxKind(
            "local",
            "oc_repl.sandbox.local:LocalSandbox",
            "local:<dir>",
            on_host=True,
            reattachable=True,
            options=LOCAL_OPTIONS,
            takes=("limits", "private_files"),
            doctor="oc_repl.sandbox.checks:local_confinement",
        ),
        SandboxKind(
            "docker",
            "oc_repl.sandbox.docker:DockerSandbox",
            "docker:<container>",
            reattachable=True,
            takes=("workdir",),
            doctor="oc_repl.sandbox.checks:docker_check",
        ),
        SandboxKind(
            "docker-image",
            "oc_repl.sandbox.docker:DockerImageSandbox",
            "docker-image:<image>",
            fresh=True,
            from_image=True,
            options=CREATED_OPTIONS,
            takes=("workdir", "max_processes", "memory_mb", "lifetime"),
            doctor="oc_repl.sandbox.checks:docker_check",
        ),
    )
}
DEFAULT = "local:."  # the current directory, on this host
FORMS = ", ".join(kind.form for kind in KINDS.values())  # the built-in ones
CONTAINERS = ", ".join(kind.form for kind in KINDS.values() if not kind.on_host)


def kind_of(spec: str) -> SandboxKind:
    """The kind a spec names; a usage error for a spec of no known kind, or of none at all."""
    scheme, sep, target = spec.partition(":")
    if not sep or not target:
        raise UsageError(f"sandbox {spec!r} is not of the form scheme:target", hint=f"use {FORMS}")
    kind = KINDS.get(scheme) or known().get(scheme)
    if kind is None:
        every = known()
        names = ", ".join(every)
        raise UsageError(f"sandbox {spec!r}: unknown scheme {scheme!r} (known: {names})", hint=f"use {forms(every)}")
    return kind


def known() -> dict[str, SandboxKind]:
    """The built-in kinds, and those installed packages register (oc_repl/plugins.py)."""
    return {**KINDS, **{kind.scheme: kind for kind in registered(SANDBOXES, SandboxKind).values()}}


def forms(kinds: dict[str, SandboxKind]) -> str:
    return ", ".join(kind.form for kind in kinds.values())


def target_of(spec: str) -> str:
    return spec.partition(":")[2]


IMAGE_DEFAULT = next(kind.scheme for kind in KINDS.values() if kind.from_image)  # where a task's image opens


def image_kind(scheme: str = IMAGE_DEFAULT) -> SandboxKind:
    """The kind of sandbox made afresh from an image that a task's opens in; a usage error for a scheme of no such
    kind."""
    kind = KINDS.get(scheme) or known().get(scheme)
    if kind is None or not kind.from_image:
        made = ", ".join(k.scheme for k in known().values() if k.from_image)
        raise UsageError(f"--task-sandbox {scheme}: not a kind of sandbox made from an image (those: {made})")
    return kind


def image_spec(image: str, scheme: str = IMAGE_DEFAULT) -> str:
    return f"{image_kind(scheme).scheme}:{image}"
