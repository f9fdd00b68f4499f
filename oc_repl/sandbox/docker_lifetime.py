"""How long a container oc-repl creates may live, and the sweep that removes those whose time is over.

Every such container carries the `oc-repl` label. Unless it is kept on purpose (`--keep`), its first process is
`sleep <lifetime>` instead of `sleep infinity`, and an `oc-repl.expires` label holds the time (Unix seconds) at which
that sleep ends. So a container leaked by a client that was killed outright stops by itself when its lifetime is over,
and whichever oc-repl opens a docker sandbox next removes it. Kept containers have no expiry and are never swept.

A lifetime long enough for a working day in the shell is too long for a leak, so a container is also leased: its first
process stops it when its lease has run out, and the client that uses it renews the lease while it lives (`Renewal`, a
signal to that process). A client killed outright (kill -9, a lost machine) stops renewing, and its container stops a
lease (`LEASE`) later, within any run's own timeout plus a margin; the next sweep removes it.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from contextlib import suppress
from typing import Any

LABEL = "oc-repl"
EXPIRES = "oc-repl.expires"
# A day: an interactive shell on a docker-image sandbox may well last a working day, and a run that gives no lifetime
# of its own (the lead's `--timeout` sets one) must not lose its container under it; a leaked container is still
# stopped within a day, and removed by the next start after that.
DEFAULT_LIFETIME = 24 * 3600
LEASED = "oc-repl.lease"  # the lease's length in seconds
CREATED = "oc-repl.created"  # when (Unix seconds): its lifetime is counted from then
LEASE = 600  # ten minutes: renewed each tenth of it, so a client stalled for minutes (a loaded machine) keeps it
WAIT_FIFO = "/tmp/.oc-repl-wait"  # what the first process's loop sleeps on (a read with a timeout)
# The first process: it ends at the lifetime's end or when the lease has run out, whichever comes first. A renewal is
# SIGUSR1 to it: as the container's pid 1 it takes no signal it has no handler for, not even from root inside, and
# nothing inside can keep one from it. bash handles the fatal signals itself (to clean up, then die of them), so it
# ignores every other signal first; kills from outside (docker's) still end it. So a command can extend the lease (up to
# the lifetime's end) but never shorten it or stop its client's renewals: no file holds the lease for a model to
# rewrite. Builtins only in its loop (bash's clock, a read on a FIFO as its sleep): what it starts would be taken for
# the agent's by the scan for leftovers. Without bash (or a FIFO) it is the plain sleep of the whole lifetime, or a
# sleep per round.
_FIRST = r"""
printf -v now '%(%s)T' -1; end=$((now + $1)); lease=$((now + $2))
for s in {1..64}; do case $s in 9 | 10 | 17 | 19) ;; *) trap '' $s 2>/dev/null ;; esac; done
trap 'printf -v now "%(%s)T" -1; lease=$((now + $2))' USR1
mkfifo {fifo} 2>/dev/null && exec 3<>{fifo}
while printf -v now '%(%s)T' -1; ((now < end)); do
  ((now < lease)) || exit 0
  read -t 5 -u 3 _ 2>/dev/null || { [ -e /proc/self/fd/3 ] || sleep 5; }
done
""".replace("{fifo}", WAIT_FIFO)
_START = 'command -v bash >/dev/null && exec bash -c "$0" leased "$@"; exec sleep "$1"'
KEPT = 10 * 365 * 24 * 3600  # a kept container's first process waits this long: for ever, as `sleep infinity` does


def protected(labels: dict[str, str]) -> list[str]:
    """The arguments of a protected first process (docker_container.py: the image's own bash, copied so that its
    user cannot read it) for a container of these labels: the same loop as any leased one, or a wait for ever."""
    expires, leased = expiry(labels), labels.get(LEASED, "")
    seconds = str(expires - int(labels.get(CREATED, "0") or 0)) if expires is not None else str(KEPT)
    return ["-c", _FIRST, "leased", seconds, leased if leased.isdigit() else str(KEPT)]


def creation(lifetime: float | None, keep: bool, now: float, lease: float = LEASE) -> tuple[list[str], dict[str, str]]:
    """The first process and the labels of a new container; `lifetime` and `lease` in seconds (lifetime None:
    DEFAULT_LIFETIME)."""
    if keep:
        return ["sleep", "infinity"], {LABEL: "1"}
    seconds = max(1, math.ceil(DEFAULT_LIFETIME if lifetime is None else lifetime))
    leased = max(1, math.ceil(lease))
    labels = {LABEL: "1", EXPIRES: str(int(now) + seconds), LEASED: str(leased), CREATED: str(int(now))}
    return ["sh", "-c", _START, _FIRST, str(seconds), str(leased)], labels


class Renewal:
    """Renews a leased container's lease while its client lives, each tenth of the lease, in a daemon thread (none
    for a container without a lease)."""

    def __init__(self, run: Callable[[str], Any], lease: float | None) -> None:
        self.run, self.lease = run, lease
        self.stopped = threading.Event()
        if lease:
            threading.Thread(target=self._renew, name="oc-repl-lease", daemon=True).start()

    @classmethod
    def of(cls, labels: dict[str, str] | None, run: Callable[[str], Any]) -> Renewal:
        value = (labels or {}).get(LEASED, "")
        return cls(run, int(value) if value.isdigit() else None)

    def _renew(self) -> None:
        assert self.lease
        while not self.stopped.wait(self.lease / 10):
            with suppress(Exception):  # a renewal that fails is tried again; the lease's margin is nine of them
                self.run("kill -USR1 1")

    def stop(self) -> None:
        self.stopped.set()


def expiry(labels: dict[str, str] | None) -> int | None:
    value = (labels or {}).get(EXPIRES, "")
    return int(value) if value.isdigit() else None


def sweep(api: Any, now: float) -> list[str]:
    """Remove every oc-repl container whose lifetime is over, running or not, and every leased one that stopped (its
    lease ran out: no client renews it); the names of those removed."""
    import docker

    removed = []
    with suppress(docker.errors.DockerException):  # a sweep that fails is tried again at the next start
        for info in api.containers(all=True, filters={"label": [f"{LABEL}=1", EXPIRES]}):
            expires = expiry(info.get("Labels"))
            lapsed = info.get("State") == "exited" and LEASED in (info.get("Labels") or {})
            if expires is None or (expires > now and not lapsed):
                continue
            with suppress(docker.errors.DockerException):  # removed meanwhile, by its own client or another sweep
                api.remove_container(info["Id"], force=True)
                removed.append(((info.get("Names") or ["?"])[0]).lstrip("/"))
    return removed


def for_run(agent_seconds: float, verifier_seconds: float) -> float:
    """The lifetime of a container made for one run: the agent's time, the verifier's, and slack for the rest."""
    return agent_seconds + verifier_seconds + 600
