"""`doctor` on the server's own settings: which server it is and its version (sglang's `/server_info`, once
`/get_server_info`; vLLM's `/version`), which of the chat wire's deviation rows apply there (the text wires have none
of them), and the sampling defaults it fills into a request that leaves a key out:

- sglang's `--preferred-sampling-params`, on every route (its tokenizer manager lays the request's own parameters over
  them: `{**preferred, **request}`); its `--sampling-defaults model`, on the chat route, from the model's
  generation_config.json (temperature, top_p, top_k, min_p, repetition_penalty);
- vLLM's `--generation-config auto` (its default), on the chat and completions routes, from the model's
  generation_config.json (those five, presence and frequency penalties, max_new_tokens, skip_special_tokens). vLLM
  does not say which config it loaded: `--tokenizer`'s folder (the one the server loaded, as "served model" checks)
  is read for it.

What a wire's request carries is asked of the wire's own request builder, for the sampling `--exact` sends.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from oc_repl.client.api_base import server_root
from oc_repl.client.wires import wire_of

Found = tuple[Any, ...]  # a check as oc_repl.doctor.Check takes it
# the keys each server fills from generation_config.json, in sglang's names (vLLM's `max_tokens` is max_new_tokens)
SGLANG_MODEL_DEFAULTS = ("repetition_penalty", "temperature", "top_k", "top_p", "min_p")
VLLM_MODEL_DEFAULTS = (*SGLANG_MODEL_DEFAULTS, "presence_penalty", "frequency_penalty", "max_new_tokens")
VLLM_MODEL_DEFAULTS += ("skip_special_tokens",)
DEFAULTS_FIX = "Send the key (every preset of oc-repl names temperature, top_p and the token budget), or restart "
DEFAULTS_FIX += "the server without the defaults: sglang without --preferred-sampling-params, vLLM with "
DEFAULTS_FIX += "--generation-config vllm."


@dataclass(frozen=True)
class ServerInfo:
    name: str  # "sglang" or "vLLM"
    version: str
    tool_parser: str | None = None
    preferred: dict[str, Any] = field(default_factory=dict)  # sglang's --preferred-sampling-params
    model_defaults: bool = False  # fills keys from generation_config.json on the chat route (sglang) or all (vLLM)

    def said(self) -> str:
        parser = f", tool-call parser {self.tool_parser}" if self.tool_parser else ""
        return f"{self.name} {self.version or '(version not told)'}{parser}"


def server_info(get_json: Callable[[str], Any], api_base: str) -> ServerInfo | None:
    root = server_root(api_base)
    for path in ("/server_info", "/get_server_info"):
        info = get_json(root + path)
        if isinstance(info, dict) and "model_path" in info:  # sglang's resolved server arguments
            preferred = info.get("preferred_sampling_params") or {}
            if isinstance(preferred, str):  # as given on the command line, before the server resolved it
                try:
                    preferred = json.loads(preferred)
                except ValueError:
                    preferred = {}
            return ServerInfo(
                "sglang",
                str(info.get("version") or ""),
                info.get("tool_call_parser") or None,
                preferred if isinstance(preferred, dict) else {},
                info.get("sampling_defaults") == "model",
            )
    version = get_json(root + "/version")
    if isinstance(version, dict) and isinstance(version.get("version"), str):
        return ServerInfo("vLLM", version["version"], model_defaults=True)
    return None


def sent_keys(wire: str, sampling: dict[str, Any]) -> set[str]:
    """The sampling keys a request on `wire` carries for `sampling` (a preset's options), in sglang's names."""
    from oc_repl.client.prompt import sglang_sampling
    from oc_repl.client.text_wires import COMPLETIONS_NAMES

    sglang_names = {openai: name for name, openai in COMPLETIONS_NAMES.items()}
    built = wire_of(wire)
    if not built.text:  # the chat wire sends the options as they are
        return {sglang_names.get(key, key) for key in sampling}
    body = built.part("body")("m", [0], sglang_sampling(sampling))
    params = body.get("sampling_params", body)
    return {sglang_names.get(key, key) for key in params}


def model_defaults(tokenizer: Path | None) -> dict[str, Any] | None:
    """The sampling keys of `--tokenizer`'s generation_config.json (None when there is no folder to read)."""
    from oc_repl.client.chat_template import read_json
    from oc_repl.errors import UsageError

    if tokenizer is None:
        return None
    folder = tokenizer if tokenizer.is_dir() else tokenizer.parent
    try:
        return read_json(folder / "generation_config.json")
    except UsageError:  # unreadable, or no object: nothing it would fill can be told
        return {}


def server_checks(
    get_json: Callable[[str], Any], api_base: str, wire: str, tokenizer: Path | None, chat_rows: list[str]
) -> list[Found]:
    """`chat_rows`: the deviation rows `--exact` leaves on the chat wire and on no text wire."""
    from oc_repl.client.wires import known
    from oc_repl.training import SAMPLING_PRESETS

    info = server_info(get_json, api_base)
    if info is None:
        return [
            (
                "server version",
                "ok",
                "the server does not say what it is (neither sglang's /server_info nor vLLM's /version)",
            )
        ]
    text = " or ".join(name for name, w in known().items() if w.text)
    where = f"on the chat wire {', '.join(chat_rows)} apply; --wire {text} has none of them" if chat_rows else ""
    data = {"server": info.name, "version": info.version, "tool_parser": info.tool_parser, "chat_wire_rows": chat_rows}
    checks: list[Found] = [("server version", "ok", "; ".join(filter(None, (info.said(), where))), "", data)]
    sent = sent_keys(wire, dict(SAMPLING_PRESETS["training"]))
    filled: dict[str, list[str]] = {}
    reaching = wire_of(wire).filled_by
    if info.preferred and f"{info.name} preferred" in reaching:
        filled["--preferred-sampling-params"] = sorted(set(info.preferred) - sent)
    if info.model_defaults and f"{info.name} model" in reaching:
        config = model_defaults(tokenizer)
        if config is None:
            finding = f"{info.name} fills keys a {wire}-wire request leaves out from the model's generation_config.json"
            checks.append(("server defaults", "ok", finding, "Pass --tokenizer (the served model's folder) to check."))
            return checks
        names = VLLM_MODEL_DEFAULTS if info.name == "vLLM" else SGLANG_MODEL_DEFAULTS
        filled["generation_config.json"] = sorted(k for k in names if config.get(k) is not None and k not in sent)
    filled = {source: keys for source, keys in filled.items() if keys}
    if filled:
        said = "; ".join(f"{source} fills {', '.join(keys)}" for source, keys in filled.items())
        finding = f"{info.name} fills what a {wire}-wire request leaves out: {said}"
        checks.append(("server defaults", "warn", finding, DEFAULTS_FIX, {"filled": filled}))
    else:
        finding = f"a {wire}-wire request names every key the server would fill"
        checks.append(("server defaults", "ok", finding, "", {"filled": {}}))
    return checks
