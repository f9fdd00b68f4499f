"""Protocol registry. A protocol is a folder of data (a manifest naming its code kind, and its assets) driven by
the code of that kind; user folders can add protocols or override assets, and plugins can register protocols under
the `oc_repl.protocols` entry point group (a ProtocolKind, or a class alone: oc_repl/plugins.py).

Assets resolve in this order, and every run records which one it used: a user folder
(`~/.config/oc-repl/protocols/NAME/`), the exact upstream copy fetched by `oc-repl protocols sync`
(`~/.local/share/oc-repl/upstream/NAME/`), then the project's own built-in wording.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oc_repl import paths, plugins, tomlfile
from oc_repl.errors import UsageError
from oc_repl.lazy import load
from oc_repl.protocols.kind import ProtocolKind
from oc_repl.protocols.kinds import KINDS
from oc_repl.protocols.synced import recorded_sha256
from oc_repl.types import AgentProtocol, Asset

if TYPE_CHECKING:
    from oc_repl.rows import Deviations


_PACKAGE_ROOT = Path(__file__).resolve().parent.parent


def _builtin_root() -> Path:
    """Inside the wheel, or at the top of a source checkout."""
    wheel = _PACKAGE_ROOT / "_protocols"
    return wheel if wheel.is_dir() else _PACKAGE_ROOT.parent / "protocols"


def data_dir(name: str) -> Path:
    """The built-in data folder of a protocol."""
    folder = _builtin_root() / name
    if not folder.is_dir():
        raise UsageError(f"no built-in data folder for protocol {name!r}")
    return folder


@dataclass(frozen=True)
class Manifest:
    name: str
    kind: str
    folder: Path
    builtin: bool
    base: str  # the built-in protocol whose assets fill in what a user folder leaves out
    data: dict[str, Any]

    def entry(self, filename: str) -> dict[str, Any]:
        for asset in self.data.get("assets", []):
            if isinstance(asset, dict) and asset.get("name") == filename:
                return asset
        return {}

    def upstream_sha256(self, filename: str) -> str:
        return self.entry(filename).get("upstream_sha256", "")


@functools.cache  # package data: read once per process, not once per asset a protocol loads
def _builtin_manifests() -> dict[str, Manifest]:
    found = {}
    for path in sorted(_builtin_root().glob("*/manifest.toml")):
        data = tomlfile.read(path)
        found[path.parent.name] = Manifest(path.parent.name, data["kind"], path.parent, True, path.parent.name, data)
    return found


def manifests() -> dict[str, Manifest]:
    builtin = _builtin_manifests()
    found = dict(builtin)
    by_kind = {m.kind: name for name, m in builtin.items()}
    for path in sorted(paths.user_protocols_dir().glob("*/")):
        name, manifest = path.name, path / "manifest.toml"
        if name in builtin:
            continue  # a folder named after a built-in protocol overrides assets only
        if not manifest.is_file():
            continue
        data = tomlfile.read(manifest)
        kind = data.get("kind", "")
        if kind not in KINDS:
            raise UsageError(f"{manifest}: unknown kind {kind!r}; known: {', '.join(KINDS)}")
        found[name] = Manifest(name, kind, path, False, data.get("base") or by_kind.get(kind, ""), data)
    return found


def plugin_kinds() -> dict[str, ProtocolKind]:
    """The protocols installed packages register, by name: each its kind (a class alone has none of the built-in
    kinds' traits, and no settings of its own)."""
    found = plugins.registered(plugins.PROTOCOLS, object)
    refs, folders = plugins.refs(plugins.PROTOCOLS), manifests()
    return {
        name: value if isinstance(value, ProtocolKind) else ProtocolKind(name, refs[name])
        for name, value in found.items()
        if name not in folders  # a data folder of that name is the protocol
    }


def names() -> list[str]:
    return sorted(set(manifests()) | set(plugins.refs(plugins.PROTOCOLS)))


def _builtin_base(protocol: str) -> str:
    manifest = manifests().get(protocol)
    return manifest.base if manifest else protocol


def asset_candidates(protocol: str, filename: str) -> list[tuple[str, Path]]:
    """Where an asset may come from, most specific first: (source, path)."""
    base = _builtin_base(protocol)
    return [
        ("user", paths.user_protocols_dir() / protocol / filename),
        ("upstream", paths.upstream_dir() / base / filename),
        ("built-in", _builtin_root() / base / filename),
    ]


def load_asset(protocol: str, filename: str) -> tuple[bytes, Asset]:
    for source, path in asset_candidates(protocol, filename):
        if path.is_file():
            data = path.read_bytes()
            return data, Asset(filename, hashlib.sha256(data).hexdigest(), source, str(path))
    raise UsageError(f"protocol {protocol!r} has no asset {filename!r}")


def kind_of(protocol: str) -> ProtocolKind:
    """What the core knows of a protocol, by its name (a data folder's kind, or a plugin's); a usage error for a name
    no protocol has."""
    manifest = manifests().get(protocol)
    if manifest is not None:
        return KINDS[manifest.kind]
    kind = plugin_kinds().get(protocol)
    if kind is None:
        raise UsageError(f"unknown protocol {protocol!r}; known: {', '.join(names())}")
    return kind


def create(name: str, deviations: Deviations | None = None, **options: Any) -> AgentProtocol:
    """Build a protocol from its kind's own settings (`options`: the values of its kind's rows, and the core's
    `count_tokens`), those its class does not take left out. `deviations` (the run's, `deviations.from_settings`) goes
    to every kind that departs from upstream; without it a protocol does what the project does by default."""
    cls = load(kind_of(name).implementation)
    accepted = inspect.signature(cls).parameters
    options.update(name=name, deviations=deviations)
    return cls(**{k: v for k, v in options.items() if k in accepted and v is not None})


def upstream_sha256(protocol: str, filename: str) -> str:
    """The published upstream hash of an asset (its protocol's manifest, or its base's), else one a sync recorded."""
    found = manifests()
    manifest = found.get(protocol)
    base = found.get(manifest.base) if manifest else None
    for candidate in (manifest, base):
        if candidate is not None and candidate.upstream_sha256(filename):
            return candidate.upstream_sha256(filename)
    return recorded_sha256(base.name if base else protocol, filename)


def sync_source(protocol: str, filename: str) -> str:
    """Which `protocols sync` source derives an asset ("" when upstream has none)."""
    found = manifests()
    manifest = found.get(protocol)
    for candidate in (manifest, found.get(manifest.base) if manifest else None):
        if candidate is not None and (source := candidate.entry(filename).get("sync")):
            return source
    return ""


def require_upstream(protocol: str, assets: list[Asset]) -> None:
    """`--exact`: every asset in use must be upstream's own, as synced and checked; otherwise a usage error naming
    the command that fixes it."""
    missing: dict[str, list[str]] = {}
    for asset in assets:
        expected = upstream_sha256(protocol, asset.name)
        if asset.source == "upstream" and expected and asset.sha256 == expected:
            continue
        source = sync_source(protocol, asset.name)
        why = "not synced" if asset.source == "built-in" else f"{asset.source} copy, sha256 {asset.sha256[:12]}"
        missing.setdefault(source, []).append(f"{asset.name} ({why})")
    if not missing:
        return
    fixes = {
        "": "a user override replaces it: remove it from ~/.config/oc-repl/protocols/",
    }
    listed = "; ".join(", ".join(names) for names in missing.values())
    hints = sorted({fixes.get(source, f"oc-repl protocols sync --only {source}") for source in missing})
    raise UsageError(
        f"--exact runs protocol {protocol!r} only with upstream's own assets, and these are not: {listed}",
        hint="run " + " and ".join(hints),
    )
