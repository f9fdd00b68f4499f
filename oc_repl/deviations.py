"""Every way oc-repl departs from upstream (camel's training harness, terminal-bench's Terminus-2), each by name: the
rows of the README's "Training-exact runs" table (a test holds the two together), composed of the core's rows (those
of the run's own loop and client, which concern every protocol: oc_repl/rows.py) and each protocol kind's
(protocols/<kind>/kind.py).

A run derives the deviations in force from its settings (`from_settings`): a row with an option follows the option's
value, a row without one is on unless `--exact`, and `--exact`'s settings turn every row off (`none()`; an explicit
`--max-turns`, the run's budget, aside). Code branches on the row a behaviour is about, never on `--exact` itself;
`thread.started` lists the names in force.

A new deviation is a row in the kind it concerns (or the core's) and a row in the README's table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oc_repl.protocols.kinds import KINDS
from oc_repl.rows import EVERY_PROTOCOL, Deviation, Deviations

if TYPE_CHECKING:
    from oc_repl.config import RunSettings
    from oc_repl.protocols.kind import ProtocolKind


def rows() -> dict[str, Deviation]:
    """The whole table, in its order: the core's rows, then each kind's not yet listed."""
    found: dict[str, Deviation] = {}
    for row in (*EVERY_PROTOCOL, *(row for kind in KINDS.values() for row in kind.deviations)):
        found.setdefault(row.name, row)
    return found


def none() -> Deviations:
    """Upstream's behaviour throughout: what `--exact` runs."""
    return Deviations(rows().values(), ())


def defaults() -> Deviations:
    """oc-repl's own behaviour, for a protocol built without a run's settings."""
    return Deviations(rows().values())


def concerning(kind: ProtocolKind) -> set[str]:
    """The rows that concern a protocol of `kind`: its own, and those of every protocol."""
    return {row.name for row in (*EVERY_PROTOCOL, *kind.deviations)}


def from_settings(settings: RunSettings) -> Deviations:
    """The deviations a run's settings leave on, among those that concern its protocol."""
    concern = concerning(settings.protocol_kind())
    table = rows()
    on = {
        name
        for name, row in table.items()
        if name in concern and (row.kept(settings) if row.kept else not settings.exact)
    }
    return Deviations(table.values(), on)
