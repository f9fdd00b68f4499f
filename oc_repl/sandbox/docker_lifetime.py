"""How long a container oc-repl creates may live, and the sweep that removes those whose time is over.

Every such container carries the `oc-repl` label. Unless it is kept on purpose (`--keep`), its first process is
`sleep <lifetime>` instead of `sleep infinity`, and an `oc-repl.expires` label holds the time (Unix seconds) at which
that sleep ends. So a container leaked by a client that was killed outright stops by itself when its lifetime is over,
and whichever oc-repl opens a docker sandbox next removes it. Kept containers have no expiry and are never swept.
"""

from __future__ import annotations

import math
from contextlib import suppress
from typing import Any

LABEL = "oc-repl"
EXPIRES = "oc-repl.expires"
# A day: an interactive shell on a docker-image sandbox may well last a working day, and a run that gives no lifetime
# of its own (the lead's `--timeout` sets one) must not lose its container under it; a leaked container is still
# stopped within a day, and removed by the next start after that.
DEFAULT_LIFETIME = 24 * 3600


def creation(lifetime: float | None, keep: bool, now: float) -> tuple[list[str], dict[str, str]]:
    """The first process and the labels of a new container; `lifetime` in seconds (None: DEFAULT_LIFETIME)."""
    if keep:
        return ["sleep", "infinity"], {LABEL: "1"}
    seconds = max(1, math.ceil(DEFAULT_LIFETIME if lifetime is None else lifetime))
    return ["sleep", str(seconds)], {LABEL: "1", EXPIRES: str(int(now) + seconds)}  # its sleep ends no earlier


def expiry(labels: dict[str, str] | None) -> int | None:
    value = (labels or {}).get(EXPIRES, "")
    return int(value) if value.isdigit() else None


def sweep(api: Any, now: float) -> list[str]:
    """Remove every oc-repl container whose lifetime is over, running or not; the names of those removed."""
    import docker

    removed = []
    with suppress(docker.errors.DockerException):  # a sweep that fails is tried again at the next start
        for info in api.containers(all=True, filters={"label": [f"{LABEL}=1", EXPIRES]}):
            expires = expiry(info.get("Labels"))
            if expires is None or expires > now:
                continue
            with suppress(docker.errors.DockerException):  # removed meanwhile, by its own client or another sweep
                api.remove_container(info["Id"], force=True)
                removed.append(((info.get("Names") or ["?"])[0]).lstrip("/"))
    return removed


def for_run(agent_seconds: float, verifier_seconds: float) -> float:
    """The lifetime of a container made for one run: the agent's time, the verifier's, and slack for the rest."""
    return agent_seconds + verifier_seconds + 600
