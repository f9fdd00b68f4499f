"""The training harness's whole rollout, `generate()` of OpenClaw-RL's terminal-rl with its `SGLangTurnClient` and
camel-ai's ChatAgent, on scripted episodes: every body it posts to sglang's `/generate`, for the differential test of
`oc-repl run --exact --wire generate` (tests/client/test_generate_upstream.py).

Run in a virtualenv with camel-ai 0.2.90 and transformers 4.x as `python harness_generate_reference.py TERMINAL_RL
PLAN.json OUT.json`; it imports nothing of oc-repl. What a cluster would give is replaced by minimal stand-ins
written here: slime's `GenerateState` (the tokenizer, transformers' own, from the plan's model folder) and `Sample`,
slime's HTTP post (the model's scripted replies as sglang answers them with `no_stop_trim`, and the environment
server: the task message, the tool schemas and each call's scripted result), and sglang's `FunctionCallParser`
(its qwen25 detector's rules: the text before the first `<tool_call>\\n` is the content when a call was found, each
`<tool_call>\\n...\\n</tool_call>` block is JSON, a block that does not parse is skipped, calls to unknown tools are
dropped, arguments re-serialised with `json.dumps`).
"""

from __future__ import annotations

import asyncio
import copy
import enum
import json
import logging
import re
import sys
import types
from pathlib import Path
from typing import Any

BOT, EOT = "<tool_call>\n", "\n</tool_call>"


def module(name: str, **attrs: Any) -> types.ModuleType:
    made = types.ModuleType(name)
    made.__dict__.update(attrs)
    sys.modules[name] = made
    return made


class Sample:
    class Status(enum.Enum):
        PENDING = "pending"
        COMPLETED = "completed"
        TRUNCATED = "truncated"
        ABORTED = "aborted"
        FAILED = "failed"

    def __init__(self, prompt: dict[str, Any]) -> None:
        self.prompt, self.metadata, self.group_index, self.index = prompt, {}, 0, 0
        self.tokens: list[int] = []
        self.response_length, self.loss_mask, self.rollout_log_probs = 0, [], []
        self.response, self.status, self.reward, self.remove_sample = "", Sample.Status.PENDING, None, False


class Function:
    def __init__(self, name: str | None = None, description: str | None = None, parameters: Any = None, **_: Any):
        self.name, self.description, self.parameters = name, description, parameters


class Tool:
    def __init__(self, type: str, function: Function) -> None:
        self.type, self.function = type, function


class ToolCallItem:
    def __init__(self, tool_index: int, name: str, parameters: str) -> None:
        self.tool_index, self.name, self.parameters = tool_index, name, parameters


class FunctionCallParser:
    """sglang's parser for `qwen25`, whole replies only."""

    def __init__(self, tools: list[Tool], tool_call_parser: str) -> None:
        assert tool_call_parser == "qwen25", tool_call_parser
        self.names = [tool.function.name for tool in tools]

    def has_tool_call(self, text: str) -> bool:
        return BOT in text

    def parse_non_stream(self, text: str) -> tuple[str, list[ToolCallItem]]:
        start = text.find(BOT)
        content = text[:start].strip() if start != -1 else text
        calls = []
        for block in re.findall(re.escape(BOT) + "(.*?)" + re.escape(EOT), text, re.DOTALL):
            try:
                value = json.loads(block.strip())
            except json.JSONDecodeError:
                continue
            for item in value if isinstance(value, list) else [value]:
                name = item.get("name")
                if not (name and name in self.names):
                    continue
                arguments = item.get("parameters") or item.get("arguments", {})
                calls.append(ToolCallItem(self.names.index(name), name, json.dumps(arguments, ensure_ascii=False)))
        return (content, calls) if calls else (text, [])  # no call: the text stays whole


class Episode:
    """One episode's script: the model's replies and the tools' results, in order; what was posted to /generate."""

    def __init__(self, plan: dict[str, Any], episode: dict[str, Any], tokenizer: Any) -> None:
        self.plan, self.tokenizer = plan, tokenizer
        self.replies, self.results = list(episode["replies"]), list(episode["results"])
        self.user_msg = f"Task name:{episode['task_name']}\nTask instruction: {episode['instruction']}"
        self.posted: list[dict[str, Any]] = []

    async def post(self, url: str, payload: dict[str, Any], max_retries: int = 60, **_: Any) -> dict[str, Any]:
        route = url.rsplit("/", 1)[-1]
        if route == "generate":
            self.posted.append(copy.deepcopy(payload))
            text = self.replies.pop(0) + "<|im_end|>"  # sglang with no_stop_trim leaves the stop token in
            ids = self.tokenizer.encode(text, add_special_tokens=False)
            meta = {"finish_reason": {"type": "stop", "matched": ids[-1]}, "prompt_tokens": len(payload["input_ids"])}
            meta["output_token_logprobs"] = [[-0.5, i, None] for i in ids]
            return {"text": text, "output_ids": ids, "meta_info": meta}
        answers: dict[str, dict[str, Any]] = {
            "allocate": {"lease_id": "lease-1"},
            "reset": {"user_msg": self.user_msg, "tool_schemas": self.plan["tools"]},
            "exec_tool": {"observation": self.results.pop(0) if route == "exec_tool" else ""},
            "evaluate": {"score": 1.0},
        }
        return {"ok": True, **answers.get(route, {})}


def stand_ins(tokenizer: Any, episode: list[Episode]) -> None:
    class GenerateState:
        def __init__(self, args: Any) -> None:
            self.tokenizer = tokenizer

    async def post(url: str, payload: dict[str, Any], max_retries: int = 60, **kw: Any) -> dict[str, Any]:
        return await episode[0].post(url, payload, max_retries, **kw)

    module("slime")
    module("slime.rollout")
    module("slime.rollout.sglang_rollout", GenerateState=GenerateState)
    module("slime.utils")
    module("slime.utils.types", Sample=Sample)
    module("slime.utils.http_utils", post=post)
    for name in ("sglang", "sglang.srt", "sglang.srt.entrypoints", "sglang.srt.entrypoints.openai"):
        module(name)
    module("sglang.srt.entrypoints.openai.protocol", Function=Function, Tool=Tool)
    module("sglang.srt.function_call")
    module("sglang.srt.function_call.function_call_parser", FunctionCallParser=FunctionCallParser)


def main() -> None:
    import os

    terminal_rl, plan = Path(sys.argv[1]), json.loads(Path(sys.argv[2]).read_text())
    logging.disable(logging.CRITICAL)
    os.environ["ENV_SERVER_URL"] = "http://env.invalid"
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(plan["model"])
    current: list[Episode] = []
    stand_ins(tokenizer, current)
    sys.path.insert(0, str(terminal_rl))
    import generate

    found = {}
    for name, episode in plan["episodes"].items():
        current[:] = [Episode(plan, episode, tokenizer)]
        args = types.SimpleNamespace(**plan["args"])
        samples = asyncio.run(generate.generate(args, Sample({"task_name": name}), dict(plan["sampling_params"])))
        found[name] = {"posted": current[0].posted, "status": [s.status.value for s in samples]}
    Path(sys.argv[3]).write_text(json.dumps(found))


if __name__ == "__main__":
    main()
