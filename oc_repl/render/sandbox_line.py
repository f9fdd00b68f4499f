"""The header's line on what holds the model's commands in: `thread.started`'s `isolation`, in words."""

from __future__ import annotations

from typing import Any

CONFINEMENT = {
    "bubblewrap": "confined by bubblewrap (the host read-only, what it shares hidden)",
    "none": "UNCONFINED: commands run as you on this host",
    "container": "in a container",
    "harbor": "in Harbor's environment",
}


def _limits(iso: Any) -> str:
    found = []
    if iso.max_processes:
        found.append(f"{iso.max_processes} processes")
    if iso.memory_mb:
        found.append(f"{iso.memory_mb} MB memory" + (", swap included" if iso.limits == "oc-repl" else ""))
    if iso.cpus:
        found.append(f"{iso.cpus:g} CPU{'' if iso.cpus == 1 else 's'}")
    values = ", ".join(found)
    if iso.limits == "container":
        return f"limits: the container's own ({values or 'none'})"
    if iso.limits == "harbor":
        return "limits: Harbor's (the task's own)"
    if not values:
        return "no process or memory limits"
    held_by = "" if iso.limits in ("oc-repl", "none", "") else f" ({iso.limits})"  # a local sandbox's cgroup, rlimit
    return f"limits: {values}{held_by}"


def isolation_line(iso: Any) -> str:
    """E.g. `sandbox: in a container · network none · limits: 4096 processes, 4096 MB memory, swap included`; ""
    for a thread without a sandbox."""
    if iso is None or not iso.confinement:
        return ""
    network = {"host": "the host's", "": "unknown"}.get(iso.network, iso.network)
    where = CONFINEMENT.get(iso.confinement, iso.confinement)
    return f"sandbox: {where} · network {network} · {_limits(iso)}"
