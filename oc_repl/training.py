"""What the checkpoint was trained with, as far as a run reaches it: the sampling of RL, the length of its episodes,
and how the training harness (OpenClaw-RL `terminal-rl`, its `SGLangTurnClient` and slime's rollout) asked for each
turn: the context cut it applied to the prompt's token ids and the sampling parameters it posted to sglang's
`/generate`. The settings (config.py) offer the presets; the deviations (deviations.py) measure a run against them;
the client's text wires send what the harness sent.

Derived from its code (see reference/protocols.md, "What reached the model in training"):
- `generate.py::_create_sglang_client`: `max_input_tokens = max(1, min(max_total_tokens, rollout_max_context_len)
  - max_new_tokens)`, with `max_total_tokens` 32768 (its default), `--rollout-max-context-len 16384` and
  `--rollout-max-response-len 8192` from the launch script: 8192;
- `inference_client.py::SGLangTurnClient._truncate_input_ids`: a prompt longer than that keeps its first
  `max(1, int(budget * 0.3))` ids, the ids of the marker, and its last `budget - head - len(marker)` ids (at least
  one): exactly `budget` ids whenever the budget leaves room for the marker;
- slime `rollout/sglang_rollout.py::GenerateState`: the sampling parameters, from its rollout arguments (temperature
  1.0 as launched, slime's defaults otherwise); `_ensure_stop_token_ids` leaves `stop_token_ids` null because the key
  is present; the payload adds `"return_logprob": true`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# `--sampling training` brings RL's sampling back in one flag; `default` is Qwen3's advice for non-thinking use.
# `training` sends top_k on every wire: a server fills a missing one from the model's generation_config.json (Qwen3:
# 20), and training sampled from the whole vocabulary.
SAMPLING_PRESETS: dict[str, dict[str, float | int]] = {
    "default": {"temperature": 0.7, "top_p": 0.8, "max_tokens": 4096},
    "training": {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_tokens": 8192},
    # OpenClaw-RL's eval-only launcher (its seed is `--seed`'s here), with training's token budget
    "author-eval": {"temperature": 0.6, "top_p": 0.95, "top_k": 20, "max_tokens": 8192},
}
CAMEL_TRAINING_TURNS = 10  # the episode length the checkpoint was trained with

MAX_TOTAL_TOKENS = 32768  # the harness's default `max_total_tokens`
CONTEXT_LENGTH = 16384  # --rollout-max-context-len
MAX_NEW_TOKENS = 8192  # --rollout-max-response-len
KEEP_HEAD_RATIO = 0.3
OMITTED_MARKER = "\n[OMITTED MIDDLE]\n"

# camel's ChatAgent (0.2.90 `_truncate_tool_result`), as the harness built it (`token_limit=max_total_tokens`, the
# default `summarize_threshold` of 50): a tool result of more tokens than half the limit keeps its first
# 3 * (limit - 100) characters, after a notice (chat_agent.toml). Tokens counted with the model's tokenizer.
CAMEL_TOKEN_LIMIT = MAX_TOTAL_TOKENS
CAMEL_SUMMARIZE_THRESHOLD = 50


def max_input_tokens(
    context_length: int = CONTEXT_LENGTH, max_new_tokens: int = MAX_NEW_TOKENS, max_total_tokens: int = MAX_TOTAL_TOKENS
) -> int:
    """The prompt budget: what the context leaves after the reply's budget (8192 in training)."""
    return max(1, min(max_total_tokens, context_length) - max_new_tokens)


def middle_cut(ids: list[int], marker_ids: list[int], budget: int | None = None) -> list[int]:
    """The prompt as the harness sent it: unchanged within the budget, else its head, the marker and its tail."""
    budget = max_input_tokens() if budget is None else budget
    if len(ids) <= budget:
        return ids
    head = max(1, int(budget * KEEP_HEAD_RATIO))
    tail = budget - head - len(marker_ids)
    if tail <= 0:
        tail = 1
    return ids[:head] + marker_ids + ids[-tail:]


def marker_ids(encode: Callable[[str], list[int]]) -> list[int]:
    """The marker's ids, as the harness made them (`tokenizer.encode(marker, add_special_tokens=False)`)."""
    return encode(OMITTED_MARKER)


def camel_result_budget(token_limit: int = CAMEL_TOKEN_LIMIT, threshold: int = CAMEL_SUMMARIZE_THRESHOLD) -> int:
    """The most tokens of a tool result camel passed on whole (16384 in training)."""
    return int(token_limit * min(0.9, threshold / 100))


def camel_result_cut(text: str, count: Callable[[str], int], notice: Callable[[int, int], str]) -> str:
    """A tool result as camel recorded it: whole within the budget, else the notice (told the count and the budget)
    and the result's first 3 characters for each token of the budget less 100 (at least 100)."""
    budget = camel_result_budget()
    tokens = count(text)
    if tokens <= budget:
        return text
    return notice(tokens, budget) + text[: max(budget - 100, 100) * 3]


def sampling_params(max_new_tokens: int = MAX_NEW_TOKENS) -> dict[str, Any]:
    """sglang `/generate` sampling parameters, exactly as training sent them (no seed: sampling was not repeatable)."""
    return {
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": -1,
        "max_new_tokens": max_new_tokens,
        "stop": None,
        "stop_token_ids": None,
        "skip_special_tokens": False,
        "no_stop_trim": True,
        "spaces_between_special_tokens": False,
    }
