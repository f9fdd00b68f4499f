"""A model's tokenizer (its `tokenizer.json`), encoding text as transformers' fast tokenizer does inside
`apply_chat_template(..., tokenize=True)`: `add_special_tokens=False` (no BOS or other post-processing), added tokens
(`<|im_start|>`, `<think>`, `<tool_call>` ...) recognised in the text whether special or not.

As transformers does when it loads a folder, the added tokens of `tokenizer_config.json` (`added_tokens_decoder`)
and the special tokens it names that tokenizer.json lacks are added, and decoding cleans up tokenization spaces when
the config says so. The `tokenizers` package is an optional extra (`pip install 'oc-repl[tokens]'`), imported when a
tokenizer is loaded, never at start-up.

Encoding is remembered by segment: the text between two added tokens is tokenized on its own by the `tokenizers`
package (added tokens are split off before normalising and pre-tokenizing), so when no added token strips the
whitespace beside it, a prompt's ids are the concatenation of its segments' ids and a conversation's next prompt only
tokenizes what is new.
"""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from pathlib import Path
from typing import Any

from oc_repl.client.chat_template import SPECIAL_TOKENS, TOKENIZER_CONFIG, read_json, token_text
from oc_repl.errors import UsageError

TOKENIZER_FILE = "tokenizer.json"
INSTALL_HINT = "pip install 'oc-repl[tokens]'  (the tokenizers package)"
# Segments remembered: a long conversation's messages many times over, bounded in count and in characters kept.
_MEMO_ENTRIES, _MEMO_CHARS = 4096, 8 << 20


class Tokenizer:
    """`encode`, `decode` and `count` as the model's own tokenizer; `path` and `sha256` name the tokenizer.json."""

    def __init__(self, backend: Any, path: Path, sha256: str, config: dict[str, Any]) -> None:
        self.backend, self.path, self.sha256 = backend, path, sha256
        self.clean_up_spaces = bool(config.get("clean_up_tokenization_spaces", False))
        self.eos_token = token_text(config.get("eos_token"))
        self.pad_token = token_text(config.get("pad_token"))
        added = backend.get_added_tokens_decoder()
        self._added_ids = {token.content: i for i, token in added.items()}
        # Segments are independent only when no added token reaches into its neighbours (lstrip/rstrip eat the
        # whitespace beside it, single_word depends on it) and every one is matched on the raw text.
        self._segmented = bool(added) and not any(
            t.lstrip or t.rstrip or t.single_word or t.normalized for t in added.values()
        )
        longest_first = sorted(self._added_ids, key=len, reverse=True)  # leftmost-longest, as the tokenizers package
        self._split = re.compile("|".join(re.escape(t) for t in longest_first)) if added else None
        self._memo: OrderedDict[str, list[int]] = OrderedDict()
        self._memo_chars = 0

    def token_id(self, token: str | None) -> int | None:
        return None if token is None else self.backend.token_to_id(token)

    @property
    def eos_token_id(self) -> int | None:
        return self.token_id(self.eos_token)

    def encode(self, text: str) -> list[int]:
        if not self._segmented or self._split is None:
            return self.backend.encode(text, add_special_tokens=False).ids
        pieces: list[str | int] = []
        pos = 0
        for m in self._split.finditer(text):
            if m.start() > pos:
                pieces.append(text[pos : m.start()])
            pieces.append(self._added_ids[m.group()])
            pos = m.end()
        if pos < len(text):
            pieces.append(text[pos:])
        ids: list[int] = []
        for piece in pieces:
            if isinstance(piece, int):
                ids.append(piece)
            elif (found := self._memo.get(piece)) is not None:
                self._memo.move_to_end(piece)
                ids += found
            else:
                found = self.backend.encode(piece, add_special_tokens=False).ids
                self._remember(piece, found)
                ids += found
        return ids

    def _remember(self, segment: str, ids: list[int]) -> None:
        self._memo[segment] = ids
        self._memo_chars += len(segment)
        while len(self._memo) > _MEMO_ENTRIES or self._memo_chars > _MEMO_CHARS:
            self._memo_chars -= len(self._memo.popitem(last=False)[0])

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        text = self.backend.decode(ids, skip_special_tokens=skip_special_tokens)
        return clean_up_tokenization(text) if self.clean_up_spaces else text


def clean_up_tokenization(text: str) -> str:
    """The space clean-up transformers applies after decoding when a config asks for it."""
    for before, after in ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'")):
        text = text.replace(before, after)
    for before, after in ((" n't", "n't"), (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")):
        text = text.replace(before, after)
    return text


def tokenizer_file(where: Path) -> Path:
    return where / TOKENIZER_FILE if where.is_dir() else where


def load_tokenizer(where: Path | str) -> Tokenizer:
    """The tokenizer of a model folder (or of a tokenizer.json, with the tokenizer_config.json beside it)."""
    path = tokenizer_file(Path(where))
    try:
        import tokenizers
    except ImportError as exc:
        raise UsageError("Reading a tokenizer needs the tokenizers package.", hint=INSTALL_HINT) from exc
    try:
        data = path.read_bytes()
        backend = tokenizers.Tokenizer.from_str(data.decode("utf-8"))
    except Exception as exc:  # an unreadable file, or the package's own (plain Exception) on a malformed one
        raise UsageError(f"Cannot load the tokenizer {path}: {exc}") from exc
    config = read_json(path.parent / TOKENIZER_CONFIG)
    _add_config_tokens(backend, config, tokenizers)
    return Tokenizer(backend, path, hashlib.sha256(data).hexdigest(), config)


def _add_config_tokens(backend: Any, config: dict[str, Any], tokenizers: Any) -> None:
    """What transformers adds to a fast tokenizer on loading: the config's added tokens tokenizer.json lacks (in id
    order), then the special tokens it names that are still unknown."""
    known = {t.content for t in backend.get_added_tokens_decoder().values()}
    decoder = config.get("added_tokens_decoder")
    entries = sorted(decoder.items(), key=lambda kv: int(kv[0])) if isinstance(decoder, dict) else []
    named = [config.get(k) for k in SPECIAL_TOKENS] + list(config.get("additional_special_tokens") or [])
    specials = list(dict.fromkeys(t for v in named if (t := token_text(v))))  # in transformers' order
    wanted = []
    for _, entry in entries:
        if isinstance(entry, dict) and isinstance(entry.get("content"), str) and entry["content"] not in known:
            fields = {k: bool(entry[k]) for k in ("single_word", "lstrip", "rstrip", "normalized") if k in entry}
            special = bool(entry.get("special")) or entry["content"] in specials
            wanted.append(tokenizers.AddedToken(entry["content"], special=special, **fields))
            known.add(entry["content"])
    wanted += [tokenizers.AddedToken(t, special=True) for t in specials if t not in known]
    if wanted:
        backend.add_tokens(wanted)
