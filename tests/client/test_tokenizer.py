"""The model's tokenizer on the client: Qwen's byte-level BPE (the test tokenizer, tests/tokenizer_support.py), added
tokens as single ids, no BOS, prompts remembered by segment with the same ids as a whole encoding, the tokens a
config adds, decoding."""

from __future__ import annotations

import json
import random
import sys

import pytest

from oc_repl.client.tokenizer import load_tokenizer
from oc_repl.errors import UsageError
from tests.tokenizer_support import ADDED, model_dir, token_id

pytest.importorskip("tokenizers", reason="the tokenizers package is not installed (pip install '.[tokens]')")


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return load_tokenizer(model_dir(tmp_path_factory.mktemp("model")))


def test_added_tokens_are_single_ids_and_nothing_is_added_around_the_text(tok):
    ids = tok.encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n{}")
    assert ids[0] == token_id("<|im_start|>") and ids.count(token_id("<|im_end|>")) == 1
    assert token_id("<think>") in ids and token_id("</think>") in ids and token_id("<tool_call>") in ids
    assert tok.encode("") == [] and tok.encode("hi") == [6023]  # Qwen's id for "hi", and no BOS before it


def test_decode_gives_the_text_back_special_tokens_included_unless_skipped(tok):
    text = "<|im_start|>user\nQu'est-ce que «ça» 中文 😀?\t  x<|im_end|>\n<think>a</think>"
    assert tok.decode(tok.encode(text)) == text
    skipped = "user\nQu'est-ce que «ça» 中文 😀?\t  x\n<think>a</think>"  # <think> is an added token, not special
    assert tok.decode(tok.encode(text), skip_special_tokens=True) == skipped
    assert tok.count(text) == len(tok.encode(text))


def test_the_eos_token_is_the_configs(tok):
    assert (tok.eos_token, tok.eos_token_id) == ("<|im_end|>", token_id("<|im_end|>"))
    assert tok.sha256 and tok.path.name == "tokenizer.json"


def test_encoding_by_segments_gives_the_ids_of_a_whole_encoding(tok):
    pieces = ["a", " b", "\n", "\n\n", "  ", "é", "e\u0301", "中", "😀", "'s", "!?", "12", "<|im", "_end|>", "<tool"]
    pieces += [text for text, _ in ADDED]
    rnd = random.Random(7)
    for _ in range(1500):
        text = "".join(rnd.choice(pieces) for _ in range(rnd.randint(0, 40)))
        assert tok.encode(text) == tok.backend.encode(text, add_special_tokens=False).ids, repr(text)
        assert tok.encode(text) == tok.backend.encode(text, add_special_tokens=False).ids, repr(text)  # remembered


def test_a_prompt_that_grows_only_tokenizes_what_is_new(tmp_path, monkeypatch):
    tok = load_tokenizer(model_dir(tmp_path / "m"))
    turn = "<|im_start|>user\n<tool_response>\n" + "output line\n" * 200 + "</tool_response><|im_end|>\n"
    prompt = "<|im_start|>system\n" + "You are a careful engineer. " * 300 + "<|im_end|>\n" + turn * 3
    tok.encode(prompt)
    seen = []
    real = tok.backend

    class Counting:
        def __getattr__(self, name):
            return getattr(real, name)

        def encode(self, text, add_special_tokens=True):
            seen.append(text)
            return real.encode(text, add_special_tokens=add_special_tokens)

    monkeypatch.setattr(tok, "backend", Counting())
    longer = prompt + "<|im_start|>user\nnew part<|im_end|>\n<|im_start|>assistant\n"
    assert tok.encode(longer) == real.encode(longer, add_special_tokens=False).ids
    assert seen == ["user\nnew part", "assistant\n"]


def test_the_configs_added_tokens_are_added_as_transformers_adds_them(tmp_path):
    folder = model_dir(tmp_path / "m")
    config = json.loads((folder / "tokenizer_config.json").read_text())
    after = str(token_id(ADDED[-1][0]) + 1)
    config["added_tokens_decoder"][after] = {"content": "<extra_tok>", "special": False, "normalized": False}
    config["additional_special_tokens"].append("<also_special>")
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    tok = load_tokenizer(folder)
    assert tok.encode("a<extra_tok>b<also_special>") == [64, int(after), 65, int(after) + 1]
    assert tok.decode([int(after), int(after) + 1], skip_special_tokens=True) == "<extra_tok>"


def test_a_tokenizer_json_path_works_like_its_folder(tmp_path):
    folder = model_dir(tmp_path / "m")
    assert load_tokenizer(folder / "tokenizer.json").eos_token == "<|im_end|>"


def test_an_unreadable_tokenizer_is_a_usage_error(tmp_path):
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(UsageError, match="Cannot load the tokenizer"):
        load_tokenizer(tmp_path)
    with pytest.raises(UsageError, match="Cannot load the tokenizer"):
        load_tokenizer(tmp_path / "missing")


def test_without_the_tokenizers_package_loading_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(UsageError, match="tokenizers package") as info:
        load_tokenizer(tmp_path)
    assert "oc-repl[tokens]" in info.value.hint


def test_the_longest_added_token_wins_where_two_start_at_the_same_place(tmp_path):
    folder = model_dir(tmp_path / "m")
    config = json.loads((folder / "tokenizer_config.json").read_text())
    first = token_id(ADDED[-1][0]) + 1
    for n, text in enumerate(["<r_1|>", "<r_1|>0", "<r_1|>00"]):
        config["added_tokens_decoder"][str(first + n)] = {"content": text, "special": True, "normalized": False}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    tok = load_tokenizer(folder)
    for text in ("<r_1|>00", "a<r_1|>0b", "<r_1|><r_1|>000", "x<r_1|>"):
        assert tok.encode(text) == tok.backend.encode(text, add_special_tokens=False).ids, text
    assert tok.encode("<r_1|>00") == [first + 2]


@pytest.mark.parametrize("lstrip", [False, True], ids=["by-segment", "whole"])
def test_what_the_tokenizers_post_processor_adds_is_never_added(tmp_path, lstrip):
    from tokenizers import Tokenizer, processors

    folder = model_dir(tmp_path / "m")
    backend = Tokenizer.from_file(str(folder / "tokenizer.json"))
    bos = token_id("<|endoftext|>")
    backend.post_processor = processors.TemplateProcessing(
        single="<|endoftext|> $A", special_tokens=[("<|endoftext|>", bos)]
    )
    backend.save(str(folder / "tokenizer.json"))
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["added_tokens_decoder"][str(token_id(ADDED[-1][0]) + 1)] = {
        "content": "<s_t>",
        "special": True,
        "normalized": False,
        "lstrip": lstrip,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    tok = load_tokenizer(folder)
    assert backend.encode("hi").ids == [bos, 6023]  # what encoding with special tokens would give
    assert (
        tok.encode("hi") == [6023] and tok.encode("hi <s_t>")[-1] == tok.token_id("<s_t>") == token_id(ADDED[-1][0]) + 1
    )
    assert tok.encode("hi <s_t>") == tok.backend.encode("hi <s_t>", add_special_tokens=False).ids
