"""OpenAI-compatible chat client: streaming, accumulation, reasoning fields, salvage, truncation, retries.

Built on the official `openai` SDK, imported lazily so commands that never talk to a server (such as
`oc-repl --version`) stay fast. The SDK's own retries are off: it cannot retry a stream that breaks
half-way, so one bounded loop here covers every failure the same way.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from oc_repl.client.wire import StreamAccumulator, ThinkRouter, build_reply, normalise_history
from oc_repl.errors import ContextOverflow, ServerError, ServerUnreachable
from oc_repl.types import Reply

OnDelta = Callable[[str, str], None]
OnRetry = Callable[[str, int], None]

_START_HINT = (
    "Start a server, for example:\n"
    "  python -m sglang.launch_server --model-path <model> --tool-call-parser qwen25 --port 30000\n"
    "  vllm serve <model> --enable-auto-tool-choice --tool-call-parser hermes --port 8000\n"
    "then point --api-base at it (e.g. http://127.0.0.1:30000/v1)."
)
_CONNECT_FAILURES = ("ConnectError", "ConnectTimeout")


class _Incomplete(Exception):
    """The server ended a response before it was whole (no finish_reason, no choices)."""


class _NoStream(Exception):
    """A stream with tools that carried no data at all: llama-cpp-python's answer when it cannot stream a call."""


class _Stalled(_Incomplete):
    """Bytes kept coming (keepalive comments, empty deltas) but nothing useful for idle_timeout seconds."""


class _Malformed(Exception):
    """A reply of a shape nothing can be read from (a null choice, a call that is a string, ...)."""


def _read(fold: Callable[..., Any], *args: Any) -> Any:
    """Backstop for the wire helpers: a reply they cannot digest is the server's fault, not an internal error."""
    try:
        return fold(*args)
    except (AttributeError, TypeError, ValueError, KeyError, IndexError) as exc:
        raise _Malformed(f"{type(exc).__name__}: {exc}") from exc


class _Watchdog:
    """Closes a stream once `limit` seconds pass without a meaningful delta (the reader updates `last`): the read
    timeout only measures gaps between bytes, which keepalive comments or empty deltas keep short forever."""

    def __init__(self, response: Any, limit: float) -> None:
        self.fired, self._response, self._limit, self.last = False, response, limit, time.monotonic()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="oc-repl-stream-watchdog", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._done.wait(min(0.25, self._limit / 4)):
            if time.monotonic() - self.last > self._limit:
                self.fired = True
                self._response.close()  # the reading loop fails on its next read
                return

    def stop(self) -> None:
        self._done.set()
        self._thread.join()


class _Failure(NamedTuple):
    error: ServerError
    retry: bool


class ChatClient:
    """One model server. `native_calls` / `salvaged_calls` count the calls handed out during the run.

    `complete()` returns a Reply; a truncated Reply never carries tool calls (they move to
    `malformed_calls`). `last_request` holds the body of the latest request, stream switches aside.
    """

    def __init__(
        self,
        api_base: str,
        api_key: str,
        model: str | None = None,
        *,
        stream: bool = True,
        retries: int = 3,
        idle_timeout: float = 120.0,
        request_timeout: float = 600.0,
        on_retry: OnRetry | None = None,
        backoff: float = 0.5,
    ) -> None:
        import openai

        self._openai = openai
        self.api_base = api_base.rstrip("/")
        self.model = model
        self.stream = stream
        self.attempts = 1 + max(0, retries)
        self.idle_timeout, self.request_timeout = idle_timeout, request_timeout
        self.on_retry, self.backoff = on_retry, backoff
        self.native_calls = self.salvaged_calls = 0
        self.last_request: dict[str, Any] = {}
        self.stream_tools = True  # False once the server showed it cannot stream replies to requests with tools
        self._streaming = stream
        connect = min(10.0, request_timeout)
        # A stream's read timeout is the longest silence between bytes; a plain response arrives
        # only once the whole generation is done, so its read timeout is the request timeout.
        self._stream_timeout = openai.Timeout(request_timeout, connect=connect, read=idle_timeout)
        self._plain_timeout = openai.Timeout(request_timeout, connect=connect)
        self._sdk = openai.OpenAI(
            base_url=self.api_base, api_key=api_key or "EMPTY", max_retries=0, timeout=self._plain_timeout
        )
        # The SDK's own HTTP layer (errors, SSE, timeouts) with the body as we build it and replies as plain dicts:
        # its typed `chat.completions.create` re-walks the whole history and every chunk through its models, which
        # cost milliseconds per turn for nothing (the raw JSON is what the transcript keeps anyway).
        self._stream_cls = openai.Stream[object]

    # --- public --------------------------------------------------------------------------------------

    def resolve_model(self) -> str:
        """The configured model, else the first id the server lists (asked once)."""
        if self.model:
            return self.model

        def fetch() -> str:
            page = self._sdk.models.list(timeout=self._openai.Timeout(60.0, connect=min(10.0, self.request_timeout)))
            ids = [m.id for m in getattr(page, "data", None) or [] if getattr(m, "id", None)]
            if not ids:
                raise ServerError(f"The server at {self.api_base} lists no models.", hint="Pass --model NAME.")
            return ids[0]

        self.model = self._with_retries(fetch)
        return self.model

    def complete(
        self, messages: list[dict[str, Any]], options: dict[str, Any], on_delta: OnDelta | None = None
    ) -> Reply:
        body = self.last_request = self._request_body(messages, options)
        wanted = bool(options.get("stream", self.stream))
        stream = self._streaming = wanted and (self.stream_tools or "tools" not in body)
        max_tokens = options.get("max_tokens") or options.get("max_completion_tokens")
        if stream:
            try:
                reply = self._with_retries(lambda: self._streamed(body, max_tokens, on_delta))
            except _NoStream:
                reply = None
            if reply is None:
                reply = self._plain_fallback(body, max_tokens)
        else:
            reply = self._with_retries(lambda: self._plain(body, max_tokens))
        native = sum(call.source == "native" for call in reply.tool_calls)
        self.native_calls += native
        self.salvaged_calls += len(reply.tool_calls) - native
        return reply

    # --- one attempt ---------------------------------------------------------------------------------

    def _request_body(self, messages: list[dict[str, Any]], options: dict[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model or self.resolve_model(), "messages": normalise_history(messages)}
        for key, value in options.items():
            if key not in ("stream", "stream_options", "extra_body"):  # the stream switches are set per request
                body[key] = value
        body.update(options.get("extra_body") or {})  # server-specific fields go on the wire as they are
        if not body.get("tools"):
            body.pop("tools", None)
            body.pop("tool_choice", None)
        else:  # llama-cpp-python drops the tools when tool_choice is omitted
            body.setdefault("tool_choice", "auto")
        return body

    def _post(self, body: dict[str, Any], stream: bool) -> Any:
        if stream:
            body = {**body, "stream": True, "stream_options": {"include_usage": True}}
        opts = {"timeout": self._stream_timeout if stream else self._plain_timeout}
        return self._sdk.post(
            "/chat/completions", body=body, cast_to=object, stream=stream, stream_cls=self._stream_cls, options=opts
        )

    def _streamed(self, body: dict[str, Any], max_tokens: int | None, on_delta: OnDelta | None) -> Reply:
        started, ttft = time.monotonic(), None
        acc = StreamAccumulator()
        router = ThinkRouter(on_delta) if on_delta else None
        chunks: list[dict[str, Any]] = []
        response = self._post(body, stream=True)
        watchdog = _Watchdog(response, self.idle_timeout)
        try:
            for data in response:
                if not isinstance(data, dict):
                    raise _Incomplete(f"the stream sent a chunk that is not a JSON object: {str(data)[:80]}")
                chunks.append(data)
                finish, usage = acc.finish_reason, acc.usage
                text, thought, moved = _read(acc.add, data)
                if text or thought or moved or acc.finish_reason is not finish or acc.usage is not usage:
                    watchdog.last = time.monotonic()  # meaningful progress, not a keepalive or an empty delta
                if ttft is None and (text or thought or moved):
                    ttft = time.monotonic() - started
                if router is not None:
                    if thought:
                        router.reasoning(thought)
                    if text:
                        router.content(text)
        except Exception as exc:
            if watchdog.fired:  # whatever the closed response raised, the cause is the stall
                raise _Stalled from exc
            # exactly APIConnectionError: a broken connection; its subclass APITimeoutError is a silent server
            if type(exc) is self._openai.APIConnectionError and not chunks and "tools" in body:
                raise _NoStream from exc  # llama-cpp-python may also drop the connection instead of closing cleanly
            raise
        finally:
            watchdog.stop()
            response.close()
        if acc.finish_reason is None:
            if watchdog.fired:
                raise _Stalled
            if not chunks and "tools" in body:
                raise _NoStream
            raise _Incomplete("the stream ended before the reply was complete")
        if router is not None:
            router.flush()
        message = acc.message()
        reply = _read(build_reply, message, acc.finish_reason, acc.usage, max_tokens)
        reply.raw = {"chunks": chunks, "message": message, "finish_reason": acc.finish_reason, "usage": acc.usage}
        reply.ttft_s, reply.duration_s = ttft, time.monotonic() - started
        return reply

    def _plain(self, body: dict[str, Any], max_tokens: int | None) -> Reply:
        started = time.monotonic()
        raw = self._post(body, stream=False)
        choices = raw.get("choices") if isinstance(raw, dict) else None
        if not choices or not isinstance(choices[0], dict):
            raise _Incomplete("the server answered without a choice")
        choice = choices[0]
        message = choice.get("message") or {}
        reply = _read(build_reply, message, choice.get("finish_reason"), raw.get("usage"), max_tokens)
        reply.raw = raw
        reply.duration_s = time.monotonic() - started
        return reply

    def _plain_fallback(self, body: dict[str, Any], max_tokens: int | None) -> Reply:
        """The same request unstreamed; later requests with tools skip the stream attempt."""
        self.stream_tools = self._streaming = False

        def attempt() -> Reply:
            try:
                return self._plain(body, max_tokens)
            except self._openai.APIConnectionError as exc:
                if _connect_failed(exc) or isinstance(exc, self._openai.APITimeoutError):
                    raise
                # the server resets the connection its failed stream used, and the pool hands that one out first
                return self._plain(body, max_tokens)

        return self._with_retries(attempt)

    # --- failures ------------------------------------------------------------------------------------

    def _with_retries(self, attempt: Callable[[], Any]) -> Any:
        failure: _Failure | None = None
        cause: BaseException | None = None
        for number in range(1, self.attempts + 1):
            try:
                return attempt()
            except (self._openai.OpenAIError, _Incomplete, _Malformed, json.JSONDecodeError) as exc:
                failure, cause = self._classify(exc), exc
            if not failure.retry:
                raise failure.error from cause
            if number < self.attempts:
                delay = min(self.backoff * 2 ** (number - 1), 8.0)
                if self.on_retry is not None:
                    said = failure.error.message.rstrip(".")
                    self.on_retry(f"{said}. Retrying in {delay:g}s.", number + 1)
                time.sleep(delay)
        assert failure is not None
        error = failure.error
        if not isinstance(error, ServerUnreachable):
            error = ServerError(f"{error.message} (gave up after {self.attempts} attempts)", hint=error.hint)
        raise error from cause

    def _classify(self, exc: Exception) -> _Failure:
        openai, where = self._openai, self.api_base
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            said = _server_message(exc)
            if status in (400, 413) and (overflow := context_overflow(exc.body, said)):
                return _Failure(overflow, retry=False)
            error = ServerError(f"The model server at {where} answered HTTP {status}: {said}", hint=_hint(status, said))
            return _Failure(error, retry=status >= 500 or status in (408, 429))
        if isinstance(exc, openai.APIConnectionError):
            if _connect_failed(exc):
                return _Failure(ServerUnreachable(f"No model server answers at {where}.", hint=_START_HINT), True)
            if isinstance(exc, openai.APITimeoutError):
                silence = self.idle_timeout if self._streaming else self.request_timeout
                text = f"The model server at {where} sent nothing for {silence:g}s."
            else:
                text = f"The connection to the model server at {where} broke: {_root_cause(exc)}."
            return _Failure(ServerError(text), retry=True)
        if isinstance(exc, openai.APIError):  # an {"error": ...} object inside a 200 stream
            said = exc.message
            if overflow := context_overflow(exc.body, said):
                return _Failure(overflow, retry=False)
            return _Failure(ServerError(f"The model server at {where} reported an error: {said}"), retry=True)
        if isinstance(exc, _Stalled):  # retried like any other stall
            text = f"The model server at {where} sent nothing useful for {self.idle_timeout:g}s."
            return _Failure(ServerError(text), retry=True)
        if isinstance(exc, _Malformed):
            return _Failure(ServerError(f"The model server at {where} sent a malformed reply: {exc}."), retry=False)
        if isinstance(exc, (_Incomplete, json.JSONDecodeError)):
            return _Failure(ServerError(f"The model server at {where} sent a broken response: {exc}."), retry=True)
        return _Failure(ServerError(f"The model server at {where} failed: {exc}"), retry=False)


def _server_message(exc: Any) -> str:
    body = exc.body
    if isinstance(body, dict) and isinstance(message := body.get("message") or body.get("detail"), str) and message:
        return message
    if isinstance(body, str) and body.strip():
        return body.strip()[:500]
    return str(exc.message)


def _hint(status: int, said: str) -> str:
    if status in (401, 403):
        return "Check --api-key (OPENAI_API_KEY)."
    if status == 404:
        return "Check --api-base (it usually ends in /v1) and --model (see GET /v1/models)."
    if status == 400 and "tool" in said.lower():
        return (
            "The server may lack tool calling: vLLM needs --enable-auto-tool-choice --tool-call-parser hermes, "
            "sglang --tool-call-parser qwen25."
        )
    return ""


def _causes(exc: BaseException):
    seen = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _connect_failed(exc: BaseException) -> bool:
    """True when no connection was ever made: refused, unresolvable, or no answer to the handshake."""
    for cause in _causes(exc):
        if isinstance(cause, (ConnectionRefusedError, socket.gaierror)) or type(cause).__name__ in _CONNECT_FAILURES:
            return True
    return False


def _root_cause(exc: BaseException) -> str:
    last = list(_causes(exc))[-1]  # the deepest cause names what actually happened
    return str(last) or type(last).__name__


_VLLM_LIMIT = re.compile(r"maximum context length is (\d+) tokens")
_VLLM_ASKED = re.compile(r"(?:you requested|your request has) (\d+)")
_VLLM_BUDGET = re.compile(r"too large: (\d+)\..*?maximum context length is (\d+) tokens and your request has (\d+)")
_SGLANG = re.compile(r"input \((\d+) tokens\) is longer than the model's context length \((\d+) tokens\)")
_OVERFLOW_WORDS = ("context_length_exceeded", "context length", "context size", "context window")


def context_overflow(body: Any, message: str) -> ContextOverflow | None:
    """The overflow error of vLLM, sglang or llama.cpp, with both numbers when the server gave them."""
    asked = limit = None
    larger = "serve the model with a larger context (sglang --context-length, vLLM --max-model-len, llama.cpp -c)"
    larger += ". Server said: " + message
    if m := _VLLM_BUDGET.search(message):  # newer vLLM: the prompt fits, prompt + max_tokens does not
        new, limit, prompt = (int(g) for g in m.groups())
        text = f"The prompt ({prompt} tokens) plus the requested new tokens ({new}) exceed the context ({limit})."
        return ContextOverflow(text, hint=f"Lower --max-tokens (at most {limit - prompt}) or {larger}")
    if isinstance(body, dict) and body.get("type") == "exceed_context_size_error":
        asked, limit = body.get("n_prompt_tokens"), body.get("n_ctx")
    elif m := _VLLM_LIMIT.search(message):
        limit = int(m.group(1))
        if a := _VLLM_ASKED.search(message):
            asked = int(a.group(1))
    elif m := _SGLANG.search(message):
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
