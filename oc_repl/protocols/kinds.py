"""The protocol kinds, as the core sees them: plain data, cheap to import. A protocol is a data folder whose manifest
names its kind (or a class an `oc_repl.protocols` entry point registers); each kind names its implementation
("module:Class", imported only when built) and says what the core must know of it, so no part outside the protocols
branches on a protocol's name."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from oc_repl.training import CAMEL_TRAINING_TURNS


@dataclass(frozen=True)
class ProtocolKind:
    kind: str
    implementation: str  # "module:Class"
    # what `--exact` sets for it beyond what it sets for every protocol, where the command line does not: the episode
    # length it was trained with, the wire its training posted on
    exact: Mapping[str, Any] = field(default_factory=dict)
    token_ids: bool = False  # its training posted token ids: `--exact` on a text wire needs the model's tokenizer
    middle_cut: bool = False  # its harness cut a long prompt in the middle, as the text wires then do
    says_sync: bool = False  # a run on built-in texts that `protocols sync` replaces says so, once
    # the rows of deviations.Deviations that concern it, beside those that concern every protocol
    deviations: frozenset[str] = frozenset()


CAMEL_DEVIATIONS = frozenset(
    {
        "results_cut", "relative_paths_in_workdir", "history_reshaped", "own_turn_cap", "interruption_told",
        "argument_types_checked", "null_timeout_bounded", "timed_out_input_refused", "no_wall_limit",
        "ended_session_answered_at_once", "unreadable_calls_named", "cut_reply_noticed", "server_renders_tools",
        "calls_may_be_constrained", "prompt_not_cut", "results_not_token_cut",
    }
)  # fmt: skip
TERMINUS_DEVIATIONS = frozenset(
    {
        "returns_when_idle", "think_block_stripped", "only_parse_errors_stop", "all_keys_typed", "declined_keys_told",
        "interruption_told",
    }
)  # fmt: skip

KINDS: dict[str, ProtocolKind] = {
    kind.kind: kind
    for kind in (
        ProtocolKind(
            "camel",
            "oc_repl.protocols.camel.protocol:CamelProtocol",
            exact={"max_turns": CAMEL_TRAINING_TURNS, "wire": "generate"},
            token_ids=True,
            middle_cut=True,
            says_sync=True,
            deviations=CAMEL_DEVIATIONS,
        ),  # fmt: skip
        ProtocolKind(
            "terminus-json", "oc_repl.protocols.terminus.protocol:TerminusJson", deviations=TERMINUS_DEVIATIONS
        ),
        ProtocolKind(
            "terminus-xml",
            "oc_repl.protocols.terminus.protocol:TerminusXml",
            deviations=TERMINUS_DEVIATIONS | {"salvage_by_warning_name"},
        ),  # fmt: skip
        ProtocolKind("raw", "oc_repl.protocols.raw:RawProtocol"),
    )
}
# the upstream sources `oc-repl protocols sync` derives texts from (protocols/sync.py), named in manifests' `sync`
SYNC_SOURCES = ("terminus", "camel", "openclaw")
PLUGIN = ProtocolKind("", "")  # a protocol an entry point registers: none of the above applies to it
