"""The terminus kinds as the core sees them: their setting and their deviations from Terminus-2
(protocols/kind.py)."""

from __future__ import annotations

from oc_repl.protocols.kind import ProtocolKind
from oc_repl.rows import EVERYWHERE, INTERRUPTION_TOLD, Deviation, row

OPTIONS = (
    row(
        "wait",
        "str",
        "detect",
        "terminus: detect, return once the shell is provably idle; exact, sleep every duration",
        *EVERYWHERE,
        choices=("detect", "exact"),
        exact="exact",
    ),
)
SALVAGE_BY_WARNING_NAME = Deviation(
    "salvage_by_warning_name", "terminus-xml tells a cut reply's several-blocks warnings by their names"
)
DEVIATIONS = (
    Deviation(
        "returns_when_idle", "terminus returns once the shell is provably idle", ("wait",), lambda s: s.wait != "exact"
    ),
    Deviation("think_block_stripped", "a leading think block is stripped before terminus parsing"),
    Deviation("only_parse_errors_stop", "terminus stops a reply only on a real parse error"),
    SALVAGE_BY_WARNING_NAME,
    Deviation("all_keys_typed", "terminus types keys starting with `-` and keys of any length"),
    Deviation("declined_keys_told", "terminus: keystrokes a person declines are named ahead of the screen"),
    INTERRUPTION_TOLD,
)
_CODE = "oc_repl.protocols.terminus.protocol"
SIGNATURES = ("oc_repl.protocols.terminus.signatures:idle_turns",)
TERMINUS_JSON = ProtocolKind(
    "terminus-json",
    f"{_CODE}:TerminusJson",
    options=OPTIONS,
    deviations=tuple(d for d in DEVIATIONS if d is not SALVAGE_BY_WARNING_NAME),
    signatures=SIGNATURES,
)
TERMINUS_XML = ProtocolKind(
    "terminus-xml", f"{_CODE}:TerminusXml", options=OPTIONS, deviations=DEVIATIONS, signatures=SIGNATURES
)
