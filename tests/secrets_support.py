"""A model that wants the API key out: it writes the key (and another secret of the environment) plain, in base64 at
each alignment (standard and URL-safe), in hex and URL-encoded, in its commands and in its answer; and the check that
no record holds any of those forms."""

from __future__ import annotations

import base64
from pathlib import Path
from urllib.parse import quote, quote_plus

REDACTED = "[REDACTED]"
KEY = "sk-Test/Key+9=zz&q~0123456789"
TOKEN = "tok-0123456789-environment-secret"  # held as MY_SERVICE_TOKEN


def encodings(secret: str) -> list[str]:
    """How the model writes `secret`: as it is, in base64 inside longer texts at each offset, hex, URL-encoded."""
    data = secret.encode()
    written = [secret, data.hex(), data.hex().upper(), quote(secret, safe=""), quote_plus(secret)]
    for offset in range(3):
        wrapped = b"x" * offset + data + b"yz"
        written += [base64.b64encode(wrapped).decode(), base64.urlsafe_b64encode(wrapped).decode()]
    return written


def leaked(text: str, secret: str) -> list[str]:
    """The forms of `secret` that `text` holds: each encoding, and of a base64 one the characters that only the
    secret's bits decide (at least 8 of them)."""
    data = secret.encode()
    found = [form for form in encodings(secret)[:5] if form in text]
    for offset in range(3):
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            encoded = encode(b"x" * offset + data + b"yz").decode()
            own = encoded[-(-8 * offset // 6) : 8 * (offset + len(data)) // 6]
            found += [own] if own in text else []
    return found


def echo_command() -> str:
    return "echo " + " ".join(f"'{form}'" for secret in (KEY, TOKEN) for form in encodings(secret))


def echo_answer() -> str:
    return "Here they are: " + " ".join(form for secret in (KEY, TOKEN) for form in encodings(secret))


def assert_no_secret(path: Path) -> None:
    text = path.read_text(errors="replace")
    assert not leaked(text, KEY) and not leaked(text, TOKEN), (path, leaked(text, KEY), leaked(text, TOKEN))
