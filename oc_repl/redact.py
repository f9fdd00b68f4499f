"""One redaction for every record oc-repl writes: transcripts, bench results and logs, exports, Harbor's trajectory
and metadata.

It covers the API key and every secret-looking value of this process's environment (a name ending in _TOKEN, _KEY or
_SECRET, or holding PASSWORD, in any case; a value of at least MIN_LENGTH characters), each as it is and as a model
that wants it out would write it: base64 (standard and URL-safe, at each of the three alignments it can have inside
a longer base64 text), hex (either case) and URL-encoded. Secrets are never put into events in the first place;
this is the second line of defence, against a model that reads one and echoes it.

The environment's secrets are gathered once per process, on first use: a one-shot run pays for them only when it
writes its first record.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import os
import re
from collections.abc import Iterable
from typing import IO, Any

REDACTED = "[REDACTED]"
MIN_LENGTH = 8
_SECRET_NAME = re.compile(r"(?i).*_(?:TOKEN|KEY|SECRET)|.*PASSWORD.*")  # matched whole


@functools.cache
def _environment() -> tuple[str, ...]:
    return tuple(value for name, value in os.environ.items() if _SECRET_NAME.fullmatch(name) and value)


def _base64_forms(data: bytes) -> set[str]:
    """The part of the base64 of `data` that is the same whatever bytes stand before and after it in a longer text:
    for each of the three offsets `data` can start at, the characters that hold its bits alone."""
    forms = set()
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + data).decode()
        start, end = -(-8 * offset // 6), 8 * (offset + len(data)) // 6
        middle = encoded[start:end]
        forms.update({middle, middle.replace("+", "-").replace("/", "_")})
    return forms


def forms(secret: str) -> set[str]:
    """`secret` as it is and encoded every way a record could hold it (inside JSON text too: escaped)."""
    from urllib.parse import quote, quote_plus

    data = secret.encode("utf-8", "surrogatepass")
    quoted = quote(secret, safe="")
    found = {secret, data.hex(), data.hex().upper(), quoted, quote_plus(secret)}
    found.add(re.sub("%[0-9A-F]{2}", lambda m: m.group().lower(), quoted))
    found |= _base64_forms(data)
    found |= {json.dumps(form, ensure_ascii=ascii)[1:-1] for form in found for ascii in (False, True)}
    return {form for form in found if len(form) >= MIN_LENGTH}


class Redactor:
    """Replaces every form of every secret with REDACTED, in text (`text`), in JSON data (`data`, keys included)
    and in a line of JSON (`json_line`, which stays valid JSON)."""

    def __init__(self, secrets: Iterable[str]) -> None:
        needles = set()
        for secret in secrets:
            if secret and len(secret) >= MIN_LENGTH:
                needles |= forms(secret)
        self.needles = tuple(sorted(needles, key=len, reverse=True))  # the longest first: a form inside another

    def __bool__(self) -> bool:
        return bool(self.needles)

    def text(self, text: str) -> str:
        for needle in self.needles:
            if needle in text:
                text = text.replace(needle, REDACTED)
        return text

    def data(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.data(k): self.data(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.data(v) for v in value]
        return value

    def json_line(self, line: str) -> str:
        """A line of JSON with every secret redacted inside its strings. The scan is a few substring searches; only
        a line that holds one is parsed and written again."""
        if not any(needle in line for needle in self.needles):
            return line
        from oc_repl.events import json_text

        return json_text(self.data(json.loads(line)))


@functools.lru_cache(maxsize=8)
def redactor(*keys: str) -> Redactor:
    """The redaction of this process: the environment's secrets and `keys` (the API key in use)."""
    return Redactor((*_environment(), *keys))


class RedactedStream:
    """What a child process writes to a pipe, kept in a file with the secrets redacted a line at a time (a secret cut
    in two by a read is whole again at the line's end). `pump` when the pipe is readable; False at its end."""

    LONGEST = 1 << 20  # a line longer than this is written as it stands

    def __init__(self, source: IO[bytes], target: IO[bytes], redact: Redactor) -> None:
        self.source, self.target, self.redact = source, target, redact
        self._partial = b""
        os.set_blocking(source.fileno(), False)

    def fileno(self) -> int:
        return self.source.fileno()

    def pump(self) -> bool:
        data = self._read()
        if data:
            self._feed(data)
        return data != b""

    def _read(self) -> bytes | None:
        """What the pipe holds now (b"" at its end, None when nothing is there yet)."""
        try:
            return os.read(self.fileno(), 1 << 16)
        except BlockingIOError:
            return None

    def _feed(self, data: bytes) -> None:
        *whole, self._partial = (self._partial + data).split(b"\n")
        if whole:
            self._write(b"\n".join(whole) + b"\n")
        if len(self._partial) > self.LONGEST:
            self._write(self._partial)
            self._partial = b""

    def _write(self, data: bytes) -> None:
        text = self.redact.text(data.decode("utf-8", "surrogateescape"))
        self.target.write(text.encode("utf-8", "surrogateescape"))
        self.target.flush()

    def close(self) -> None:
        """What is left in the pipe now (it is not waited for), then the file."""
        with contextlib.suppress(OSError, ValueError):
            while data := self._read():
                self._feed(data)
        if self._partial:
            self._write(self._partial)
            self._partial = b""
        self.target.close()
        self.source.close()
