"""Before any trial, each server a bench uses is asked what doctor asks first: its models, and a one-token reply.
A bench against a server that cannot answer would only fill its directory with server errors."""

from __future__ import annotations

from oc_repl.config import RunSettings
from oc_repl.errors import ServerError

PROBE = [{"role": "user", "content": "Reply with one word: ready"}]


def check_servers(settings: dict[str, RunSettings]) -> None:
    """A ServerError (exit 5) naming the server and what it said, for the first one that does not answer."""
    from oc_repl.client.chat import ChatClient
    from oc_repl.client.wires import CHAT, wire_of

    seen = set()
    for each in settings.values():
        wire = wire_of(each.wire)
        wire = CHAT if wire.text else wire  # a text wire's prompt needs the model's files: its server is asked a chat
        key = (each.api_base, each.model, each.api_key, wire.name)
        if key in seen:
            continue
        seen.add(key)
        client = ChatClient(
            each.api_base,
            each.api_key,
            each.model,
            stream=False,
            retries=min(each.retries, 1),
            idle_timeout=each.idle_timeout,
            request_timeout=min(each.request_timeout, 120.0),
            wire=wire,
        )
        try:
            client.resolve_model()
            client.complete(PROBE, {"max_tokens": 1, "temperature": 0, "stream": False})
        except ServerError as exc:
            exc.message = f"the bench's server check failed, before any trial: {exc.message}"
            raise
        finally:
            client.close()


def served_models(api_bases: list[str], api_key: str) -> dict[str, str]:
    """The model each server says it serves (the first it lists), for servers that all answer; {} otherwise (the
    arms are then told apart by address). A server that does not answer is the server check's to report."""
    from oc_repl.client.chat import ChatClient

    found = {}
    for api_base in api_bases:
        client = ChatClient(api_base, api_key, "", stream=False, retries=0, request_timeout=10.0)
        try:
            found[api_base] = client.resolve_model()
        except ServerError:
            return {}
        finally:
            client.close()
    return found
