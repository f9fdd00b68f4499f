"""The training harness's own code on given inputs, for the differential tests of oc_repl.training.

Run as `python tests/harness_reference.py TERMINAL_RL_DIR PLAN.json`: it imports OpenClaw-RL's `inference_client.py`
with stand-ins for the packages it imports but these functions never use (openai's types, slime's HTTP post, the
harness's records), takes `_create_sglang_client` and `_infer_completion_budget` out of `generate.py` (whose other
imports need a cluster), and prints, as JSON, what they make of the plan: the prompt budget, the cut prompts and the
sampling parameters after `_ensure_stop_token_ids`.
"""

from __future__ import annotations

import ast
import json
import sys
import types
from pathlib import Path
from typing import Any


class _Anything(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        return type(name, (), {})


def _stub(*names: str) -> None:
    for name in names:
        sys.modules[name] = _Anything(name)


def _from_source(path: Path, names: set[str], namespace: dict[str, Any]) -> dict[str, Any]:
    tree = ast.parse(path.read_text())
    wanted = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name in names]
    exec(compile(ast.Module(body=wanted, type_ignores=[]), str(path), "exec"), namespace)  # noqa: S102
    return namespace


def main() -> None:
    terminal_rl, plan = Path(sys.argv[1]), json.loads(Path(sys.argv[2]).read_text())
    sys.path.insert(0, str(terminal_rl))
    _stub(
        "openai",
        "openai.types",
        "openai.types.chat",
        "openai.types.chat.chat_completion",
        "openai.types.chat.chat_completion_message_function_tool_call",
        "openai.types.completion_usage",
        "openai.types.responses",
        "openai.types.responses.response_function_tool_call",
        "slime",
        "slime.utils",
        "slime.utils.http_utils",
        "custom_types",
    )
    import inference_client

    made: dict[str, Any] = {}

    class Recorder:
        def __init__(self, **kwargs: Any) -> None:
            made.update(kwargs)

    import logging
    import os

    namespace = {"SGLangTurnClient": Recorder, "os": os, "logger": logging.getLogger("reference"), "Any": Any}
    namespace.update({"Dict": dict, "List": list})
    _from_source(terminal_rl / "generate.py", {"_create_sglang_client", "_infer_completion_budget"}, namespace)
    args = types.SimpleNamespace(**plan["args"])
    namespace["_create_sglang_client"](
        args, None, plan["sampling_params"], plan["max_total_tokens"], False, sglang_url="http://x/generate"
    )

    client = inference_client.SGLangTurnClient.__new__(inference_client.SGLangTurnClient)
    cuts = []
    for case in plan["cuts"]:
        client.max_input_tokens, client.sep_ids = case["budget"], case["marker"]
        cuts.append(client._truncate_input_ids(case["ids"]))
    tokenizer = types.SimpleNamespace(eos_token_id=151645, pad_token_id=151643)
    sampling = inference_client._ensure_stop_token_ids(tokenizer, plan["sampling_params"])
    print(json.dumps({"max_input_tokens": made["max_input_tokens"], "cuts": cuts, "sampling_params": sampling}))


if __name__ == "__main__":
    main()
