"""What can go wrong talking to a model server: how each failure reads, and whether another attempt may help.

Everything a server sends is data to check. A reply of a shape nothing can be read from is the server's fault and
is not retried (it would come back the same); a reply cut short, a broken connection, a silent server, an error the
server reports, HTTP 408/429/5xx are retried. httpx is imported only once a failure has to be classified.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from oc_repl.calls import bounded_json
from oc_repl.errors import ContextOverflow, ServerError, ServerRefused, ServerUnreachable

START_HINT = (
    "Start a server, for example:\n"
    "  python -m sglang.launch_server --model-path <model> --tool-call-parser qwen25 --port 30000\n"
    "  vllm serve <model> --enable-auto-tool-choice --tool-call-parser hermes --port 8000\n"
    "then point --api-base at it (e.g. http://127.0.0.1:30000/v1)."
)
# The longest a retry waits for a server that answers with Retry-After. A server that asks for longer is down or
# rate-limited for real: a run that sat silent for more than a minute per attempt would look hung, and with the
# default three retries this cap already bounds the wait to three minutes before the run ends with exit 5.
RETRY_AFTER_CAP = 60.0
_ERROR_BODY, _ERROR_BODY_SECONDS = 64 * 1024, 10.0  # an error body is read no further: its start says what went wrong


class Incomplete(Exception):
    """The server ended a response before it was whole (no finish_reason, no choices, a cut body)."""


class Stalled(Incomplete):
    """Bytes kept coming (keepalive comments, empty deltas) but nothing useful for idle_timeout seconds."""


class NoStream(Exception):
    """A stream with tools that carried no data at all: llama-cpp-python's answer when it cannot stream a call."""


class Malformed(Exception):
    """A reply of a shape nothing can be read from (a null choice, a call that is a string, a number for a name)."""


class StatusError(Exception):
    """An answer with a status other than 2xx. `status_code` is read by callers (the doctor) from the cause."""

    def __init__(self, status_code: int, body: Any, said: str, retry_after: float | None, location: str) -> None:
        super().__init__(f"HTTP {status_code}: {said}")
        self.status_code, self.body, self.said = status_code, body, said
        self.retry_after, self.location = retry_after, location


class Reported(Exception):
    """An `{"error": ...}` object where the reply should be: inside a 200 stream, or as a 200 body."""

    def __init__(self, error: Any) -> None:
        said = error.get("message") if isinstance(error, dict) else error
        self.said = said.strip()[:2000] if isinstance(said, str) and said.strip() else "an error occurred"
        self.body = error
        super().__init__(self.said)


class Failure(NamedTuple):
    error: ServerError
    retry: bool
    asked: float | None = None  # seconds the server asked to wait (Retry-After), uncapped


def readable(fold: Callable[..., Any], *args: Any) -> Any:
    """Backstop for the wire helpers: a reply they cannot digest is the server's fault, not an internal error."""
    try:
        return fold(*args)
    except (AttributeError, TypeError, ValueError, KeyError, IndexError) as exc:
        raise Malformed(f"{type(exc).__name__}: {exc}") from exc


SILENT_HINT = (
    "A busy server may answer later than that: give it more time (--idle-timeout for streams, --request-timeout "
    "otherwise), or fewer trials at once (bench -j)."
)


def classify(exc: Exception, where: str, silence: float) -> Failure:
    """`silence`: the read timeout in force (the idle timeout for streams, the request timeout otherwise)."""
    import httpx

    if isinstance(exc, StatusError):
        return _status_failure(exc, where)
    if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
        return Failure(ServerUnreachable(f"No model server answers at {where}.", hint=START_HINT), retry=True)
    if isinstance(exc, httpx.TimeoutException):
        said = f"The model server at {where} sent nothing for {silence:g}s."
        return Failure(ServerError(said, hint=SILENT_HINT), retry=True)
    if isinstance(exc, httpx.RequestError):
        text = f"The connection to the model server at {where} broke: {_root_cause(exc)}."
        return Failure(ServerError(text), retry=True)
    if isinstance(exc, Reported):
        if overflow := context_overflow(exc.body, exc.said):
            return Failure(overflow, retry=False)
        return Failure(ServerError(f"The model server at {where} reported an error: {exc.said}"), retry=True)
    if isinstance(exc, Stalled):
        said = f"The model server at {where} sent nothing useful for {silence:g}s."
        return Failure(ServerError(said, hint=SILENT_HINT), retry=True)
    if isinstance(exc, Malformed):
        return Failure(ServerError(f"The model server at {where} sent a malformed reply: {exc}."), retry=False)
    if isinstance(exc, Incomplete):
        return Failure(ServerError(f"The model server at {where} sent a broken response: {exc}."), retry=True)
    return Failure(ServerError(f"The model server at {where} failed: {exc}"), retry=False)


def _status_failure(exc: StatusError, where: str) -> Failure:
    status, said = exc.status_code, exc.said
    if status in (400, 413) and (overflow := context_overflow(exc.body, said)):
        return Failure(overflow, retry=False)
    hint = _hint(status, said, exc.location)
    kind = ServerRefused if status in (401, 403, 404) else ServerError
    error = kind(f"The model server at {where} answered HTTP {status}: {said}", hint=hint)
    return Failure(error, retry=status >= 500 or status in (408, 429), asked=exc.retry_after)


def retry_wait(failure: Failure, attempt: int, backoff: float) -> tuple[float, str]:
    """(seconds to wait after failed attempt number `attempt`, the sentence that says so)."""
    if failure.asked is None:
        delay = min(backoff * 2 ** (attempt - 1), 8.0)
        return delay, f"Retrying in {delay:g}s."
    if failure.asked > RETRY_AFTER_CAP:
        most = f"{RETRY_AFTER_CAP:g}s is the most oc-repl waits"
        return RETRY_AFTER_CAP, f"Retrying in {RETRY_AFTER_CAP:g}s (the server asked for {failure.asked:g}s; {most})."
    return failure.asked, f"Retrying in {failure.asked:g}s, as the server asked (Retry-After)."


def retry_after(value: str | None, now: float | None = None) -> float | None:
    """The seconds a Retry-After header asks for: delay-seconds or an HTTP date (RFC 9110 10.2.3), at least 0,
    to a tenth of a second; None when absent or unreadable (the usual backoff applies then)."""
    if not value or not value.strip():
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        from email.utils import parsedate_to_datetime

        try:
            when = parsedate_to_datetime(value.strip())
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
        if when.tzinfo is None:  # HTTP dates are in GMT; parsedate leaves "-0000" naive
            from datetime import timezone

            when = when.replace(tzinfo=timezone.utc)
        seconds = when.timestamp() - (time.time() if now is None else now)
    if not math.isfinite(seconds):
        return None
    return round(max(0.0, seconds), 1)


def server_message(body: Any, text: str) -> str:
    """What an error says: its `message` or `detail`, or the error itself when it is a string, else the whole
    body text; clipped."""
    for key in ("message", "detail"):
        said = body.get(key) if isinstance(body, dict) else None
        if isinstance(said, str) and said.strip():
            return said.strip()[:2000]
    said = (body if isinstance(body, str) else text).strip()
    return said[:500] if said else "(no details)"


def _hint(status: int, said: str, location: str) -> str:
    if status in (401, 403):
        return "Check --api-key (OPENAI_API_KEY)."
    if status == 404:
        return "Check --api-base (it usually ends in /v1) and --model (see GET /v1/models)."
    if 300 <= status < 400:  # redirects are not followed: a redirected POST would lose its body
        return f"The server redirects to {location or 'another address'}; point --api-base there."
    if status == 400 and "tool" in said.lower():
        return (
            "The server may lack tool calling: vLLM needs --enable-auto-tool-choice --tool-call-parser hermes, "
            "sglang --tool-call-parser qwen25."
        )
    return ""


def _causes(exc: BaseException) -> Iterator[BaseException]:
    seen = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _root_cause(exc: BaseException) -> str:
    last = list(_causes(exc))[-1]  # the deepest cause names what actually happened
    return str(last) or type(last).__name__


# patterns, not compiled at import: they are needed only once a request failed (re caches them then)
_VLLM_LIMIT = r"maximum context length is (\d+) tokens"
_VLLM_ASKED = r"(?:you requested|your request has) (\d+)"
_VLLM_BUDGET = r"too large: (\d+)\..*?maximum context length is (\d+) tokens and your request has (\d+)"
_SGLANG = r"input \((\d+) tokens\) is longer than the model's context length \((\d+) tokens\)"
_OVERFLOW_WORDS = ("context_length_exceeded", "context length", "context size", "context window")


def context_overflow(body: Any, message: str) -> ContextOverflow | None:
    """The overflow error of vLLM, sglang or llama.cpp, with both numbers when the server gave them."""
    asked = limit = None
    larger = "serve the model with a larger context (sglang --context-length, vLLM --max-model-len, llama.cpp -c)"
    larger += ". Server said: " + message
    if m := re.search(_VLLM_BUDGET, message):  # newer vLLM: the prompt fits, prompt + max_tokens does not
        new, limit, prompt = (int(g) for g in m.groups())
        text = f"The prompt ({prompt} tokens) plus the requested new tokens ({new}) exceed the context ({limit})."
        return ContextOverflow(text, hint=f"Lower --max-tokens (at most {limit - prompt}) or {larger}")
    if isinstance(body, dict) and body.get("type") == "exceed_context_size_error":
        asked, limit = _int(body.get("n_prompt_tokens")), _int(body.get("n_ctx"))
    elif m := re.search(_VLLM_LIMIT, message):
        limit = int(m.group(1))
        if a := re.search(_VLLM_ASKED, message):
            asked = int(a.group(1))
    elif m := re.search(_SGLANG, message):
        asked, limit = int(m.group(1)), int(m.group(2))
    elif not any(w in message.lower() for w in _OVERFLOW_WORDS):
        return None
    if asked is not None and limit is not None:
        text = f"The conversation no longer fits the model's context: {asked} tokens, the limit is {limit}."
    elif limit is not None:
        text = f"The conversation no longer fits the model's context of {limit} tokens."
    else:
        text = "The conversation no longer fits the model's context."
    return ContextOverflow(text, hint=f"Start a new conversation, lower --max-tokens, or {larger}")


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def status_error(response: Any, httpx: Any) -> StatusError:
    """A response whose status is not 2xx, with what its body says (read no further than its start)."""
    data, until = b"", time.monotonic() + _ERROR_BODY_SECONDS
    try:
        for piece in response.iter_bytes():
            data += piece
            if len(data) > _ERROR_BODY or time.monotonic() > until:
                break
    except httpx.HTTPError:
        pass  # what arrived is all there is to quote
    text = data[:_ERROR_BODY].decode("utf-8", "replace")
    try:
        body: Any = bounded_json(text)
    except ValueError:
        body = text
    if isinstance(body, dict) and "error" in body:  # {"error": {...}} (OpenAI, llama.cpp) or {"error": "..."}
        body = body["error"]
    headers = response.headers
    wait = retry_after(headers.get("retry-after"))
    return StatusError(response.status_code, body, server_message(body, text), wait, headers.get("location", ""))
