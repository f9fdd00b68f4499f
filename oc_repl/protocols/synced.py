"""What the last `oc-repl protocols sync` recorded of each asset it stored (protocols/sync.py writes it): read by the
registry to check an asset with no published hash, without importing the sync itself."""

from __future__ import annotations

import json

from oc_repl import paths

RECORD = "sync.json"


def read_record() -> dict:
    try:
        record = json.loads((paths.upstream_dir() / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"assets": {}}
    return record if isinstance(record.get("assets"), dict) else {"assets": {}}


def recorded_sha256(protocol: str, filename: str) -> str:
    """The hash a previous sync stored for an asset that has no published hash (the camel tool schemas)."""
    entry = read_record()["assets"].get(f"{protocol}/{filename}") or {}
    return entry.get("sha256", "") if entry.get("recorded") else ""
