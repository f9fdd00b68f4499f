"""OpenAI-compatible chat client over httpx: GET /models and POST /chat/completions, streamed or not, with retries.

The two endpoints are plain JSON (wire.py reads every server's shapes), so the client speaks them itself: no SDK
models to build at start-up or to walk per turn, and one bounded retry loop covers every failure the same way,
a stream that breaks half-way included. httpx is imported when a client is made, so commands that never talk to
a server stay fast (`connect()`). One httpx.Client per ChatClient keeps its connection alive from turn to turn.

Time limits, per attempt:
- connecting: min(10 s, request_timeout);
- a streamed reply: `idle_timeout`, both as the longest silence between bytes and as the longest time without a
  meaningful delta (keepalive comments and empty deltas do not count);
- an unstreamed reply: `request_timeout`, the longest wait for the answer once the request is sent (its read
  timeout), and also the time by which the whole body must have arrived. A server that accepts the request and
  never answers costs at most `request_timeout` per attempt;
- GET /models: 60 s.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from contextlib import closing
from typing import Any

from oc_repl.client.api_base import check_api_base, unusable
from oc_repl.client.failures import (
    Failure,
    Incomplete,
    Malformed,
    NoStream,
    Reported,
    StatusError,
    classify,
    retry_wait,
    status_error,
)
from oc_repl.client.prompt import Prepared, TextPrompts
from oc_repl.client.stream import StreamReader, plain_reply, read_json, read_payloads
from oc_repl.client.wire import encode_body, normalise_history
from oc_repl.client.wires import CHAT, Wire, wire_of
from oc_repl.errors import ServerError, ServerRefused, ServerUnreachable, UsageError
from oc_repl.types import Reply

OnDelta = Callable[[str, str], None]
OnRetry = Callable[[str, int], None]

_MODELS_TIMEOUT = 60.0
_MEMO_LIMIT = 1024  # history arguments remembered as checked; a long shell session starts over past this
_STREAMED = {"stream": True, "stream_options": {"include_usage": True}}  # a streamed request's switches


class ChatClient:
    """One model server. `native_calls` / `salvaged_calls` count the calls handed out during the run.

    `complete()` returns a Reply; a truncated Reply never carries tool calls (they move to
    `malformed_calls`). `last_request` holds the body of the latest request, stream switches aside.
    A configuration that cannot work (an api base that is not an http(s) URL, an api key that cannot go in a
    header, a timeout that is not positive) is a UsageError here, before any request.
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
        prompts: TextPrompts | None = None,
        wire: Wire | None = None,
    ) -> None:
        """`wire`: the route a chat goes on (the chat wire's, unless another wire that leaves the rendering to the
        server is named); a text wire's comes with its `prompts`."""
        self.api_base = check_api_base(api_base)
        self._key = api_key or "EMPTY"
        if not (self._key.isascii() and self._key.isprintable()):
            raise UsageError("The API key must be printable ASCII (it goes in an HTTP header).")
        if not (idle_timeout > 0 and request_timeout > 0):
            raise UsageError(f"Timeouts must be positive (idle {idle_timeout}, request {request_timeout}).")
        self.model = model
        self.stream = stream
        self.attempts = 1 + max(0, retries)
        self.idle_timeout, self.request_timeout = idle_timeout, request_timeout
        self.on_retry, self.backoff = on_retry, backoff
        self.native_calls = self.salvaged_calls = 0
        self.replied = False  # a reply came back: a refusal after it is no longer a matter of settings
        self.last_request: dict[str, Any] = {}
        self.stream_tools = True  # False once the server showed it cannot stream replies to requests with tools
        self._streaming = stream
        self._memo: dict[str, str] = {}
        self._http: Any = None
        self._on_sent: Callable[[], None] | None = None
        self.prompts = prompts  # the completions or generate wire: the client renders the prompt itself
        self.wire = wire_of(prompts.wire) if prompts is not None else wire or CHAT

    def connect(self) -> None:
        """Import httpx and make the HTTP client; done by the first request, or earlier by a caller that has a wait
        to fill (a sandbox that is starting)."""
        if self._http is not None:
            return
        import httpx

        self._httpx = httpx
        try:
            self._chat_url = httpx.URL(self.wire.url(self.api_base))
            self._models_url = httpx.URL(self.api_base + "/models")
        except httpx.InvalidURL as exc:
            raise unusable(self.api_base, str(exc)) from exc
        connect = min(10.0, self.request_timeout)
        self._stream_timeout = httpx.Timeout(self.request_timeout, connect=connect, read=self.idle_timeout)
        self._plain_timeout = httpx.Timeout(self.request_timeout, connect=connect)
        self._models_timeout = httpx.Timeout(_MODELS_TIMEOUT, connect=connect)
        from oc_repl import __version__

        # Redirects are not followed (a redirected POST loses its body; the error names the new address), so an
        # http:// base never opens a TLS connection and skips loading the CA bundle (~35 ms of a one-shot run's
        # start-up). https proxies are verified by httpcore's own default context either way.
        self._http = httpx.Client(
            headers={"Authorization": f"Bearer {self._key}", "User-Agent": f"oc-repl/{__version__}"},
            timeout=self._plain_timeout,
            follow_redirects=False,
            verify=self.api_base.startswith("https:"),
        )

    # --- public --------------------------------------------------------------------------------------

    def resolve_model(self) -> str:
        """The configured model, else the first id the server lists (asked once)."""
        if not self.model:
            try:
                self.model = self._with_retries(self._first_model)
            except ServerError as exc:
                if not exc.hint:  # a broken list (a proxy's error page, say) need not stop a user who knows the name
                    exc.hint = "Pass --model NAME: the model list is then not asked for."
                raise
        return self.model

    def prepare(self, messages: list[dict[str, Any]], options: dict[str, Any]) -> Prepared:
        """The request as it will go on the wire (what `request.sent` records), before it is sent."""
        if self.prompts is None:
            body = self._request_body(messages, options)
            if bool(options.get("stream", self.stream)) and (self.stream_tools or "tools" not in body):
                body = {**body, **_STREAMED}  # recorded as posted: a stream refused is retried without them
            return Prepared(self.wire.name, body, messages_in_body=body["messages"] is not messages)
        stream = bool(options.get("stream", self.stream))
        return self.prompts.prepare(messages, options, self.model or self.resolve_model(), stream)

    def complete(
        self,
        messages: list[dict[str, Any]],
        options: dict[str, Any],
        on_delta: OnDelta | None = None,
        prepared: Prepared | None = None,
        on_sent: Callable[[], None] | None = None,
    ) -> Reply:
        """`on_sent` is called once, as soon as the request is on its way (its body written to a kept connection,
        or a connection being opened for it) or has failed to go, and at the latest before this returns: the
        caller's record of the request is written while the server works on it instead of before it is sent."""
        self._on_sent = on_sent
        try:
            return self._complete(messages, options, on_delta, prepared)
        finally:
            self._sent()

    def _complete(
        self,
        messages: list[dict[str, Any]],
        options: dict[str, Any],
        on_delta: OnDelta | None,
        prepared: Prepared | None,
    ) -> Reply:
        prepared = prepared or self.prepare(messages, options)
        body = self.last_request = prepared.body
        if self.prompts is not None:
            return self._with_retries(lambda: self._text_reply(prepared, on_delta))
        stream = self._streaming = bool(body.get("stream"))
        max_tokens = options.get("max_tokens") or options.get("max_completion_tokens")
        if stream:
            try:
                reply = self._with_retries(lambda: self._streamed(body, max_tokens, on_delta))
            except NoStream:
                reply = None
            if reply is None:
                reply = self._plain_fallback(body, max_tokens)
        else:
            reply = self._with_retries(lambda: self._plain(body, max_tokens))
        self.replied = True
        native = sum(call.source == "native" for call in reply.tool_calls)
        self.native_calls += native
        self.salvaged_calls += len(reply.tool_calls) - native
        return reply

    def get_json(self, url: str) -> Any:
        """A server's own route, read once and briefly (a server that tells nothing is no fault): JSON, or None."""
        self.connect()
        try:
            with closing(self._http.send(self._http.build_request("GET", url, timeout=5.0), stream=True)) as response:
                if response.status_code != 200:
                    return None
                return read_json(response.iter_bytes(), time.monotonic(), 5.0, url)
        except (self._httpx.HTTPError, Incomplete, Malformed):
            return None

    def close(self) -> None:
        if self._http is not None:
            self._http.close()

    # --- one attempt ---------------------------------------------------------------------------------

    def _request_body(self, messages: list[dict[str, Any]], options: dict[str, Any]) -> dict[str, Any]:
        if len(self._memo) > _MEMO_LIMIT:
            self._memo.clear()
        history = normalise_history(messages, self._memo)
        body: dict[str, Any] = {"model": self.model or self.resolve_model(), "messages": history}
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

    def _open(self, method: str, url: Any, body: dict[str, Any] | None, timeout: Any) -> Any:
        """The response, its status checked and its body still to read (the caller closes it)."""
        headers = {"Content-Type": "application/json"} if body is not None else None
        content = encode_body(body) if body is not None else None
        traced = {"trace": self._trace} if self._on_sent is not None else None
        request = self._http.build_request(
            method, url, content=content, headers=headers, timeout=timeout, extensions=traced
        )
        response = self._http.send(request, stream=True)
        if response.is_success:
            return response
        try:
            raise status_error(response, self._httpx)
        finally:
            response.close()

    def _trace(self, name: str, info: dict[str, Any]) -> None:
        """httpcore's account of the request's progress (its `trace` extension)."""
        if name in _ON_ITS_WAY:
            self._sent()

    def _sent(self) -> None:
        hook, self._on_sent = self._on_sent, None
        if hook is not None:
            hook()

    def _first_model(self) -> str:
        started = time.monotonic()
        with closing(self._open("GET", self._models_url, None, self._models_timeout)) as response:
            listing = read_json(response.iter_bytes(), started, _MODELS_TIMEOUT, "the model list")
        data = listing.get("data") if isinstance(listing, dict) else None
        if not isinstance(data, list):
            raise Malformed("GET /models answered without a `data` list")
        if not data:
            raise ServerError(f"The server at {self.api_base} lists no models.", hint="Pass --model NAME.")
        model = data[0].get("id") if isinstance(data[0], dict) else None
        if not isinstance(model, str) or not model.strip():
            raise Malformed(f"the first model GET /models lists has no name (its id is {json.dumps(model)[:40]})")
        return model

    def _streamed(self, body: dict[str, Any], max_tokens: int | None, on_delta: OnDelta | None) -> Reply:
        started = time.monotonic()
        with closing(self._open("POST", self._chat_url, body, self._stream_timeout)) as response:
            reader = StreamReader(on_delta, self.idle_timeout, started)  # the idle clock starts with the stream
            try:
                reader.read(response.iter_bytes())
            except self._httpx.TransportError as exc:
                if reader.done:  # the reply was whole; only the response's tail broke
                    pass
                # a connection broken (not a silent server) before any data, on a request with tools: llama-cpp-python
                elif not reader.chunks and "tools" in body and not isinstance(exc, self._httpx.TimeoutException):
                    raise NoStream from exc
                else:
                    raise
        return reader.reply(max_tokens, tools="tools" in body)

    def _plain(self, body: dict[str, Any], max_tokens: int | None) -> Reply:
        started = time.monotonic()
        with closing(self._open("POST", self._chat_url, body, self._plain_timeout)) as response:
            raw = read_json(response.iter_bytes(), started, self.request_timeout, "the answer")
        return plain_reply(raw, max_tokens, started)

    def _text_reply(self, prepared: Prepared, on_delta: OnDelta | None) -> Reply:
        """One attempt on a text wire: the reply read from the generated text by the harness's rules."""
        assert self.prompts is not None
        started, eos = time.monotonic(), self.prompts.eos_texts
        stream = self._streaming = bool(prepared.body.get("stream"))
        timeout = self._stream_timeout if stream else self._plain_timeout
        with closing(self._open("POST", self._chat_url, prepared.body, timeout)) as response:
            if not stream:
                raw = read_json(response.iter_bytes(), started, self.request_timeout, "the answer")
                reply = self.wire.part("read")(raw, prepared.max_tokens, prepared.tools, eos)
                reply.duration_s = time.monotonic() - started
                return reply
            folded = self.wire.part("stream")(on_delta, prepared.tools, eos, started)
            try:
                read_payloads(response.iter_bytes(), folded.take, self.idle_timeout, lambda: folded.done)
            except self._httpx.TransportError:
                if not folded.done:  # the reply was whole; only the response's tail broke
                    raise
        return folded.reply(prepared.max_tokens)

    def _plain_fallback(self, body: dict[str, Any], max_tokens: int | None) -> Reply:
        """The same request unstreamed; later requests with tools skip the stream attempt."""
        self.stream_tools = self._streaming = False
        body = {key: value for key, value in body.items() if key not in _STREAMED}
        httpx = self._httpx

        def attempt() -> Reply:
            try:
                return self._plain(body, max_tokens)
            except (httpx.ConnectError, httpx.TimeoutException):
                raise
            except httpx.TransportError:
                # the server resets the connection its failed stream used, and the pool hands that one out first
                return self._plain(body, max_tokens)

        return self._with_retries(attempt)

    # --- failures ------------------------------------------------------------------------------------

    def _with_retries(self, attempt: Callable[[], Any]) -> Any:
        self.connect()
        failure: Failure | None = None
        cause: BaseException | None = None
        started, attempts = time.monotonic(), []
        for number in range(1, self.attempts + 1):
            begun = time.monotonic()
            try:
                answer = attempt()
            except (self._httpx.RequestError, StatusError, Reported, Incomplete, Malformed) as exc:
                attempts.append(time.monotonic() - begun)
                silence = self.idle_timeout if self._streaming else self.request_timeout
                failure, cause = classify(exc, self.api_base, silence), exc
            else:
                if isinstance(answer, Reply):  # a turn's record keeps the time the server took in all
                    answer.attempts_s = [round(t, 3) for t in [*attempts, time.monotonic() - begun]]
                    answer.request_s = round(time.monotonic() - started, 3)
                return answer
            self._sent()  # what the caller records of the request comes before the failure's account of it
            if not failure.retry:
                if isinstance(failure.error, ServerRefused) and self.replied:  # settings that worked until now
                    raise ServerError(failure.error.message, hint=failure.error.hint) from cause
                raise failure.error from cause
            if number < self.attempts:
                delay, said = retry_wait(failure, number, self.backoff)
                if self.on_retry is not None:
                    hint = f" {failure.error.hint}" if failure.error.hint else ""
                    self.on_retry(f"{failure.error.message.rstrip('.')}. {said}{hint}", number + 1)
                time.sleep(delay)
        assert failure is not None
        error = failure.error
        if not isinstance(error, ServerUnreachable):
            error = ServerError(f"{error.message} (gave up after {self.attempts} attempts)", hint=error.hint)
        raise error from cause


# httpcore's trace events after which a request is on its way: its body written (HTTP/1.1, HTTP/2), or a connection
# being opened for it, which can take long (a connection refused, a host that does not answer)
_ON_ITS_WAY = frozenset({"http11.send_request_body.complete", "http2.send_request_body.complete"}) | frozenset(
    {"connection.connect_tcp.started", "connection.connect_unix_socket.started"}
)


def run_client(settings: Any, files: Any, on_retry: OnRetry | None = None) -> ChatClient:
    """The client of a run's settings (oc_repl.config.RunSettings). On a text wire it makes the prompts itself with
    the served model's files (oc_repl.client.model_files.ModelFiles), with the middle cut of a long prompt for a
    protocol whose harness cut it so (camel's, as trained)."""
    prompts = None
    if settings.text_wire and files is not None:
        prompts = TextPrompts(settings.wire, files, cut=settings.protocol_kind().middle_cut)
    return ChatClient(
        settings.api_base,
        settings.api_key,
        settings.model,
        stream=settings.stream,
        retries=settings.retries,
        idle_timeout=settings.idle_timeout,
        request_timeout=settings.request_timeout,
        on_retry=on_retry,
        prompts=prompts,
        wire=wire_of(settings.wire),
    )
