"""Whole runs on the text wires: `oc-repl run --wire generate|completions --tokenizer DIR` against the loopback fake
server speaking sglang's `/generate` (streamed and not) and vLLM's `/v1/completions`. The server decodes the ids it
receives with the same tokenizer, so each request is held against the prompt the chat template renders; the
transcript records the exact body posted, and `thread.started` the wire, what was sent and the template's sha256."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from oc_repl.client.chat_template import load_chat_templates
from oc_repl.client.tokenizer import load_tokenizer
from oc_repl.config import validate
from oc_repl.errors import UsageError
from oc_repl.training import sampling_params
from tests.cli.test_cli import base_args
from tests.conftest import read_jsonl, run_cli
from tests.fakemodel import call_text
from tests.packages import shared_upstream
from tests.tokenizer_support import model_dir

pytest.importorskip("tokenizers", reason="the tokenizers package is not installed (pip install '.[tokens]')")

ECHO = {"id": "s1", "command": "echo wired"}
# The shape of Qwen's template, small: enough for tools, tool results and the generation prompt.
CHATML = (
    "{% if tools %}<|im_start|>system\n{{ messages[0].content }}\n<tools>\n{% for t in tools %}{{ t | tojson }}\n"
    "{% endfor %}</tools><|im_end|>\n{% set rest = messages[1:] %}{% else %}{% set rest = messages %}{% endif %}"
    "{% for m in rest %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return model_dir(tmp_path_factory.mktemp("model"), CHATML)


def script(model: Path, replies: list[dict], **more) -> dict:
    return {"tokenizer": str(model / "tokenizer.json"), "replies": replies, **more}


def run(server, tmp_path: Path, *more: str) -> tuple[object, list[dict]]:
    transcript = tmp_path / "t.jsonl"
    args = base_args(server, tmp_path / "w", "--transcript", str(transcript), "--max-turns", "3", *more)
    proc = run_cli([*args, "say what echo prints"], tmp_path)
    return proc, read_jsonl(transcript) if transcript.exists() else []


def rendered(model: Path, request: dict) -> str:
    tools = request.get("tools") or None
    return load_chat_templates(model).render(request["messages"], tools, add_generation_prompt=True)


@pytest.mark.parametrize("stream", ["--stream", "--no-stream"])
@pytest.mark.parametrize("wire", ["generate", "completions"])
def test_a_camel_run_sends_the_rendered_prompt_as_token_ids(serve, tmp_path, model, wire, stream):
    replies = [{"text": call_text("shell_exec", ECHO)}, {"text": "<think>\n\n</think>\n\nIt prints wired."}]
    server = serve(script(model, replies))
    proc, events = run(server, tmp_path, "--wire", wire, "--tokenizer", str(model), stream)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == "It prints wired."
    started = events[0]
    assert (started["wire"], started["prompt"]) == (wire, "token ids")
    template = next(a for a in started["assets"] if a["name"] == "chat_template")
    assert template["sha256"] == hashlib.sha256(CHATML.encode()).hexdigest() and template["source"] == "model"
    assert any(a["name"] == "tokenizer.json" for a in started["assets"])
    sent = [e for e in events if e["type"] == "request.sent"]
    tok = load_tokenizer(model)
    route = "/generate" if wire == "generate" else "/v1/completions"
    posted = [r for r in server.requests if r["method"] == "POST"]  # GETs: the model's name, what the server serves
    assert [r["path"] for r in posted] == [route, route]
    for event, request in zip(sent, posted, strict=True):
        text = rendered(model, event["request"])
        assert request["prompt_text"] == text and request["prompt_ids"] == tok.encode(text)
        body = event["body"]
        assert body["wire"] == wire and body["json"] == request["body"]  # the transcript holds the very body posted
        assert body["prompt_tokens"] == len(request["prompt_ids"])
    assert "wired" in sent[1]["request"]["messages"][-1]["content"]  # the tool ran, its result went back
    params = posted[0]["body"].get("sampling_params") or posted[0]["body"]
    assert params["skip_special_tokens"] is False and "top_k" not in params  # the default preset: the server's top_k


def test_the_training_preset_sends_trainings_sampling_parameters(serve, tmp_path, model):
    server = serve(script(model, [{"text": "Done."}]))
    proc, _ = run(server, tmp_path, "--wire", "generate", "--tokenizer", str(model), "--sampling", "training")
    assert proc.returncode == 0, proc.stderr
    body = server.requests[-1]["body"]
    assert body["sampling_params"] == sampling_params() and body["return_logprob"] is True  # streamed too
    assert set(body) == {"input_ids", "sampling_params", "return_logprob", "stream"}


def test_the_completions_wire_sends_the_neutral_values_a_server_would_otherwise_fill(serve, tmp_path, model):
    server = serve(script(model, [{"text": "Done."}]))
    proc, _ = run(server, tmp_path, "--wire", "completions", "--tokenizer", str(model))
    assert proc.returncode == 0, proc.stderr
    body = server.requests[-1]["body"]
    neutral = {"min_p": 0.0, "repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}
    assert {key: body.get(key) for key in neutral} == neutral


@pytest.mark.parametrize("wire", ["chat", "completions", "generate"])
def test_the_authors_eval_profile_and_a_seed_go_on_every_wire(serve, tmp_path, model, wire):
    server = serve(script(model, [{"text": "Done."}]))
    proc, events = run(
        server, tmp_path, "--wire", wire, "--tokenizer", str(model), "--sampling", "author-eval", "--seed", "7"
    )
    assert proc.returncode == 0, proc.stderr
    body = server.requests[-1]["body"]
    sent = body.get("sampling_params") or body  # generate: sglang's sampling_params
    profile = {"temperature": 0.6, "top_p": 0.95, "top_k": 20}
    assert {key: sent.get(key) for key in profile} == profile
    seed = "sampling_seed" if wire == "generate" else "seed"
    assert sent[seed] == 7 and events[0]["options"]["sampling"]["seed"] == 7
    assert (sent.get("max_tokens") or sent.get("max_new_tokens")) == 8192


def test_exact_refuses_a_seed_training_never_had(serve, tmp_path, model):
    proc = run_cli(["run", "--exact", "--wire", "chat", "--seed", "7", "go"], tmp_path)
    assert proc.returncode == 2 and "--seed 7" in proc.stderr


def test_without_a_tokenizer_the_generate_wire_sends_text_and_says_so(serve, tmp_path, model):
    template_only = tmp_path / "template"
    template_only.mkdir()
    (template_only / "chat_template.jinja").write_text(CHATML)
    server = serve(script(model, [{"text": "Done."}]))
    proc, events = run(server, tmp_path, "--wire", "generate", "--tokenizer", str(template_only), "--no-stream")
    assert proc.returncode == 0, proc.stderr
    assert (events[0]["wire"], events[0]["prompt"]) == ("generate", "text")
    request = server.requests[-1]
    assert "input_ids" not in request["body"] and request["body"]["text"] == rendered(model, _request(events))
    assert "sending text" in proc.stderr or "sending text" in proc.stdout


def _request(events: list[dict]) -> dict:
    return next(e for e in events if e["type"] == "request.sent")["request"]


def test_a_text_wire_without_a_template_is_refused_before_anything_starts(serve, tmp_path):
    server = serve({"replies": []})
    proc, _ = run(server, tmp_path, "--wire", "completions")
    assert proc.returncode == 2 and "--tokenizer is missing" in proc.stderr
    assert server.requests == []


def test_exact_camel_without_a_tokenizer_is_exit_2_naming_it(serve, tmp_path):
    server = serve({"replies": []})
    proc, _ = run(server, tmp_path, "--exact")
    assert proc.returncode == 2 and "--tokenizer" in proc.stderr, proc.stderr
    assert server.requests == []
    with pytest.raises(UsageError, match="--tokenizer is missing"):
        validate({"exact": True, "wire": "completions"})


def test_exact_camel_goes_on_the_generate_wire_and_chat_keeps_its_deviations(tmp_path):
    exact = validate({"exact": True, "tokenizer": tmp_path})
    assert exact.wire == "generate"
    chat = validate({"exact": True, "wire": "chat"})
    from oc_repl import deviations

    names = deviations.from_settings(chat).names()
    assert names == ["server_renders_tools", "calls_may_be_constrained", "prompt_not_cut", "results_not_token_cut"]
    assert validate({"exact": True, "protocol": "terminus-json"}).wire == "chat"  # terminus was evaluated on chat


def test_the_request_record_of_the_chat_wire_leaves_out_only_the_messages(serve, tmp_path):
    server = serve({"replies": [{"text": "Done."}]})
    proc, events = run(server, tmp_path, "--protocol", "raw")
    assert proc.returncode == 0, proc.stderr
    body = next(e for e in events if e["type"] == "request.sent")["body"]
    posted = json.loads(json.dumps(server.requests[-1]["body"]))
    assert body["wire"] == "chat" and body["route"] == "/chat/completions"
    assert {k: v for k, v in posted.items() if k != "messages"} == body["json"]  # the stream switches too
    assert body["json"]["stream"] is True


def test_the_qwen3_template_renders_camels_own_tool_dicts(serve, tmp_path):
    qwen3 = shared_upstream("qwen3", "chat_template.jinja")
    folder = model_dir(tmp_path / "qwen3", qwen3.read_text())
    server = serve(script(folder, [{"text": "Done."}]))
    proc, events = run(server, tmp_path, "--wire", "generate", "--tokenizer", str(folder))
    assert proc.returncode == 0, proc.stderr
    text = server.requests[-1]["prompt_text"]
    tools = _request(events)["tools"]
    assert all(json.dumps(tool, ensure_ascii=False) in text for tool in tools)  # wrapper and key order kept


@pytest.mark.parametrize("stream", ["--stream", "--no-stream"])
def test_export_gives_each_turns_token_ids(serve, tmp_path, model, stream):
    from oc_repl.export import export

    replies = [{"text": call_text("shell_exec", ECHO)}, {"text": "It prints wired."}]
    server = serve(script(model, replies))
    proc, _ = run(server, tmp_path, "--wire", "generate", "--tokenizer", str(model), stream)
    assert proc.returncode == 0, proc.stderr
    (episode,) = export(tmp_path / "t.jsonl")
    posted = [r for r in server.requests if r["path"] == "/generate"]
    tok = load_tokenizer(model)
    for turn, request, reply in zip(episode.turns(), posted, replies, strict=True):
        assert turn["prompt_ids"] == request["prompt_ids"]
        assert turn["output_ids"] == tok.encode(reply["text"]) + [tok.eos_token_id]
        assert turn["reply"]["content"] == reply["text"] + "<|im_end|>"  # as generated, the stop token kept


def test_a_server_serving_another_model_is_named_and_warned_about(serve, tmp_path, model):
    server = serve({**script(model, [{"text": "Done."}]), "model_info": {"model_path": "/models/Other-7B"}})
    proc, events = run(server, tmp_path, "--wire", "generate", "--tokenizer", str(model))
    assert proc.returncode == 0, proc.stderr
    assert events[0]["options"]["served"] == "the server serves /models/Other-7B (sglang /get_model_info)"
    (warning,) = [e for e in events if e["type"] == "error"]
    assert warning["kind"] == "warning" and f"--tokenizer names {model}" in warning["message"]
    assert "warning: the server serves /models/Other-7B" in proc.stderr


@pytest.mark.parametrize("stream", ["--stream", "--no-stream"])
def test_the_token_export_of_a_generate_run_decodes_to_what_the_model_saw_and_wrote(serve, tmp_path, model, stream):
    from tokenizers import Tokenizer

    replies = [{"text": call_text("shell_exec", ECHO)}, {"text": "<think>\n\n</think>\n\nIt prints wired."}]
    server = serve(script(model, replies))
    more = ("--verify", "true", stream)
    proc, events = run(server, tmp_path, "--wire", "generate", "--tokenizer", str(model), *more)
    assert proc.returncode == 0, proc.stderr
    exported = run_cli(["export", str(tmp_path / "t.jsonl"), "--format", "tokens"], tmp_path)
    assert exported.returncode == 0, exported.stderr
    (episode,) = [json.loads(line) for line in exported.stdout.splitlines()]
    assert episode["format"] == "oc-repl/tokens/1" and episode["reward"] == 1.0
    decode = Tokenizer.from_file(str(model / "tokenizer.json")).decode
    sent = [e["request"] for e in events if e["type"] == "request.sent"]
    generated = [r["text"] for r in replies]
    assert len(episode["turns"]) == len(sent) == 2
    for turn, request, text in zip(episode["turns"], sent, generated, strict=True):
        prompt, output = turn["prompt_ids"], turn["output_ids"]
        # the model's own tokens, stop token included (no_stop_trim, as trained), after what it was shown
        whole = decode(prompt + output, skip_special_tokens=False)
        assert whole == rendered(model, request) + text + "<|im_end|>"
        assert turn["loss_mask"] == [0] * len(prompt) + [1] * len(output)
        assert len(turn["output_logprobs"]) == len(output) and all(
            isinstance(lp, float) for lp in turn["output_logprobs"]
        )


def test_a_chat_wire_episode_has_no_token_data_and_is_skipped_saying_why(serve, tmp_path):
    server = serve({"replies": [{"content": "Done."}]})
    proc, _ = run(server, tmp_path)
    assert proc.returncode == 0, proc.stderr
    exported = run_cli(["export", str(tmp_path / "t.jsonl"), "--format", "tokens"], tmp_path)
    assert exported.returncode == 2 and "1 skipped: 1 no token ids (the chat wire" in exported.stderr
