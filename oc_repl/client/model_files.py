"""The served model's own files, named by `--tokenizer`: its chat template (always) and its tokenizer (when the folder
or file has a tokenizer.json), from which the text wires render and tokenize the prompt as the training harness did.

Without a tokenizer.json the prompt goes as text and the server tokenizes it (for Qwen's tokenizer, which adds no
special tokens to a text, the same ids). Both files are recorded as assets of the run: their sha256 and path.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oc_repl.client.chat_template import ChatTemplates, load_chat_templates
from oc_repl.client.tokenizer import INSTALL_HINT, TOKENIZER_FILE, Tokenizer, load_tokenizer
from oc_repl.errors import UsageError

if TYPE_CHECKING:
    from oc_repl.types import Asset

ENDOFTEXT = "<|endoftext|>"  # Qwen's document end, which a model may also stop with
CHATML_END = "<|im_end|>"  # the stop token of a folder that names none (a lone chat_template.jinja): ChatML's


@dataclass
class ModelFiles:
    path: Path
    templates: ChatTemplates
    tokenizer: Tokenizer | None
    without_tokenizer: str = ""  # why there is none: no tokenizer.json, or no tokenizers package

    @property
    def sends(self) -> str:
        """What a text wire sends: "token ids", or "text" for the server to tokenize."""
        return "token ids" if self.tokenizer is not None else "text"

    def eos_texts(self) -> tuple[str, ...]:
        """The stop tokens a server may leave at the end of a reply's text (sglang's no_stop_trim)."""
        eos = self.tokenizer.eos_token if self.tokenizer is not None else self.templates.variables.get("eos_token")
        return tuple(dict.fromkeys(t for t in (eos or CHATML_END, ENDOFTEXT) if isinstance(t, str) and t))

    def assets(self, tools: list[Any] | None = None) -> list[Asset]:
        """The template (the one a request with these tools uses) and the tokenizer, as a run's assets."""
        from oc_repl.types import Asset

        template = self.templates.select(None, tools)
        found = [Asset(name="chat_template", sha256=template.sha256, source="model", path=template.path)]
        if self.tokenizer is not None:
            found.append(
                Asset(name=TOKENIZER_FILE, sha256=self.tokenizer.sha256, source="model", path=str(self.tokenizer.path))
            )
        return found


def load_model_files(where: Path | str, need_tokenizer: bool = False) -> ModelFiles:
    """The chat template and, when there is a tokenizer.json, the tokenizer of a model folder or of one of its files
    (tokenizer.json, tokenizer_config.json, chat_template.jinja: the folder's other files are read beside it).
    A tokenizer that cannot be had is a UsageError with `need_tokenizer`; otherwise the prompt goes as text."""
    path = Path(where).expanduser()
    if not path.exists():
        raise UsageError(f"--tokenizer {path}: no such file or folder")
    folder = path if path.is_dir() else path.parent
    templates = load_chat_templates(folder if path.name == TOKENIZER_FILE else path)
    tokenizer_json = path if path.name == TOKENIZER_FILE else folder / TOKENIZER_FILE
    if not tokenizer_json.is_file():
        why = f"no {TOKENIZER_FILE} in {folder}"
    elif need_tokenizer or importlib.util.find_spec("tokenizers") is not None:
        return ModelFiles(path, templates, load_tokenizer(tokenizer_json))
    else:
        why = f"the tokenizers package is not installed ({INSTALL_HINT})"
    if need_tokenizer:
        raise UsageError(f"--tokenizer {path} gives a chat template but no tokenizer: {why}")
    return ModelFiles(path, templates, None, why)
