"""The training harness's prompt budget, middle cut and sampling parameters (oc_repl.training), held against
the harness's own code (the pinned OpenClaw-RL copy in ../shared/upstream, run by tests/harness_reference.py)."""

from __future__ import annotations

import ast
import json
import random
import subprocess
import sys

import pytest

from oc_repl import training
from oc_repl.training import OMITTED_MARKER, marker_ids, max_input_tokens, middle_cut, sampling_params
from tests.conftest import ROOT
from tests.packages import shared_upstream

HARNESS = "openclaw-rl-3cdb79d"


def test_the_training_budget_is_8192_tokens_and_a_longer_prompt_keeps_30_percent_at_the_head():
    assert max_input_tokens() == 8192
    ids = list(range(20000))
    marker = [900001, 900002, 900003]
    cut = middle_cut(ids, marker)
    assert len(cut) == 8192
    assert cut[:2457] == ids[:2457] and cut[2457:2460] == marker and cut[2460:] == ids[-(8192 - 2457 - 3) :]


def test_a_prompt_within_the_budget_is_sent_whole():
    ids = list(range(8192))
    assert middle_cut(ids, [1, 2]) is ids


def test_a_budget_too_small_for_the_marker_still_keeps_one_tail_token():
    assert middle_cut(list(range(10)), [77, 78, 79], budget=3) == [0, 77, 78, 79, 9]


def test_the_marker_is_encoded_without_special_tokens_as_the_harness_did():
    assert OMITTED_MARKER == "\n[OMITTED MIDDLE]\n"
    assert marker_ids(lambda text: [len(text)]) == [18]


def test_the_sampling_parameters_are_the_ones_training_sent():
    assert sampling_params() == {
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": -1,
        "max_new_tokens": 8192,
        "stop": None,
        "stop_token_ids": None,
        "skip_special_tokens": False,
        "no_stop_trim": True,
        "spaces_between_special_tokens": False,
    }
    assert sampling_params(100)["max_new_tokens"] == 100


def test_the_sampling_parameters_have_slimes_keys_in_slimes_order():
    source = shared_upstream(HARNESS, "slime", "slime", "rollout", "sglang_rollout.py").read_text()
    calls = [
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "dict" and node.keywords
    ]
    keywords = next(c.keywords for c in calls if any(k.arg == "no_stop_trim" for k in c.keywords))
    assert [k.arg for k in keywords] == list(sampling_params())
    constants = {k.arg: k.value.value for k in keywords if isinstance(k.value, ast.Constant)}
    assert constants == {"no_stop_trim": True, "spaces_between_special_tokens": False}
    script = shared_upstream(HARNESS, "terminal-rl", "terminal_qwen3_8b_rl.sh").read_text()
    assert "--rollout-max-response-len 8192" in script and "--rollout-max-context-len 16384" in script
    assert "--rollout-temperature 1\n" in script
    assert (training.MAX_NEW_TOKENS, training.CONTEXT_LENGTH) == (8192, 16384)


def test_budget_cut_and_stop_tokens_equal_the_harness_code(tmp_path):
    terminal_rl = shared_upstream(HARNESS, "terminal-rl")
    rnd = random.Random(5)
    cases = []
    for budget in (1, 2, 3, 5, 10, 100, 8192):
        for extra in (-1, 0, 1, 2, 7, 500):
            n = max(0, budget + extra)
            cases.append({"budget": budget, "marker": [rnd.randrange(9, 99) for _ in range(rnd.choice((1, 3, 6)))]})
            cases[-1]["ids"] = [rnd.randrange(1000) for _ in range(n)]
    plan = {
        "args": {"rollout_max_context_len": training.CONTEXT_LENGTH, "sglang_max_context_len": None},
        "max_total_tokens": training.MAX_TOTAL_TOKENS,
        "sampling_params": sampling_params(),
        "cuts": cases,
    }
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    script = ROOT / "tests" / "harness_reference.py"
    proc = subprocess.run(
        [sys.executable, str(script), str(terminal_rl), str(tmp_path / "plan.json")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    upstream = json.loads(proc.stdout)
    assert upstream["max_input_tokens"] == max_input_tokens()
    assert upstream["sampling_params"] == sampling_params()  # stop_token_ids stays null: the key is present
    for case, expected in zip(cases, upstream["cuts"], strict=True):
        assert middle_cut(case["ids"], case["marker"], case["budget"]) == expected, case["budget"]


@pytest.mark.parametrize("context, reply, total", [(16384, 8192, 32768), (4096, 1024, 32768), (16384, 8192, 10000)])
def test_the_budget_is_the_context_left_after_the_reply(context, reply, total):
    assert max_input_tokens(context, reply, total) == min(context, total) - reply
