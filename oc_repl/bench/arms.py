"""A bench's arms: each protocol, with each model server when several are given (`--model a,b`, `--api-base u,v`),
and the label each arm goes by (its directory under trials/, its row in every table).

Several models and several servers pair up one to one (the n-th model on the n-th server); one of either goes with
all of the other. A label names only what varies between arms, so a bench of protocols keeps its protocols' names;
servers are named by the model each says it serves when those differ (checkpoints behind two servers), else by address.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from oc_repl.errors import UsageError

_UNSAFE = re.compile(r"[^A-Za-z0-9._+=@:-]+")


@dataclass(frozen=True)
class ArmSpec:
    protocol: str
    model: str | None
    api_base: str | None
    label: str


def split(value: Any) -> list[str]:
    return [part.strip() for part in str(value).split(",") if part.strip()] if value is not None else []


def _server_name(api_base: str) -> str:
    parts = urlsplit(api_base)
    return parts.netloc + parts.path.rstrip("/").removesuffix("/v1").replace("/", "-")


def arm_specs(
    protocols: list[str], models: list[str], api_bases: list[str], served: dict[str, str] | None = None
) -> list[ArmSpec]:
    """`served`: the model each server says it serves; when they all differ, servers are labelled by it."""
    if len(models) > 1 and len(api_bases) > 1 and len(models) != len(api_bases):
        raise UsageError(
            f"{len(models)} models and {len(api_bases)} servers do not pair up",
            hint="give one model per server (the n-th model on the n-th server), or one of either",
        )
    count = max(len(models), len(api_bases), 1)
    servers = [
        (models[i] if len(models) > 1 else (models or [None])[0], api_bases[i] if len(api_bases) > 1 else None)
        for i in range(count)
    ]
    if len(api_bases) == 1:
        servers = [(model, api_bases[0]) for model, _ in servers]
    served = served or {}
    server_names = served if len(set(served.values())) == len(api_bases) == len(served) else {}
    specs = []
    for protocol in protocols:
        for model, api_base in servers:
            parts = [protocol] if len(protocols) > 1 or count == 1 else []
            parts += [str(model)] if len(models) > 1 else []
            parts += [server_names.get(str(api_base)) or _server_name(str(api_base))] if len(api_bases) > 1 else []
            specs.append(ArmSpec(protocol, model, api_base, label("@".join(parts))))
    labels = [s.label for s in specs]
    if len(set(labels)) != len(labels):
        raise UsageError(f"two arms would share the label {max(labels, key=labels.count)!r}", hint="name them apart")
    return specs


def label(text: str) -> str:
    """A label that is one directory name: what would not be is replaced by `_`."""
    safe = _UNSAFE.sub("_", text).strip(".") or "_"
    return safe[:120]
