"""One turn's request as it goes on the wire (`Prepared`), and for the two text wires the prompt the client makes
itself, as the training harness made it (`SGLangTurnClient.generate_turn`): the chat template rendered with the
request's tools, tokenized with the model's tokenizer, cut in the middle past the prompt budget (camel, as trained),
and posted with sglang's sampling parameters.

`Prepared.record()` is what `request.sent` carries as its `body`: the exact JSON posted, token ids included.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from oc_repl import training
from oc_repl.client.chat_template import render_request
from oc_repl.client.model_files import ModelFiles
from oc_repl.client.wires import wire_of


@dataclass
class Prepared:
    """A turn's request: the wire, the body as posted (the stream switches aside, for the chat wire), and what the
    reply is read with."""

    wire: str
    body: dict[str, Any]
    max_tokens: int | None = None
    tools: tuple[str, ...] = ()
    cut: bool = False  # the prompt went over the budget and was cut in the middle
    prompt_tokens: int | None = None  # the ids sent, when the client tokenized
    messages_in_body: bool = True  # False: the chat body's messages are the request's own, left out of the record
    extra: dict[str, Any] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        body = self.body if self.messages_in_body else {k: v for k, v in self.body.items() if k != "messages"}
        found: dict[str, Any] = {"wire": self.wire, "route": wire_of(self.wire).route, "json": body}
        if self.prompt_tokens is not None:
            found["prompt_tokens"] = self.prompt_tokens
        if self.cut:
            found["cut"] = True
        return found


def sglang_sampling(options: dict[str, Any]) -> dict[str, Any]:
    """sglang's sampling parameters for a request's options: training's own set (tokens kept, stop token left in the
    text: how the harness read replies), with the options' temperature, top-p, top-k and token budget. The `training`
    preset gives exactly what training sent; without a top_k the server's default stands, as on the chat wire."""
    max_new = options.get("max_tokens") or options.get("max_completion_tokens") or training.MAX_NEW_TOKENS
    params = training.sampling_params(int(max_new))
    for key in ("temperature", "top_p"):
        if key in options:
            params[key] = options[key]
    if "top_k" in options:
        params["top_k"] = options["top_k"]
    else:
        del params["top_k"]
    if options.get("seed") is not None:  # sglang's name for it (the completions wire sends it as `seed`)
        params["sampling_seed"] = options["seed"]
    return params


def tool_names(options: dict[str, Any]) -> tuple[str, ...]:
    """The names of the request's tools (OpenAI's shape): a call to another is dropped, as sglang's parser drops it."""
    return tuple(t["function"]["name"] for t in options.get("tools") or [] if isinstance(t.get("function"), dict))


class TextPrompts:
    """Makes the text wires' requests from a protocol's messages and options. `cut`: the harness's middle cut of a
    prompt over the budget (camel, as trained)."""

    def __init__(self, wire: str, files: ModelFiles, cut: bool = False) -> None:
        self.wire, self.files, self.cut = wire, files, cut
        tok = files.tokenizer
        self._marker = training.marker_ids(tok.encode) if tok is not None else []
        self.eos_texts = files.eos_texts()

    def prepare(self, messages: list[dict[str, Any]], options: dict[str, Any], model: str, stream: bool) -> Prepared:
        text = render_request(self.files.templates, messages, options, harness=True)
        tok = self.files.tokenizer
        prompt: list[int] | str = text
        cut = False
        if tok is not None:
            ids = tok.encode(text)
            prompt = training.middle_cut(ids, self._marker) if self.cut else ids
            cut = prompt is not ids
        params = sglang_sampling(options)
        body = wire_of(self.wire).part("body")(model, prompt, params, stream=stream)
        return Prepared(
            self.wire,
            body,
            max_tokens=params["max_new_tokens"],
            tools=tool_names(options),
            cut=cut,
            prompt_tokens=len(prompt) if isinstance(prompt, list) else None,
        )
