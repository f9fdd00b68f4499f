"""`doctor` on the wires: which of the three routes answer, whether the server runs a tool-call parser (read from the
tool-call probe: structured calls come only from a parser), which wire `--exact` will use, and which model and
chat template the server serves against `--tokenizer`'s (oc_repl/client/served.py)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from oc_repl.client.api_base import server_root

if TYPE_CHECKING:
    from oc_repl.doctor import Doctor

# A check as oc_repl.doctor.Check takes it: (name, status, finding[, fix[, data]]).
Found = tuple[Any, ...]
EXACT_FIX = "Serve with sglang (its /generate), or run --exact --wire completions against this server."


def answers(doctor: Doctor, wire: str) -> bool:
    """One token asked for on the wire's own route: does it answer 200 with JSON?"""
    import httpx

    model = doctor.report.model or ""
    if wire == "generate":
        url, body = server_root(doctor.report.api_base) + "/generate", {"text": "Hi", "sampling_params": {}}
        body["sampling_params"] = {"max_new_tokens": 1, "temperature": 0}
    else:
        url, body = doctor.report.api_base + "/completions", {"model": model, "prompt": "Hi", "max_tokens": 1}
    try:
        response = doctor.http.post(url, json=body, timeout=60.0)
        return response.status_code == 200 and isinstance(response.json(), dict)
    except (httpx.HTTPError, ValueError):
        return False


def wire_checks(doctor: Doctor, wire: str, tokenizer: Path | None) -> list[Found]:
    found = {"chat": any(c.name == "chat" and c.status == "ok" for c in doctor.report.checks)}
    found.update({wire: answers(doctor, wire) for wire in ("completions", "generate")})
    calls = next((c for c in doctor.report.checks if c.name == "tool calls"), None)
    parser = calls.data.get("source") == "native" if calls is not None else None
    routes = {"chat": "/v1/chat/completions", "completions": "/v1/completions", "generate": "/generate"}
    listed = ", ".join(f"{routes[w]} {'answers' if ok else 'does not answer'}" for w, ok in found.items())
    said = {True: "a tool-call parser is on", False: "no tool-call parser", None: "tool-call parser unknown"}[parser]
    exact = wire if wire != "chat" else "generate"  # --exact takes camel to /generate unless --wire names another
    data: dict[str, Any] = {"answers": found, "tool_parser": parser, "exact_wire": exact}
    finding = f"{listed}; {said}; --exact will use the {exact} wire"
    checks: list[Found] = []
    if found[exact]:
        constrained = " (the chat wire's calls may be constrained by it)" if parser else ""
        checks.append(("wires", "ok", finding + constrained, "", data))
    else:
        checks.append(("wires", "warn", f"{finding}, which this server does not answer", EXACT_FIX, data))
    checks.append(_served(doctor, tokenizer))
    return checks


def _served(doctor: Doctor, tokenizer: Path | None) -> Found:
    from oc_repl.client.served import TOKENIZER_HINT, differences, served_model
    from oc_repl.errors import UsageError

    served = served_model(doctor._get_json, doctor.report.api_base, doctor.report.model)
    if served is None:
        return ("served model", "ok", "the server does not say which model or template it serves")
    data = {"source": served.source, "model": served.model, "template_sha256": served.template_sha256}
    if tokenizer is None:
        fix = "Pass --tokenizer (that folder) to check it against the files the text wires render with."
        return ("served model", "ok", served.said(), fix, data)
    from oc_repl.client.model_files import load_model_files

    try:
        files = load_model_files(tokenizer)
    except UsageError as exc:
        return ("served model", "warn", f"{served.said()}; --tokenizer: {exc.message}", exc.hint, data)
    different = differences(served, files)
    if different:
        return ("served model", "warn", f"{served.said()}; " + "; ".join(different), TOKENIZER_HINT, data)
    return ("served model", "ok", f"{served.said()}, as --tokenizer names", "", data)
