"""What a protocol kind declares for the core (plain data, cheap to import): its implementation ("module:Class",
imported only when built), its settings rows, its deviation rows, and what the core must know of it, so no part
outside the protocols branches on a protocol's name. Each kind's own declaration lives beside its code
(protocols/camel/kind.py, protocols/terminus/kind.py); protocols/kinds.py lists them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from oc_repl.rows import Deviation, Option


@dataclass(frozen=True)
class ProtocolKind:
    kind: str
    implementation: str  # "module:Class"
    # what `--exact` sets for it beyond what its rows and the core's say, where the command line does not: the episode
    # length it was trained with, the wire its training posted on
    exact: Mapping[str, Any] = field(default_factory=dict)
    token_ids: bool = False  # its training posted token ids: `--exact` on a text wire needs the model's tokenizer
    middle_cut: bool = False  # its harness cut a long prompt in the middle, as the text wires then do
    says_sync: bool = False  # a run on built-in texts that `protocols sync` replaces says so, once
    options: tuple[Option, ...] = ()  # its settings: the implementation is built with these alone
    deviations: tuple[Deviation, ...] = ()  # the rows that concern it, beside those that concern every protocol
    doctor: str = ""  # "module:name" of its check of this machine, for `doctor`: () -> (name, status, finding, fix)
    # "module:name" of the ways its trials fail that their outcomes hide, for bench's records: (the completed items of
    # each turn that got a reply) -> lines, each beginning with its signature's name
    signatures: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.kind
