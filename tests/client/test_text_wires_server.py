"""The text wires against the loopback fake server speaking sglang's `/generate` and vLLM's `/v1/completions`: the
prompt the client renders and tokenizes arrives as those ids (the server decodes them back to the rendered text),
cut as training cut it, and the server's replies, streamed or not, read back into the same Reply."""

from __future__ import annotations

import json

import httpx
import pytest

from oc_repl.client.api_base import server_root
from oc_repl.client.chat_template import ChatTemplates, Template
from oc_repl.client.failures import Reported, context_overflow
from oc_repl.client.stream import Events
from oc_repl.client.text_wires import (
    CompletionsStream,
    GenerateStream,
    completions_body,
    completions_reply,
    generate_body,
    generate_reply,
)
from oc_repl.client.tokenizer import load_tokenizer
from oc_repl.training import marker_ids, middle_cut, sampling_params
from tests.fakemodel import call_text
from tests.tokenizer_support import model_dir, token_id

pytest.importorskip("tokenizers", reason="the tokenizers package is not installed (pip install '.[tokens]')")

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TOOLS = ("shell_exec",)
LS = {"id": "s1", "command": "ls -la", "block": True, "timeout": None}
EOS = ("<|im_end|>", "<|endoftext|>")
MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Task name:t1\nList files."}]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    folder = model_dir(tmp_path_factory.mktemp("model"))
    return folder, load_tokenizer(folder)


def rendered(messages=MESSAGES) -> str:
    return ChatTemplates({"default": Template("default", CHATML, "test")}).render(messages, add_generation_prompt=True)


def script(model, replies, **more) -> dict:
    return {"tokenizer": str(model[0] / "tokenizer.json"), "replies": replies, **more}


def post(url: str, body: dict) -> httpx.Response:
    return httpx.post(url, json=body, timeout=30)


def events(url: str, body: dict) -> list[str]:
    found, parser = [], Events()
    with httpx.stream("POST", url, json=body, timeout=30) as response:
        assert response.status_code == 200
        for piece in response.iter_bytes():
            found += parser.feed(piece)
    return found + parser.end()


def test_the_server_receives_the_rendered_prompt_as_token_ids(serve, model):
    tok = model[1]
    srv = serve(script(model, [{"text": call_text("shell_exec", LS)}]))
    ids = tok.encode(rendered())
    raw = post(server_root(srv.url) + "/generate", generate_body(ids, sampling_params())).json()
    sent = srv.requests[-1]
    assert (sent["path"], sent["prompt_text"], sent["prompt_ids"]) == ("/generate", rendered(), ids)
    assert sent["body"]["sampling_params"] == sampling_params() and sent["body"]["return_logprob"] is True
    assert raw["text"].endswith("<|im_end|>") and raw["meta_info"]["finish_reason"]["matched"] == token_id("<|im_end|>")
    assert len(raw["meta_info"]["output_token_logprobs"]) == raw["meta_info"]["completion_tokens"]
    reply = generate_reply(raw, 8192, TOOLS, EOS)
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [("shell_exec", LS)]
    assert reply.usage.prompt_tokens == len(ids) and reply.raw_content == call_text("shell_exec", LS)


def test_text_is_tokenized_by_the_server_to_the_same_ids(serve, model):
    srv = serve(script(model, [{"text": "Done."}]))
    raw = post(server_root(srv.url) + "/generate", generate_body(rendered(), sampling_params())).json()
    assert srv.requests[-1]["prompt_ids"] == model[1].encode(rendered())
    assert generate_reply(raw, 8192, TOOLS, EOS).content == "Done."


def test_a_prompt_over_the_budget_reaches_the_server_cut_in_the_middle(serve, model):
    tok = model[1]
    long = [MESSAGES[0], {"role": "user", "content": "line of tool output\n" * 3000}]
    ids = tok.encode(rendered(long))
    assert len(ids) > 8192
    srv = serve(script(model, [{"text": "Done."}]))
    post(server_root(srv.url) + "/generate", generate_body(middle_cut(ids, marker_ids(tok.encode)), sampling_params()))
    sent = srv.requests[-1]
    assert len(sent["prompt_ids"]) == 8192 and "\n[OMITTED MIDDLE]\n" in sent["prompt_text"]
    assert sent["prompt_text"].startswith("<|im_start|>system\nYou are terse.<|im_end|>")
    assert sent["prompt_text"].endswith("line of tool output\n<|im_end|>\n<|im_start|>assistant\n")


def test_the_token_budget_cuts_the_reply_and_its_calls_are_held_back(serve, model):
    srv = serve(script(model, [{"text": call_text("shell_exec", LS)}]))
    raw = post(server_root(srv.url) + "/generate", generate_body([1, 2], sampling_params(12))).json()
    assert raw["meta_info"]["finish_reason"] == {"type": "length", "length": 12}
    reply = generate_reply(raw, 12, TOOLS, EOS)
    assert reply.cut_off and reply.tool_calls == [] and reply.usage.completion_tokens == 12


@pytest.mark.parametrize("incremental", [False, True], ids=["cumulative", "incremental"])
def test_a_streamed_generate_reads_as_the_unstreamed_one(serve, model, incremental):
    text = "<think>\n\n</think>\n\nI will list the files. Ça va 😀\n" + call_text("shell_exec", LS, think=False)
    srv = serve(script(model, [{"text": text}] * 2, incremental_streaming_output=incremental))
    url, ids = server_root(srv.url) + "/generate", model[1].encode(rendered())
    plain = generate_reply(post(url, generate_body(ids, sampling_params())).json(), 8192, TOOLS, EOS)
    shown: list[tuple[str, str]] = []
    stream = GenerateStream(lambda kind, delta: shown.append((kind, delta)), TOOLS, EOS)
    payloads = events(url, generate_body(ids, sampling_params(), stream=True))
    for payload in payloads:
        stream.take(payload)
    reply = stream.reply(8192)
    assert len(payloads) > 10 and payloads[-1] == "[DONE]"
    texts = [json.loads(p)["text"] for p in payloads[:-1]]
    whole = text + "<|im_end|>"  # sglang with no_stop_trim leaves the stop token in
    assert ("".join(texts) if incremental else texts[-1]) == whole
    assert all(whole.startswith(t) for t in texts) is not incremental
    assert (reply.content, reply.raw_content) == (plain.content, plain.raw_content)
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [("shell_exec", LS)]
    assert "".join(d for k, d in shown if k == "content") == reply.content == "I will list the files. Ça va 😀"
    assert reply.usage.completion_tokens == plain.usage.completion_tokens
    # the ids and their logprobs kept whole once, each event holding only its own: linear in the reply
    assert reply.raw["output_ids"] == plain.raw["output_ids"]
    assert reply.raw["output_token_logprobs"] == plain.raw["meta_info"]["output_token_logprobs"]
    assert [lp[1] for lp in reply.raw["output_token_logprobs"]] == reply.raw["output_ids"]
    kept = [c["meta_info"]["output_token_logprobs"] for c in reply.raw["chunks"]]
    assert [lp for new in kept for lp in new] == reply.raw["output_token_logprobs"]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_completions_in_vllms_shape_with_the_stop_token_kept_as_trained(serve, model, stream):
    srv = serve(script(model, [{"text": "<think>\n\n</think>\n\nAll done."}]))
    ids = model[1].encode(rendered())
    body = completions_body("qwen3-8b-oc", ids, sampling_params(), stream=stream)
    if stream:
        folded = CompletionsStream(None, TOOLS, EOS)
        for payload in events(srv.url + "/completions", body):
            folded.take(payload)
        reply = folded.reply(8192)
        assert folded.text.endswith("<|im_end|>")
    else:
        raw = post(srv.url + "/completions", body).json()
        assert raw["object"] == "text_completion" and raw["choices"][0]["text"].endswith("<|im_end|>")
        reply = completions_reply(raw, 8192, TOOLS, EOS)
    assert srv.requests[-1]["prompt_ids"] == ids and srv.requests[-1]["body"]["include_stop_str_in_output"] is True
    assert (reply.content, reply.finish_reason, reply.usage.prompt_tokens) == ("All done.", "stop", len(ids))


def test_without_no_stop_trim_the_server_leaves_the_stop_token_out(serve, model):
    srv = serve(script(model, [{"text": "Done."}]))
    params = {**sampling_params(), "no_stop_trim": False}
    raw = post(server_root(srv.url) + "/generate", generate_body([1], params)).json()
    assert raw["text"] == "Done." and generate_reply(raw, None, (), EOS).content == "Done."


def test_a_prompt_longer_than_the_context_is_an_overflow_in_each_servers_words(serve, model):
    srv = serve(script(model, [{"text": "x"}], context_length=10, cycle=True))
    answer = post(server_root(srv.url) + "/generate", generate_body(list(range(20)), sampling_params()))
    assert answer.status_code == 400
    overflow = context_overflow(answer.json()["error"], answer.json()["error"]["message"])
    assert overflow is not None and "20 tokens, the limit is 10" in overflow.message
    answer = post(srv.url + "/completions", completions_body("m", list(range(20)), sampling_params(5)))
    assert answer.status_code == 400 and context_overflow(answer.json(), answer.json()["message"]) is not None
    stream = GenerateStream()
    with pytest.raises(Reported, match="longer than the model's context length"):
        for payload in events(server_root(srv.url) + "/generate", generate_body(list(range(20)), {}, stream=True)):
            stream.take(payload)
