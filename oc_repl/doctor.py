"""Probe a model server: can it serve the default protocol, and how does it shape what the model writes?

Each probe yields one Check (ok / warn / fail, a finding, a concrete fix). A server is unusable when it
cannot be reached, cannot answer a chat, or answers tool requests in a way oc-repl cannot turn into calls;
everything else is advice.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from oc_repl.client.wires import CHAT
from oc_repl.doctor_report import Check, Report
from oc_repl.errors import ContextOverflow, ServerError
from oc_repl.types import Reply, Task

TRAINING_CONTEXT = 16384  # the checkpoint's RL context; a smaller server window cuts long episodes short
PROBE_TASK = Task(name="doctor-probe", instruction="Run `ls` with the shell_exec tool.")

START_FIX = (
    "Start a server, then point --api-base at it:\n"
    "  sglang: python -m sglang.launch_server --model-path MODEL --tool-call-parser qwen25 --port 30000\n"
    "  vLLM:   vllm serve MODEL --enable-auto-tool-choice --tool-call-parser hermes --port 8000\n"
    "  plumbing demo on a CPU: examples/tiny-model/serve.sh (SmolLM2-135M on http://127.0.0.1:8000/v1)"
)
PARSER_FIX = (
    "Turn the server's tool parser on: start sglang with `--tool-call-parser qwen25`, "
    "or vLLM with `--enable-auto-tool-choice --tool-call-parser hermes`."
)
AUTO_TOOL_FIX = "Start vLLM with `--enable-auto-tool-choice --tool-call-parser hermes`."
CONTEXT_FIX = (
    f"Serve at least {TRAINING_CONTEXT} tokens of context: sglang `--context-length {TRAINING_CONTEXT}`, "
    f"vLLM `--max-model-len {TRAINING_CONTEXT}`, llama.cpp `-c {TRAINING_CONTEXT}`."
)
CONCURRENCY_FIX = (
    "llama-cpp-python: start it with `--interrupt_requests False` (examples/tiny-model/serve.sh does); elsewhere let "
    "the server queue requests. Until then run `oc-repl bench -j 1` and Harbor with `-n 1`."
)
_CONTEXT_KEYS = ("max_model_len", "context_length", "max_context_length", "n_ctx")


def machine_checks(waiting: Callable[[str], None]) -> list[Check]:
    """Each kind's check of this machine (what confines `local:`, the docker daemon, an installed package's own), once
    each: the kinds declare them (`doctor`, "module:name")."""
    from oc_repl.config import kinds
    from oc_repl.lazy import load

    found: dict[str, list[str]] = {}
    for every in kinds(plugins=True).values():
        for kind in every:
            if kind.doctor:
                found.setdefault(kind.doctor, []).append(kind.name)
    checks = []
    for ref, names in found.items():
        waiting(f"the check of this machine for {', '.join(names)}")
        checks.append(Check(*load(ref)()))
    return checks


class _Stop(Exception):
    """A probe failed in a way that makes the later probes meaningless."""


def diagnose(
    api_base: str,
    api_key: str,
    model: str | None = None,
    timeout: float = 120.0,
    transport: Any = None,
    wire: str = CHAT.name,
    tokenizer: Path | None = None,
    waiting: Callable[[str], None] | None = None,
) -> Report:
    """`transport` (an httpx transport) serves the plain GET probes; chats always go through ChatClient. `wire` and
    `tokenizer`: the run's, for the wire checks (doctor_wires.py). `waiting` is told what each probe waits on as it
    starts."""
    return Doctor(api_base, api_key, model, timeout, transport, waiting).run(wire, tokenizer)


class Doctor:
    def __init__(
        self,
        api_base: str,
        api_key: str,
        model: str | None,
        timeout: float,
        transport: Any = None,
        waiting: Callable[[str], None] | None = None,
    ) -> None:
        import httpx

        from oc_repl.client.chat import ChatClient

        self.client = ChatClient(api_base, api_key, model, retries=0, request_timeout=timeout, idle_timeout=timeout)
        self.report = Report(api_base=self.client.api_base, model=model)
        auth = {"Authorization": f"Bearer {api_key or 'EMPTY'}"}
        self.http = httpx.Client(headers=auth, timeout=10.0, transport=transport)
        self.entries: list[dict[str, Any]] = []
        self._answers: dict[str, Any] = {}  # get_json's, by URL
        self.replies: list[Reply] = []
        self.api_key, self.timeout = api_key, timeout
        self.waiting = waiting or (lambda what: None)

    def run(self, wire: str = CHAT.name, tokenizer: Path | None = None) -> Report:
        from oc_repl.doctor_wires import wire_checks

        probes = (
            (self.server, "the server's model list"),
            (self.chat, "a one-line chat"),
            (self.tool_calls, "a request with the protocol's tools"),
            (self.reasoning, ""),
            (self.context, "the server's context length"),
            (self.speed, "a streamed reply"),
            (self.concurrency, "two streamed replies at once"),
        )
        try:
            for probe, what in probes:
                if what:
                    self.waiting(f"{what} (at most {self.timeout:g}s)")
                self.report.checks.append(probe())
            self.waiting(f"the completions and generate wires (at most {self.timeout:g}s each)")
            self.report.checks += [Check(*found) for found in wire_checks(self, wire, tokenizer)]
        except _Stop:
            self.report.blocking = True
        finally:
            self.http.close()
        self.report.checks += machine_checks(self.waiting)
        return self.report

    def _fail(self, name: str, finding: str, fix: str) -> NoReturn:
        self.report.checks.append(Check(name, "fail", finding, fix))
        raise _Stop

    # --- probes ----------------------------------------------------------------------------------------------

    def server(self) -> Check:
        import httpx

        url = f"{self.report.api_base}/models"
        try:
            response = self.http.get(url)
        except (httpx.ConnectError, httpx.ConnectTimeout):
            self._fail("server", f"No model server answers at {self.report.api_base}.", START_FIX)
        except httpx.HTTPError as exc:
            self._fail("server", f"GET {url} failed: {exc or type(exc).__name__}.", START_FIX)
        given = self.report.model
        if response.status_code in (401, 403):
            self._fail(
                "server", f"GET /models answered HTTP {response.status_code}.", "Check --api-key (OPENAI_API_KEY)."
            )
        if response.status_code != 200:
            finding = f"GET /models answered HTTP {response.status_code}."
            if given:
                return Check(
                    "server", "warn", f"{finding} Using --model {given}.", "Check --api-base (it ends in /v1)."
                )
            self._fail("server", finding, "Check --api-base (it usually ends in /v1), or pass --model NAME.")
        try:
            self.entries = [e for e in response.json().get("data") or [] if isinstance(e, dict) and e.get("id")]
        except (ValueError, AttributeError):
            self.entries = []
        ids = [str(e["id"]) for e in self.entries]
        if not given and not ids:
            self._fail("server", f"{self.report.api_base} lists no models.", "Pass --model NAME.")
        model = self.report.model = self.client.model = given or ids[0]
        if given and given not in ids:
            listed = ", ".join(ids) or "none"
            return Check("server", "warn", f"--model {given} is not listed (listed: {listed}).", "Check --model.")
        return Check("server", "ok", f"reachable; models: {', '.join(ids)}; using {model}", data={"models": ids})

    def chat(self) -> Check:
        messages = [{"role": "user", "content": "Reply with one word: ready"}]
        try:
            reply = self.client.complete(messages, {"max_tokens": 256, "temperature": 0, "stream": False})
        except ServerError as exc:
            self._fail("chat", f"A one-line chat failed: {exc.message}", exc.hint or START_FIX)
        self.replies.append(reply)
        said = reply.content.strip().replace("\n", " ")
        finding = f'answered "{_clip(said)}" in {reply.duration_s:.1f}s' if said else "answered with no text"
        if reply.truncated:
            finding += " (cut at the probe's token cap)"
        return Check("chat", "ok", finding, data={"content": said, "finish_reason": reply.finish_reason})

    def tool_calls(self) -> Check:
        from oc_repl import protocols
        from oc_repl.config import OPTIONS

        protocol = protocols.create(OPTIONS["protocol"].default)  # the checkpoint's: tool calls
        protocol.start(PROBE_TASK)
        request = protocol.request()
        options = {**request.options, "max_tokens": 1024, "temperature": 0}
        try:
            reply = self.client.complete(request.messages, options)
        except ServerError as exc:
            status = getattr(exc.__cause__, "status_code", None)
            if isinstance(exc, ContextOverflow):
                self._fail("tool calls", f"The protocol's prompt does not fit: {exc.message}", CONTEXT_FIX)
            if status == 400 and "tool" in exc.message.lower():
                self._fail("tool calls", f"The server refuses tool requests: {exc.message}", AUTO_TOOL_FIX)
            self._fail("tool calls", f"A request with the protocol's tools failed: {exc.message}", exc.hint or "")
        self.replies.append(reply)
        check = self._judge_calls(reply)
        check.data["streamed"] = self.client.stream_tools
        if not self.client.stream_tools:
            check.finding += (
                "; the server cannot stream replies to requests with tools, so oc-repl sends those unstreamed"
            )
        return check

    def _judge_calls(self, reply: Reply) -> Check:
        data: dict[str, Any] = {"finish_reason": reply.finish_reason}
        if reply.tool_calls:
            call = reply.tool_calls[0]
            data.update(source=call.source, name=call.name, arguments=call.arguments)
            shown = f"{call.name}({_clip(_args(call.arguments))})"
            if call.source == "native":
                return Check("tool calls", "ok", f"tool parser on: structured tool_calls, {shown}", data=data)
            finding = f"tool parser off: <tool_call> markup left in the text, {shown}; oc-repl salvages it"
            return Check("tool calls", "warn", finding, PARSER_FIX, data)
        if reply.malformed_calls or reply.truncated:
            data["source"] = "malformed"
            finding = "the model wrote a tool call that could not be used (cut off, or JSON that does not parse)"
            return Check(
                "tool calls", "warn", finding, "Retry; if it persists, check the model and --max-tokens.", data
            )
        data["source"] = "none"
        said = reply.content.strip().replace("\n", " ")
        finding = (
            f'the model did not call a tool (it said "{_clip(said)}")' if said else "the model did not call a tool"
        )
        fix = "Check that --model names the OpenClaw checkpoint; a model not trained on these tools rarely calls them."
        return Check("tool calls", "warn", finding, fix, data)

    def reasoning(self) -> Check:
        for reply in self.replies:
            message = reply.raw.get("message") or (reply.raw.get("choices") or [{}])[0].get("message") or {}
            for key in ("reasoning_content", "reasoning"):
                if isinstance(message.get(key), str) and message[key].strip():
                    return Check("reasoning", "ok", f"reasoning field `{key}`", data={"where": "field", "field": key})
        if any("<think>" in r.raw_content or "</think>" in r.raw_content for r in self.replies):
            finding = "inline <think> blocks in content (no reasoning parser); oc-repl strips them"
            return Check("reasoning", "ok", finding, data={"where": "inline"})
        return Check("reasoning", "ok", "no think output seen in the probes", data={"where": "none"})

    def context(self) -> Check:
        found = self._context_length()
        if found is None:
            finding = (
                f"the server does not reveal its context length (the checkpoint was trained with {TRAINING_CONTEXT})"
            )
            return Check("context", "warn", finding, CONTEXT_FIX)
        length, source = found
        data = {"context": length, "source": source, "training_context": TRAINING_CONTEXT}
        if length < TRAINING_CONTEXT:
            finding = f"{length} tokens ({source}), smaller than the checkpoint's training context {TRAINING_CONTEXT}"
            return Check("context", "warn", finding, CONTEXT_FIX, data)
        return Check("context", "ok", f"{length} tokens ({source})", data=data)

    def speed(self) -> Check:
        messages = [{"role": "user", "content": "Count from 1 to 40, separated by spaces."}]
        try:
            reply = self.client.complete(messages, {"max_tokens": 64, "temperature": 0, "stream": True})
        except ServerError as exc:
            return Check("speed", "warn", f"a streamed reply failed: {exc.message}", "Run with --no-stream.")
        if reply.ttft_s is None:
            return Check("speed", "warn", "the stream carried no tokens", "Run with --no-stream.")
        tokens = reply.usage.completion_tokens if reply.usage else 0
        counted = "" if tokens else "≈"
        # no usage in the stream (llama-cpp-python): each chunk carrying text is about one token
        tokens = tokens or sum(1 for c in reply.raw.get("chunks", []) if _has_text(c))
        decode = reply.duration_s - reply.ttft_s
        rate = (tokens - 1) / decode if tokens > 1 and decode > 0 else 0.0
        finding = f"first token after {reply.ttft_s:.2f}s; {counted}{rate:.1f} tokens/s ({counted}{tokens} tokens)"
        data = {"ttft_s": round(reply.ttft_s, 3), "tokens_per_s": round(rate, 2), "tokens": tokens}
        return Check("speed", "ok", finding, data=data)

    def concurrency(self) -> Check:
        """Two streams at once, as `bench -j` and Harbor's `-n` send them: a server that ends one stream when another
        request arrives (llama-cpp-python's default `interrupt_requests`) cuts trials short."""
        from concurrent.futures import ThreadPoolExecutor

        from oc_repl.client.chat import ChatClient

        second = ChatClient(self.report.api_base, self.api_key, self.report.model, retries=0,
                            request_timeout=self.timeout, idle_timeout=self.timeout)  # fmt: skip
        messages = [{"role": "user", "content": "Count from 1 to 30, separated by spaces."}]

        def stream(client: Any) -> str:
            try:
                client.complete(messages, {"max_tokens": 48, "temperature": 0, "stream": True})
            except ServerError as exc:
                return exc.message
            return ""

        try:
            with ThreadPoolExecutor(2) as pool:
                failed = [why for why in pool.map(stream, (self.client, second)) if why]
        finally:
            second.close()
        if failed:
            finding = f"of two streams at once, {len(failed)} failed: {failed[0]}"
            return Check("concurrency", "warn", finding, CONCURRENCY_FIX, data={"failed": len(failed)})
        return Check("concurrency", "ok", "two streams at once both complete", data={"failed": 0})

    # --- helpers ---------------------------------------------------------------------------------------------

    def _context_length(self) -> tuple[int, str] | None:
        """Asks only what servers answer cheaply; absence is normal (llama-cpp-python tells nothing)."""
        model = self.report.model
        entries = sorted(self.entries, key=lambda e: e.get("id") != model)
        for entry in entries[:1]:
            for key in _CONTEXT_KEYS:
                if (n := _positive(entry.get(key))) is not None:
                    return n, f"/v1/models {key}"
        root = self.report.api_base.removesuffix("/v1")
        for path, keys in (
            ("/props", ("n_ctx", "default_generation_settings.n_ctx")),
            ("/get_model_info", ("context_length", "max_context_length")),
            ("/get_server_info", ("context_length", "max_model_len")),
        ):
            body = self.get_json(root + path)
            for key in keys:
                value: Any = body
                for part in key.split("."):
                    value = value.get(part) if isinstance(value, dict) else None
                if (n := _positive(value)) is not None:
                    return n, f"{path} {key}"
        return None

    def get_json(self, url: str) -> Any:
        """The JSON a server's own route answers (None for none), asked once a run: the context, served-model and
        server checks read the same routes."""
        import httpx

        if url not in self._answers:
            try:
                response = self.http.get(url, timeout=5.0)
                self._answers[url] = response.json() if response.status_code == 200 else None
            except (httpx.HTTPError, ValueError):
                self._answers[url] = None
        return self._answers[url]


def _has_text(chunk: dict[str, Any]) -> bool:
    delta = ((chunk.get("choices") or [{}])[0]).get("delta") or {}
    return any(isinstance(delta.get(k), str) and delta[k] for k in ("content", "reasoning_content", "reasoning"))


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _args(arguments: dict[str, Any]) -> str:
    return json.dumps(arguments, ensure_ascii=False)


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
