"""`doctor` on the wires: which of the three routes answer, whether the server runs a tool-call parser (read from the
tool-call probe: structured calls come only from a parser), which wire `--exact` will use, and which model and
chat template the server serves against `--tokenizer`'s (oc_repl/client/served.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from oc_repl.client.wires import CHAT, Wire, known, wire_of
from oc_repl.config import OPTIONS
from oc_repl.doctor_report import Report
from oc_repl.protocols import kind_of


class Doctor(Protocol):
    """What the wire checks need of the doctor that runs them (doctor.py): its report so far, its HTTP client."""

    report: Report
    http: Any  # an httpx.Client

    def get_json(self, url: str) -> Any: ...


# A check as oc_repl.doctor.Check takes it: (name, status, finding[, fix[, data]]).
Found = tuple[Any, ...]
EXACT_FIX = "Serve with sglang (its /generate), or run --exact --wire completions against this server."


def answers(doctor: Doctor, wire: Wire) -> bool:
    """One token asked for on the wire's own route, in its own request shape: does it answer 200 with JSON?"""
    import httpx

    params = {"max_new_tokens": 1, "temperature": 0}
    body = wire.part("body")(doctor.report.model or "", "Hi", params)
    try:
        response = doctor.http.post(wire.url(doctor.report.api_base), json=body, timeout=60.0)
        return response.status_code == 200 and isinstance(response.json(), dict)
    except (httpx.HTTPError, ValueError):
        return False


def wire_checks(doctor: Doctor, wire: str, tokenizer: Path | None) -> list[Found]:
    every = known()  # installed packages' text wires are probed alike
    found = {CHAT.name: any(c.name == "chat" and c.status == "ok" for c in doctor.report.checks)}
    found.update({name: answers(doctor, text) for name, text in every.items() if text.text})
    calls = next((c for c in doctor.report.checks if c.name == "tool calls"), None)
    parser = calls.data.get("source") == "native" if calls is not None else None
    routes = {name: urlsplit(w.url(doctor.report.api_base)).path for name, w in every.items()}
    listed = ", ".join(f"{routes[w]} {'answers' if ok else 'does not answer'}" for w, ok in found.items())
    said = {True: "a tool-call parser is on", False: "no tool-call parser", None: "tool-call parser unknown"}[parser]
    # --exact takes the checkpoint's protocol to the wire its training posted on, unless --wire names another
    exact = wire if wire_of(wire).text else kind_of(OPTIONS["protocol"].default).exact.get("wire", wire)
    data: dict[str, Any] = {"answers": found, "tool_parser": parser, "exact_wire": exact}
    finding = f"{listed}; {said}; --exact will use the {exact} wire"
    checks: list[Found] = []
    if found[exact]:
        constrained = " (the chat wire's calls may be constrained by it)" if parser else ""
        checks.append(("wires", "ok", finding + constrained, "", data))
    else:
        checks.append(("wires", "warn", f"{finding}, which this server does not answer", EXACT_FIX, data))
    checks.append(_served(doctor, tokenizer))
    from oc_repl.doctor_server import server_checks

    return checks + server_checks(doctor.get_json, doctor.report.api_base, wire, tokenizer, _chat_rows())


def _chat_rows() -> list[str]:
    """The deviation rows `--exact` leaves on for the default protocol on the chat wire and on none of the text
    wires: what a server's own rendering brings."""
    from oc_repl.config import RunSettings, exact_settings
    from oc_repl.deviations import from_settings

    def on(wire: str) -> list[str]:
        settings = RunSettings(exact=True, wire=wire, tokenizer=Path("."), given=frozenset({"wire", "tokenizer"}))
        return from_settings(exact_settings(settings)).names()

    text = set().union(*(on(name) for name, w in known().items() if w.text))
    return [name for name in on(CHAT.name) if name not in text]


def _served(doctor: Doctor, tokenizer: Path | None) -> Found:
    from oc_repl.client.served import TOKENIZER_HINT, differences, served_model
    from oc_repl.errors import UsageError

    served = served_model(doctor.get_json, doctor.report.api_base, doctor.report.model)
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
