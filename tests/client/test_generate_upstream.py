"""`oc-repl run --exact --wire generate --tokenizer DIR` against the training harness itself: OpenClaw-RL terminal-rl's
`generate()` rollout with its `SGLangTurnClient` and camel-ai 0.2.90's ChatAgent (the pinned copy in
../shared/upstream, run by tests/harness_generate_reference.py in a cached virtualenv with camel-ai and transformers
4.57), on the same scripted episodes: calls then an answer; a reply whose call does not parse; an observation long
enough for the prompt to go over 8192 tokens (the harness's middle cut); an observation of more than 16 384 tokens
(camel's own cut of the result). Every turn's `input_ids` and `sampling_params`, as posted to `/generate`, are equal.

oc-repl runs first, for real: its tools run in a confined local sandbox against the loopback fake server, and what
they returned is what the harness's environment stand-in returns to it. The tokenizer is the real byte-level BPE
tokenizer.json tests/tokenizer_support.py builds, with the Qwen3 chat template (pinned in ../shared/upstream).
The upstream texts come from real syncs: camel's from camel-ai 0.2.90, OpenClaw-RL's from the pinned checkout.
Slow (a virtualenv of ~400 MB the first time): runs with OC_REPL_SLOW_TESTS=1, as in CI.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from oc_repl.protocols.camel.protocol import load_tools
from oc_repl.protocols.camel.text import RICH_LINES
from tests.client.test_chat_template_upstream import TRANSFORMERS
from tests.conftest import ROOT, cli_env, read_jsonl, run_cli
from tests.fakemodel import call_text
from tests.packages import cached_venv, shared_upstream
from tests.protocols.camel.test_camel_exact import data_home
from tests.tokenizer_support import model_dir

SLOW = os.environ.get("OC_REPL_SLOW_TESTS") == "1"
pytestmark = [
    pytest.mark.skipif(not SLOW, reason="builds a camel-ai and transformers virtualenv; set OC_REPL_SLOW_TESTS=1"),
    pytest.mark.timeout(2400),
]
HARNESS = "openclaw-rl-3cdb79d"
REFERENCE_WANTS = ["camel-ai==0.2.90", "mcp<2", TRANSFORMERS]
PROTOCOL = "camel-terminal-toolkit"


def exec_call(command: str) -> str:
    return call_text("shell_exec", {"id": "s1", "command": command})


ANSWER = "<think>\n\n</think>\n\nDone: the output is above."
EPISODES = {
    "calls-then-answer": [exec_call("echo hello; ls /"), exec_call("printf 'a\\tb\\n'"), ANSWER],
    "parse-error": ['<tool_call>\n{"name": "shell_exec", "arguments": {"id": "s1",}}\n</tool_call>', ANSWER],
    "prompt-over-8192-tokens": [exec_call("seq 1 2500"), ANSWER],  # some 11 000 tokens: the harness cuts the prompt
    "result-over-16384-tokens": [exec_call("seq 1 5000"), ANSWER],  # some 24 000 tokens: camel cuts the result
    # arguments that are no JSON object: camel refuses the batch, generate() ends the rollout after one request
    "string-arguments": [call_text("shell_exec", '{"id": "s1", "command": "echo ran"}')],
    **{
        f"{kind}-arguments": [f'<tool_call>\n{{"name": "shell_exec", "arguments": {value}}}\n</tool_call>']
        for kind, value in (("null", "null"), ("list", '["s1", "echo ran"]'), ("number", "7"))
    },
}
ENDED = {name for name in EPISODES if name.endswith("-arguments")}  # exit 4, bad_arguments
# What the launch script (terminal_qwen3_8b_rl.sh) and slime's defaults give GenerateState and generate().
ARGS = {
    "sglang_router_ip": "sglang.invalid",
    "sglang_router_port": 30000,
    "rollout_max_context_len": 16384,
    "max_total_tokens": 32768,
    "max_iteration": 10,
}
SAMPLING = {
    "temperature": 1.0,  # --rollout-temperature 1
    "top_p": 1.0,
    "top_k": -1,
    "max_new_tokens": 8192,  # --rollout-max-response-len 8192
    "stop": None,
    "stop_token_ids": None,
    "skip_special_tokens": False,
    "no_stop_trim": True,
    "spaces_between_special_tokens": False,
}


def reference_python() -> Path:
    """camel-ai 0.2.90 and transformers in one cached virtualenv (made under a lock: test workers share it)."""
    import jinja2

    wants = [*REFERENCE_WANTS, f"jinja2=={jinja2.__version__}"]
    return cached_venv("harness-generate-venv", wants, " ".join(wants))


@pytest.fixture(scope="module", params=RICH_LINES, ids=lambda line: f"rich{line}")
def synced(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of a run whose upstream texts are all synced for real, camel's with rich's line of the param
    (as the run's `--camel-rich`, in OC_REPL_TEST_CAMEL_RICH); the camel virtualenv is the cached one the camel
    differential test uses."""
    rich = request.param
    tmp = tmp_path_factory.mktemp("sync")
    env = {**cli_env(tmp), "XDG_DATA_HOME": str(tmp / "data"), "OC_REPL_TEST_CAMEL_RICH": rich}
    shared_cache = data_home(rich) / "oc-repl" / "cache"
    shared_cache.mkdir(parents=True, exist_ok=True)
    (tmp / "data" / "oc-repl").mkdir(parents=True)
    (tmp / "data" / "oc-repl" / "cache").symlink_to(shared_cache)
    camel = run_cli(["protocols", "sync", "--only", "camel", "--camel-rich", rich], tmp, timeout=1700, env=env)
    assert camel.returncode == 0, camel.stdout + camel.stderr
    checkout = shared_upstream(HARNESS, "terminal-rl").parent
    openclaw = run_cli(["protocols", "sync", "--only", "openclaw", "--openclaw-rl", str(checkout)], tmp, env=env)
    assert openclaw.returncode == 0, openclaw.stdout + openclaw.stderr
    return env


def oc_repl_side(serve, model: Path, tmp: Path, env: dict[str, str]) -> dict[str, dict]:
    found = {}
    for name, replies in EPISODES.items():
        server = serve({"tokenizer": str(model / "tokenizer.json"), "replies": [{"text": r} for r in replies]})
        transcript = tmp / f"{name}.jsonl"
        args = ["run", "--api-base", server.url, "--sandbox", f"local:{tmp / name}", "--yes", "--exact"]
        args += ["--wire", "generate", "--tokenizer", str(model), "--no-stream", "--transcript", str(transcript)]
        args += ["--task-name", name, "--camel-rich", env["OC_REPL_TEST_CAMEL_RICH"]]
        proc = run_cli([*args, f"Show what {name} prints."], tmp, timeout=300, env=env)
        assert proc.returncode == (4 if name in ENDED else 0), (name, proc.stdout, proc.stderr)
        events = read_jsonl(transcript)
        results = [
            e["item"]["aggregated_output"]
            for e in events
            if e["type"] == "item.completed" and e["item"]["type"] == "command_execution"
        ]
        posted = [r["body"] for r in server.requests if r["path"] == "/generate"]
        assert [e["body"]["json"] for e in events if e["type"] == "request.sent"] == posted
        found[name] = {"posted": posted, "results": results, "events": events}
    return found


def test_exact_generate_runs_post_what_the_training_harness_posted(serve, synced, tmp_path):
    template = shared_upstream("qwen3", "chat_template.jinja").read_text()
    model = model_dir(tmp_path / "model", template)
    ours = oc_repl_side(serve, model, tmp_path, synced)
    tools_file = Path(synced["XDG_DATA_HOME"]) / "oc-repl" / "upstream" / PROTOCOL / "tools.json"
    plan = {
        "model": str(model),
        "tools": load_tools(tools_file.read_bytes()),
        "args": ARGS,
        "sampling_params": SAMPLING,
        "episodes": {
            name: {"replies": replies, "results": ours[name]["results"], "task_name": name}
            | {"instruction": f"Show what {name} prints."}
            for name, replies in EPISODES.items()
        },
    }
    (tmp_path / "plan.json").write_text(json.dumps(plan, ensure_ascii=False))
    terminal_rl = shared_upstream(HARNESS, "terminal-rl")
    script = ROOT / "tests" / "harness_generate_reference.py"
    env = {**os.environ, "TRANSFORMERS_VERBOSITY": "error", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = [str(reference_python()), "-I", str(script), str(terminal_rl), str(tmp_path / "plan.json")]
    proc = subprocess.run([*command, str(tmp_path / "out.json")], capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    theirs = json.loads((tmp_path / "out.json").read_text())
    for name in EPISODES:
        mine, upstream = ours[name]["posted"], theirs[name]["posted"]
        assert len(mine) == len(upstream) == len(EPISODES[name]), name
        for turn, (got, want) in enumerate(zip(mine, upstream, strict=True), 1):
            assert got["sampling_params"] == want["sampling_params"], (name, turn)
            assert got["input_ids"] == want["input_ids"], (name, turn, first_difference(got, want))
            assert got["return_logprob"] is want["return_logprob"] is True
    lengths = {name: [len(p["input_ids"]) for p in theirs[name]["posted"]] for name in EPISODES}
    assert lengths["prompt-over-8192-tokens"][-1] == 8192 and lengths["result-over-16384-tokens"][-1] == 8192
    long_result = ours["result-over-16384-tokens"]["events"]
    last_request = [e for e in long_result if e["type"] == "request.sent"][-1]["request"]["messages"][-1]["content"]
    assert "16384 tokens" in last_request  # camel's notice, as synced, went to the model
    assert ours["parse-error"]["results"] == []  # the harness answered the unreadable block itself
    for name in ENDED:  # no call ran, and the run says why it ended
        completed = [e for e in ours[name]["events"] if e["type"] == "thread.completed"][-1]
        assert ours[name]["results"] == [] and completed["status"] == "bad_arguments", name


def first_difference(got: dict, want: dict) -> str:
    a, b = got["input_ids"], want["input_ids"]
    at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    return f"lengths {len(a)} and {len(b)}, first difference at {at}: {a[at : at + 8]} vs {b[at : at + 8]}"
