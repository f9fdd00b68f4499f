"""The protocol kinds, listed: plain data, cheap to import. A protocol is a data folder whose manifest names its kind
(or a class an `oc_repl.protocols` entry point registers); each kind declares what the core must know of it
(protocols/kind.py), so no part outside the protocols branches on a protocol's name."""

from __future__ import annotations

from oc_repl.protocols.camel.kind import CAMEL
from oc_repl.protocols.kind import ProtocolKind
from oc_repl.protocols.terminus.kind import TERMINUS_JSON, TERMINUS_XML
from oc_repl.rows import FILE, FLAG, row

RAW = ProtocolKind(
    "raw",
    "oc_repl.protocols.raw:RawProtocol",
    options=(row("system", "str", None, "raw: a system message, as TEXT or @FILE", FLAG, FILE),),
)
KINDS: dict[str, ProtocolKind] = {kind.kind: kind for kind in (CAMEL, TERMINUS_JSON, TERMINUS_XML, RAW)}
# the upstream sources `oc-repl protocols sync` derives texts from (protocols/sync.py), named in manifests' `sync`
SYNC_SOURCES = ("terminus", "camel", "openclaw")

# The protocol a run speaks unless told (the checkpoint's), and the built-in ones as `--protocol`'s help names them.
DEFAULT = "camel-terminal-toolkit"
HELP = "camel-terminal-toolkit, terminus-json, terminus-xml or raw"
