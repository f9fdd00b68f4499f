"""The api base, checked before anything is sent: a usage error, not a server that cannot be reached."""

from __future__ import annotations

from urllib.parse import urlsplit

from oc_repl.errors import UsageError


def check_api_base(api_base: str) -> str:
    """The api base without surrounding blanks or trailing slashes; a UsageError unless it is an http(s) URL with
    a host (and, if given, a numeric port)."""
    base = (api_base or "").strip().rstrip("/")
    try:
        parts = urlsplit(base)
        host = parts.hostname or ""
        usable = parts.scheme in ("http", "https") and bool(host) and not any(c.isspace() for c in host)
        usable = usable and (parts.port or 0) >= 0
    except ValueError:  # a port that is no number or out of range, a bracketed host that is no IPv6 address
        usable = False
    if not usable:
        raise unusable(api_base)
    return base


def unusable(api_base: str, why: str = "") -> UsageError:
    said = f"The api base must be an http(s) URL, not {api_base!r}{f' ({why})' if why else ''}."
    return UsageError(said, hint="For example --api-base http://127.0.0.1:30000/v1")


def server_root(api_base: str) -> str:
    """The server's own root for its native routes (sglang's `/generate`): the api base without a trailing `/v1`."""
    return check_api_base(api_base).removesuffix("/v1")
