"""A wire: chat requests, rendered by the server, posted on a relay's route below the API base."""

from __future__ import annotations

from oc_repl.client.wires import Wire


def check() -> tuple[str, str, str, str]:
    """The relay wire's look at this machine."""
    return ("relay wire", "ok", "the relay posts below the API base, on /relay/chat/completions", "")


WIRE = Wire("relay", "/relay/chat/completions", doctor="tests.kinds.relay_wire:check")
