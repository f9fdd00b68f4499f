"""The wires, as the rest of oc-repl sees them: how a turn's request goes to the server and its reply comes back.
Plain data, cheap to import; each text wire names its request builder and reply readers ("module:name", imported when
used), so no part outside the client branches on a wire's name.

chat: the server renders the prompt from the messages (`/v1/chat/completions`). The text wires render it on the client
with the served model's chat template (and tokenizer) as the training harness did: `/v1/completions`, and sglang's
native `/generate` at the server's root.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from oc_repl import plugins
from oc_repl.client.api_base import server_root
from oc_repl.errors import UsageError
from oc_repl.lazy import load
from oc_repl.rows import DOCTOR, EVERYWHERE, Option, row


@dataclass(frozen=True)
class Wire:
    name: str
    route: str  # below the API base, or below the server's root (`at_root`)
    text: bool = False  # the client renders (and tokenizes) the prompt itself
    at_root: bool = False
    body: str = ""  # (model, prompt, sglang sampling params, stream) -> the JSON posted
    read: str = ""  # (raw JSON, max tokens, tool names, end-of-sequence texts) -> Reply
    stream: str = ""  # a class folding the streamed reply: (on_delta, tool names, eos texts, started)
    options: tuple[Option, ...] = ()  # its settings
    doctor: str = ""  # "module:name" of its check of this machine, for `doctor`: () -> (name, status, finding, fix)
    # the server settings that fill a sampling key its request leaves out (doctor_server.py names them): sglang's
    # OpenAI routes name every key themselves, so its preferred parameters reach only /generate
    filled_by: tuple[str, ...] = ()

    def url(self, api_base: str) -> str:
        return (server_root(api_base) if self.at_root else api_base) + self.route

    def part(self, which: str) -> Any:
        """One of its parts (`body`, `read`, `stream`), imported now."""
        return load(getattr(self, which))


_TEXT = "oc_repl.client.text_wires"
TOKENIZER = row(
    "tokenizer",
    "Path",
    None,
    "The served model's folder (or its tokenizer.json, tokenizer_config.json or chat_template.jinja): its chat "
    "template and tokenizer, for the completions and generate wires",
    *EVERYWHERE,
    DOCTOR,
    path="existing path",
    shown="none",
)
WIRES: dict[str, Wire] = {
    wire.name: wire
    for wire in (
        Wire("chat", "/chat/completions", filled_by=("sglang model", "vLLM model")),
        Wire(
            "completions",
            "/completions",
            text=True,
            body=f"{_TEXT}:completions_body",
            read=f"{_TEXT}:completions_reply",
            stream=f"{_TEXT}:CompletionsStream",
            options=(TOKENIZER,),
            filled_by=("vLLM model",),
        ),
        Wire(
            "generate",
            "/generate",
            text=True,
            at_root=True,
            body=f"{_TEXT}:generate_request",
            read=f"{_TEXT}:generate_reply",
            stream=f"{_TEXT}:GenerateStream",
            options=(TOKENIZER,),
            filled_by=("sglang preferred",),
        ),
    )  # fmt: skip
}
CHAT = next(wire for wire in WIRES.values() if not wire.text)  # the server renders the prompt
TEXT_WIRES = tuple(name for name, wire in WIRES.items() if wire.text)


def known() -> dict[str, Wire]:
    """The built-in wires, and those installed packages register (oc_repl/plugins.py)."""
    return {**WIRES, **{wire.name: wire for wire in plugins.registered(plugins.WIRES, Wire).values()}}


def find(name: str) -> Wire | None:
    """The wire of that name, if there is one; installed packages' are looked at only for a name no built-in one has."""
    return WIRES.get(name) or known().get(name)


def wire_of(name: str) -> Wire:
    """The wire of that name; a usage error naming the known ones for any other."""
    wire = find(name)
    if wire is None:
        raise UsageError(f"unknown wire {name!r}; known: {', '.join(known())}")
    return wire
