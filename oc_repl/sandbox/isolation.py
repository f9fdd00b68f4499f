"""What holds a container's commands in, read from the daemon once it runs: the run's header and `thread.started`
state it (each sandbox's `isolation()`), so what they say is what is in force, whichever setting or fallback chose
it."""

from __future__ import annotations

from typing import Any

from oc_repl.events import Isolation

MB = 1 << 20


def container_isolation(attrs: dict[str, Any], limits: str) -> Isolation:
    """A container's network and limits as the daemon reports them (`docker inspect`)."""
    host = attrs.get("HostConfig") or {}
    networks = sorted((attrs.get("NetworkSettings") or {}).get("Networks") or {})
    mode = host.get("NetworkMode") or ""
    network = ", ".join(networks) or ("bridge" if mode == "default" else mode)
    pids = host.get("PidsLimit")  # None, 0 and -1 all mean no limit
    memory = host.get("Memory") or 0
    if host.get("NanoCpus"):
        cpus = host["NanoCpus"] / 1e9
    elif host.get("CpuQuota", 0) > 0 and host.get("CpuPeriod"):
        cpus = host["CpuQuota"] / host["CpuPeriod"]
    else:
        cpus = None
    return Isolation(
        confinement="container",
        network=network,
        limits=limits,
        max_processes=pids if pids and pids > 0 else None,
        memory_mb=memory // MB if memory > 0 else None,
        cpus=cpus,
    )
