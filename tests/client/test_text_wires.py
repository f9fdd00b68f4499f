"""The text wires' shapes (sglang's `/generate`, `/v1/completions`), and replies read as the training harness read
them: sglang's qwen25 parser rules on the generated text, then a leading think block. Pure functions, no network."""

from __future__ import annotations

import json

import pytest

from oc_repl.calls import qwen25_calls
from oc_repl.client.api_base import server_root
from oc_repl.client.failures import Incomplete, Malformed, Reported
from oc_repl.client.text_wires import (
    NEUTRAL,
    CompletionsStream,
    GenerateStream,
    completions_body,
    completions_reply,
    generate_body,
    generate_reply,
)
from oc_repl.client.wire import text_reply
from oc_repl.training import sampling_params
from tests.fakemodel import call_text, calls_text

TOOLS = ("shell_exec", "shell_view")
LS = {"id": "s1", "command": "ls -la", "block": True, "timeout": None}
EOS = ("<|im_end|>", "<|endoftext|>")


def answer(text: str, finish=None, completion=7) -> dict:
    finish = finish or {"type": "stop", "matched": 151645}
    meta = {"id": "r1", "finish_reason": finish, "prompt_tokens": 40, "completion_tokens": completion}
    return {"text": text, "output_ids": list(range(completion)), "meta_info": meta}


# --- requests ------------------------------------------------------------------------------------------------------


def test_the_generate_body_is_what_training_posted():
    body = generate_body([1, 2, 3], sampling_params())
    assert body == {"input_ids": [1, 2, 3], "sampling_params": sampling_params(), "return_logprob": True}
    assert generate_body("<|im_start|>user", sampling_params(), stream=True, logprobs=False) == {
        "text": "<|im_start|>user",
        "sampling_params": sampling_params(),
        "return_logprob": False,
        "stream": True,
    }


def test_the_completions_body_sends_every_sampling_field_under_the_servers_names():
    body = completions_body("m", [5, 6], sampling_params())
    assert body == {
        "model": "m",
        "prompt": [5, 6],
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": -1,
        "max_tokens": 8192,
        "skip_special_tokens": False,
        "no_stop_trim": True,
        "spaces_between_special_tokens": False,
        "include_stop_str_in_output": True,
        **NEUTRAL,  # what training's sampling had of the keys a server would fill from generation_config.json
    }
    streamed = completions_body("m", "text", {"max_new_tokens": 5}, stream=True)
    assert streamed == {
        "model": "m",
        "prompt": "text",
        "max_tokens": 5,
        **NEUTRAL,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


@pytest.mark.parametrize(
    "base, root",
    [("http://h:30000/v1", "http://h:30000"), ("http://h:30000/v1/", "http://h:30000"), ("https://h/x", "https://h/x")],
)
def test_generate_lives_at_the_servers_root(base, root):
    assert server_root(base) == root


# --- sglang's qwen25 rules -------------------------------------------------------------------------------------------


def test_only_newline_framed_blocks_are_calls():
    framed = qwen25_calls(call_text("shell_exec", LS), TOOLS)
    assert framed.calls == [("shell_exec", json.dumps(LS))] and framed.content == "<think>\n\n</think>"
    bare = qwen25_calls(call_text("shell_exec", LS, newlines=False), TOOLS)
    assert (bare.found, bare.calls, bare.content) == (False, [], call_text("shell_exec", LS, newlines=False))


def test_unknown_tools_are_dropped_and_named():
    text = calls_text([("rm_everything", {}), ("shell_view", {"id": "s1"})])
    parsed = qwen25_calls(text, TOOLS)
    assert parsed.calls == [("shell_view", '{"id": "s1"}')] and parsed.unknown == ["rm_everything"]
    assert [n for n, _ in qwen25_calls(text, TOOLS, keep_unknown=True).calls] == ["rm_everything", "shell_view"]


def test_a_block_whose_json_does_not_parse_is_skipped_and_the_others_kept():
    text = '<tool_call>\n{"name": "shell_exec", "arguments": {"id": \n</tool_call>\n' + call_text(
        "shell_view", {}, think=False
    )
    parsed = qwen25_calls(text, TOOLS)
    assert parsed.calls == [("shell_view", "{}")] and parsed.bad_json == ['{"name": "shell_exec", "arguments": {"id": ']


def test_parameters_win_over_arguments_and_a_block_may_hold_a_list_of_calls():
    block = json.dumps(
        [{"name": "shell_view", "parameters": {"id": "a"}, "arguments": {"id": "b"}}, {"name": "shell_exec"}]
    )
    parsed = qwen25_calls(f"<tool_call>\n{block}\n</tool_call>", TOOLS)
    assert parsed.calls == [("shell_view", '{"id": "a"}'), ("shell_exec", "{}")]


def test_text_after_the_first_call_is_not_content_and_text_before_it_is_stripped():
    text = "  I will look.\n\n" + call_text("shell_view", {}, think=False) + "\nand then more prose"
    assert qwen25_calls(text, TOOLS).content == "I will look."


def test_a_block_the_parser_cannot_read_as_calls_keeps_the_whole_text_and_runs_nothing():
    for body in ("[1, 2]", '"just a string"', '{"name": ["x"]}'):
        text = call_text("shell_view", {}, think=False) + f"\n<tool_call>\n{body}\n</tool_call>"
        parsed = qwen25_calls(text, TOOLS)
        assert (parsed.failed, parsed.calls, parsed.content) == (True, [], text), body


def test_without_tools_nothing_is_parsed():
    assert qwen25_calls(call_text("shell_exec", LS), ()).found is False


# --- replies -------------------------------------------------------------------------------------------------------


def test_a_reply_with_a_call_as_trained():
    reply = text_reply(call_text("shell_exec", LS), "stop", None, 8192, TOOLS)
    assert [(c.name, c.arguments, c.source) for c in reply.tool_calls] == [("shell_exec", LS, "native")]
    assert (reply.content, reply.reasoning, reply.truncated) == ("", "", False)
    assert reply.raw_content == call_text("shell_exec", LS)


def test_a_reply_cut_by_the_budget_runs_none_of_its_calls():
    reply = text_reply(call_text("shell_exec", LS), "length", {"completion_tokens": 30}, 8192, TOOLS)
    assert reply.tool_calls == [] and reply.cut_off and reply.truncated
    assert reply.malformed_calls[0].startswith('<tool_call>\n{"name": "shell_exec"')


def test_bad_blocks_and_unreadable_arguments_become_malformed_calls():
    text = '<tool_call>\n{"name": "shell_exec", "arguments": [1]}\n</tool_call>\n<tool_call>\n{bad}\n</tool_call>'
    reply = text_reply(text, "stop", None, None, TOOLS)
    assert reply.tool_calls == [] and reply.truncated and not reply.cut_off
    assert reply.malformed_calls == [
        '<tool_call>\n{"name": "shell_exec", "arguments": [1]}\n</tool_call>',
        "<tool_call>\n{bad}\n</tool_call>",
    ]


def test_double_encoded_arguments_are_read_as_the_chat_wire_reads_them():
    reply = text_reply(call_text("shell_exec", json.dumps(LS)), "stop", None, None, TOOLS)
    assert reply.tool_calls[0].arguments == LS


def test_dropped_calls_are_named_in_the_reply():
    reply = text_reply(call_text("nope", {}), "stop", None, None, TOOLS)
    assert reply.tool_calls == [] and reply.raw == {"dropped_calls": ["nope"]} and not reply.truncated


def test_a_plain_answer_keeps_its_think_block_as_reasoning():
    reply = text_reply("<think>\nhmm\n</think>\n\nDone.", "stop", None, None, TOOLS)
    assert (reply.content, reply.reasoning) == ("Done.", "hmm")


def test_generate_reply_takes_the_stop_token_off_and_reads_usage():
    reply = generate_reply(answer("<think>\n\n</think>\n\nDone.<|im_end|>"), 8192, TOOLS, EOS)
    assert (reply.content, reply.finish_reason, reply.raw_content) == ("Done.", "stop", "<think>\n\n</think>\n\nDone.")
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens, reply.usage.total_tokens) == (40, 7, 47)
    assert reply.raw["text"].endswith("<|im_end|>")  # the answer as it came


def test_a_stop_string_stays_in_the_text():
    reply = generate_reply(answer("a<|im_end|>", {"type": "stop", "matched": "<|im_end|>"}), None, (), EOS)
    assert reply.content == "a<|im_end|>"


def test_generate_reply_reads_a_length_finish_and_refuses_an_abort():
    assert generate_reply(answer("x", {"type": "length", "length": 7}), 7, TOOLS, EOS).cut_off
    with pytest.raises(Reported, match="out of memory"):
        generate_reply(answer("x", {"type": "abort", "message": "out of memory"}), 7)
    with pytest.raises(Reported, match="too long"):
        generate_reply({"error": {"message": "too long"}}, 7)
    with pytest.raises(Incomplete):
        generate_reply(answer("x", None) | {"meta_info": {"finish_reason": None}}, 7)
    with pytest.raises(Malformed):
        generate_reply({"text": 3, "meta_info": {"finish_reason": {"type": "stop"}}}, 7)


def test_completions_reply_in_vllms_shape():
    raw = {
        "id": "cmpl-1",
        "object": "text_completion",
        "choices": [{"index": 0, "text": call_text("shell_view", {}), "finish_reason": "stop", "stop_reason": None}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 20, "total_tokens": 29},
    }
    reply = completions_reply(raw, 8192, TOOLS, EOS)
    assert [c.name for c in reply.tool_calls] == ["shell_view"] and reply.usage.total_tokens == 29
    with pytest.raises(Reported, match="context"):
        completions_reply({"object": "error", "message": "maximum context length", "code": 400}, 10)
    with pytest.raises(Incomplete):
        completions_reply({"choices": []}, 10)


# --- streams -------------------------------------------------------------------------------------------------------


def generate_events(pieces: list[str], cumulative: bool, with_ids: bool = True) -> list[str]:
    events, so_far = [], ""
    for n, piece in enumerate(pieces, 1):
        so_far += piece
        last = n == len(pieces)
        chunk = answer(so_far if cumulative else piece, {"type": "stop", "matched": 151645} if last else None, n)
        chunk["meta_info"]["finish_reason"] = chunk["meta_info"]["finish_reason"] if last else None
        if with_ids:
            chunk["output_ids"] = list(range(n)) if cumulative else [n - 1]
        else:
            del chunk["output_ids"]
        events.append(json.dumps(chunk))
    return [*events, "[DONE]"]


PIECES = [
    "<think>",
    "\n\n</think>",
    "\n\nI will list.",
    "\n<tool_",
    "call>\n",
    '{"name": "shell_view", ',
    '"arguments": {}}',
    "\n</tool_call><|im_end|>",
]  # noqa: E501


@pytest.mark.parametrize("cumulative", [True, False], ids=["cumulative", "incremental"])
@pytest.mark.parametrize("with_ids", [True, False], ids=["ids", "text-only"])
def test_a_streamed_generate_folds_to_the_unstreamed_reply_either_way(cumulative, with_ids):
    shown: list[tuple[str, str]] = []
    stream = GenerateStream(lambda kind, text: shown.append((kind, text)), TOOLS, EOS)
    for payload in generate_events(PIECES, cumulative, with_ids if cumulative else True):
        stream.take(payload)
    reply = stream.reply(8192)
    plain = generate_reply(answer("".join(PIECES)), 8192, TOOLS, EOS)
    assert (
        (reply.content, reply.raw_content)
        == (plain.content, plain.raw_content)
        == ("I will list.", "".join(PIECES)[:-10])
    )
    assert [c.name for c in reply.tool_calls] == ["shell_view"] and stream.text == "".join(PIECES)
    assert "".join(t for k, t in shown if k == "content") == "I will list."  # the call markup is never shown
    assert reply.usage.completion_tokens == len(PIECES) and reply.ttft_s is not None


def test_a_stream_that_ends_without_a_finish_is_incomplete_and_an_error_event_is_reported():
    stream = GenerateStream()
    for payload in generate_events(["a", "b"], True)[:1]:
        stream.take(payload)
    with pytest.raises(Incomplete):
        stream.reply(10)
    with pytest.raises(Reported, match="boom"):
        GenerateStream().take(json.dumps({"error": {"message": "boom", "code": 400}}))
    with pytest.raises(Incomplete):
        GenerateStream().take("{not json")


def test_a_streamed_completion_in_vllms_shape():
    chunks = [{"choices": [{"index": 0, "text": p, "finish_reason": None}], "usage": None} for p in PIECES[:-1]]
    chunks.append({"choices": [{"index": 0, "text": "\n</tool_call>", "finish_reason": "stop", "stop_reason": None}]})
    chunks.append({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 8, "total_tokens": 11}})
    stream = CompletionsStream(None, TOOLS, EOS)
    for chunk in chunks:
        stream.take(json.dumps(chunk))
    stream.take("[DONE]")
    stream.take(json.dumps({"error": "after the end, nothing counts"}))
    reply = stream.reply(8192)
    assert [c.name for c in reply.tool_calls] == ["shell_view"] and reply.content == "I will list."
    assert reply.usage.total_tokens == 11 and len(reply.raw["chunks"]) == len(chunks)


@pytest.mark.parametrize("tools", [TOOLS, ()], ids=["tools", "no-tools"])
def test_the_stop_token_left_in_a_streamed_answer_is_never_shown(tools):
    shown: list[str] = []
    stream = CompletionsStream(lambda kind, text: shown.append(text), tools, EOS)
    for piece in ["<think>\n\n</think>\n\n", "All ", "done.\n", "<|im", "_end", "|>"]:
        stream.take(json.dumps({"choices": [{"index": 0, "text": piece, "finish_reason": None}]}))
    stream.take(json.dumps({"choices": [{"index": 0, "text": "", "finish_reason": "stop"}]}))
    reply = stream.reply(None)
    assert "".join(shown) == reply.content == "All done.\n"


@pytest.mark.parametrize("field", ["stop_reason", "matched_stop"], ids=["vllm", "sglang"])
def test_a_completion_stopped_by_a_string_keeps_it(field):
    choice = {"index": 0, "text": "a<|im_end|>", "finish_reason": "stop", field: "<|im_end|>"}
    assert completions_reply({"choices": [choice]}, None, (), EOS).content == "a<|im_end|>"
    choice[field] = 151645  # a stop token instead: taken off
    assert completions_reply({"choices": [choice]}, None, (), EOS).content == "a"
