"""Which model (and, where the server shows it, which chat template) a server serves, for the text wires, whose prompt
is rendered with `--tokenizer`'s files: `doctor` and a run say what the server told and warn when it differs.

Servers tell it in their own routes: sglang's `GET /get_model_info` (`model_path`), llama.cpp's `GET /props`
(`chat_template`, `model_path`), vLLM's `GET /v1/models` (each entry's `root`: the path it loaded). A server that tells
nothing (llama-cpp-python) is no fault.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from oc_repl.client.api_base import server_root

TOKENIZER_HINT = "Point --tokenizer at the folder the server loaded: the prompt is rendered with its template."


@dataclass(frozen=True)
class Served:
    source: str  # the route that told
    model: str = ""  # the path or name of what the server loaded
    template_sha256: str = ""  # of the chat template the server renders with, when it shows it

    def said(self) -> str:
        shown = f"{self.model}" if self.model else "a model it does not name"
        template = f", chat template sha256 {self.template_sha256[:12]}" if self.template_sha256 else ""
        return f"the server serves {shown}{template} ({self.source})"


def served_model(get_json: Callable[[str], Any], api_base: str, model: str | None) -> Served | None:
    root = server_root(api_base)
    info = get_json(root + "/get_model_info")
    if isinstance(info, dict) and isinstance(info.get("model_path"), str):
        return Served("sglang /get_model_info", info["model_path"])
    props = get_json(root + "/props")
    if isinstance(props, dict) and (props.get("chat_template") or props.get("model_path")):
        template = props.get("chat_template")
        sha = hashlib.sha256(template.encode()).hexdigest() if isinstance(template, str) and template else ""
        return Served("llama.cpp /props", str(props.get("model_path") or ""), sha)
    listing = get_json(api_base.rstrip("/") + "/models")
    entries = listing.get("data") if isinstance(listing, dict) else None
    entries = [e for e in entries or [] if isinstance(e, dict)]
    entry = next((e for e in entries if e.get("id") == model), entries[0] if entries else None)
    if entry and isinstance(entry.get("root"), str) and entry["root"]:
        return Served("vLLM /v1/models root", entry["root"])
    return None


def differences(served: Served, files: Any, tools: list[Any] | None = None) -> list[str]:
    """How what the server serves differs from `--tokenizer`'s files (oc_repl.client.model_files.ModelFiles)."""
    found = []
    template = files.templates.select(None, tools)
    if served.template_sha256 and served.template_sha256 != template.sha256:
        found.append(
            f"the server's chat template (sha256 {served.template_sha256[:12]}) is not --tokenizer's "
            f"({template.path}, sha256 {template.sha256[:12]})"
        )
    folder = files.path if files.path.is_dir() else files.path.parent
    if served.model and PurePath(served.model.rstrip("/")).name != folder.resolve().name:
        found.append(f"the server serves {served.model}, and --tokenizer names {folder}")
    return found


def served_warnings(client: Any, files: Any, tools: list[Any] | None) -> tuple[str, list[str]]:
    """What the server of `client` (a ChatClient) says it serves ("" when it tells nothing), and how that differs
    from `--tokenizer`'s files: the warnings a run gives."""
    served = served_model(client.get_json, client.api_base, client.model)
    if served is None:
        return "", []
    return served.said(), [f"{served.said()}: {difference}" for difference in differences(served, files, tools)]
