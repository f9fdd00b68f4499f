"""Model-facing text as data: named templates with `{fields}`, loaded and checked like every other protocol asset.

A protocol declares the templates it needs and the fields each may use (`Spec`); its folder holds them in one
TOML file (nested tables flatten to dotted names, e.g. `[json.warn] extra_before = "..."` is `json.warn.extra_before`).
The built-in file is the project's own wording; `oc-repl protocols sync` derives upstream's from the pinned upstream
packages, and a user folder may override it. Every file is checked when it is loaded, so a typo or a stray brace in
an override is one clear usage error before the first model call, never a crash half-way through a run.
"""

from __future__ import annotations

import json
import string
from collections.abc import Mapping
from typing import Any

from oc_repl import tomlfile
from oc_repl.errors import UsageError
from oc_repl.types import Asset

Spec = Mapping[str, tuple[str, ...]]  # template name -> the fields it may use


def format_problem(text: str, allowed: tuple[str, ...] | frozenset[str]) -> str:
    """Why `text` cannot be filled with `str.format` from `allowed` fields, or "" when it can.

    Only plain `{name}` fields are allowed: no conversions, format specs, attributes or indexes, so what a template
    renders never depends on anything but the text given for its fields. Literal braces are written `{{` and `}}`.
    """
    try:
        parts = list(string.Formatter().parse(text))
    except ValueError as exc:
        return f"{exc} (write a literal brace as {{{{ or }}}})"
    for _literal, field, spec, conversion in parts:
        if field is None:
            continue
        if field not in allowed:
            known = ", ".join(f"{{{name}}}" for name in sorted(allowed)) or "none"
            return f"unknown field {{{field}}} (fields here: {known}; a literal brace is written {{{{ or }}}})"
        if spec or conversion:
            return f"field {{{field}}} must be plain, without a conversion or format spec"
    return ""


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested TOML tables as dotted names."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def parse(data: bytes, spec: Spec, where: str) -> dict[str, str]:
    """The templates in a TOML file, checked against `spec`: every name present, no unknown ones, fields allowed."""
    try:
        texts = flatten(tomlfile.loads(data.decode("utf-8")))
    except (UnicodeDecodeError, ValueError) as exc:
        raise UsageError(f"{where}: not a readable TOML file of templates: {exc}") from exc
    problems = [f"missing template {name!r}" for name in spec if name not in texts]
    problems += [f"unknown template {name!r}" for name in texts if name not in spec]
    for name, text in texts.items():
        if name not in spec:
            continue
        if not isinstance(text, str):
            problems.append(f"template {name!r} is not a string")
        elif why := format_problem(text, spec[name]):
            problems.append(f"template {name!r}: {why}")
    if problems:
        raise UsageError(f"{where}: " + "; ".join(problems), hint="fix the file, or remove it to use the default")
    return texts


def dump(texts: Mapping[str, str]) -> bytes:
    """A canonical TOML rendering of templates: one `"name" = "text"` line each, sorted, JSON-style escapes.

    Derived upstream files are written this way so that their sha256 depends on the texts alone.
    """
    lines = []
    for name in sorted(texts):
        # TOML basic strings take JSON's escapes; DEL is the one control character JSON leaves unescaped
        value = json.dumps(texts[name], ensure_ascii=False).replace("\x7f", "\\u007f")
        lines.append(f"{json.dumps(name)} = {value}")
    return ("\n".join(lines) + "\n").encode("utf-8")


class Templates:
    """A protocol's loaded templates; `render(name, **fields)` fills one."""

    def __init__(self, texts: Mapping[str, str], asset: Asset | None = None) -> None:
        self.texts = dict(texts)
        self.asset = asset

    @classmethod
    def load(cls, protocol: str, filename: str, spec: Spec) -> Templates:
        from oc_repl.protocols import load_asset

        data, asset = load_asset(protocol, filename)
        return cls(parse(data, spec, asset.path or filename), asset)

    def render(self, template: str, /, **fields: object) -> str:
        return self.texts[template].format(**fields)

    def __contains__(self, name: str) -> bool:
        return name in self.texts
