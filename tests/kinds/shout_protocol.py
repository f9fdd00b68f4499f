"""A protocol kind: the bare model under a system message of one setting's word."""

from __future__ import annotations

from typing import Any

from oc_repl.protocols.kind import ProtocolKind
from oc_repl.protocols.raw import RawProtocol
from oc_repl.rows import FILE, FLAG, HARBOR, row


class ShoutProtocol(RawProtocol):
    def __init__(self, shout_word: str = "HEY", name: str = "shout", **_: Any) -> None:
        super().__init__(system=f"{shout_word}! Answer in capitals.", name=name)


def check() -> tuple[str, str, str, str]:
    """The shout protocol's look at this machine."""
    return ("shout protocol", "ok", "shout is installed and needs nothing of this machine", "")


KIND = ProtocolKind(
    "shout",
    "tests.kinds.shout_protocol:ShoutProtocol",
    options=(row("shout_word", "str", "HEY", "shout: the word the system message starts with", FLAG, FILE, HARBOR),),
    doctor="tests.kinds.shout_protocol:check",
)
