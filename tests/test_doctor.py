"""`oc-repl doctor` against the loopback fake server, one server habit at a time."""

from __future__ import annotations

import json
import socket

import httpx
import pytest

from oc_repl.doctor import AUTO_TOOL_FIX, PARSER_FIX, TRAINING_CONTEXT, diagnose
from tests.conftest import run_cli
from tests.fakeserver import call_text

LS = {"id": "s1", "command": "ls", "block": True, "timeout": None}
READY = {"text": "<think>\n\n</think>\n\nready"}
CALL = {"text": call_text("shell_exec", LS)}
COUNT = {"text": "<think>\n\n</think>\n\n1 2 3 4 5 6 7 8 9 10"}
PROBES = [
    READY,
    CALL,
    COUNT,
    COUNT,
    COUNT,
]  # the doctor's chats: one line, the tool probe, the speed probe, two at once


def doctor(server_or_url, tmp_path, *more: str):
    url = server_or_url if isinstance(server_or_url, str) else server_or_url.url
    return run_cli(["doctor", "--api-base", url, *more], tmp_path)


def doctor_json(server, tmp_path, *more: str) -> tuple[int, dict]:
    proc = doctor(server, tmp_path, "--json", *more)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def checks(report: dict) -> dict[str, dict]:
    return {c["name"]: c for c in report["checks"]}


def test_parser_on(serve, tmp_path):
    server = serve({"flavour": "sglang", "replies": PROBES})
    code, report = doctor_json(server, tmp_path)
    assert code == 0 and report["exit_code"] == 0
    by = checks(report)
    server_checks = ["server", "chat", "tool calls", "reasoning", "context", "speed", "concurrency"]
    server_checks += ["wires", "served model", "server version"]
    assert [c["name"] for c in report["checks"]] == [*server_checks, "local sandbox", "docker"]
    assert by["concurrency"]["status"] == "ok"
    assert by["local sandbox"]["status"] == "ok"  # bubblewrap confines local: sandboxes on this machine
    assert by["server"]["status"] == "ok" and by["server"]["data"]["models"] == ["qwen3-8b-oc"]
    assert report["model"] == "qwen3-8b-oc"
    assert by["chat"]["status"] == "ok" and by["chat"]["data"]["content"] == "ready"
    tool = by["tool calls"]
    assert tool["status"] == "ok" and tool["fix"] == ""
    assert (tool["data"]["source"], tool["data"]["name"], tool["data"]["arguments"]) == ("native", "shell_exec", LS)
    assert by["reasoning"]["data"] == {"where": "inline"}  # no reasoning parser: the empty think block stays
    assert by["speed"]["status"] == "ok" and by["speed"]["data"]["tokens"] > 0
    assert by["speed"]["data"]["ttft_s"] >= 0 and "tokens/s" in by["speed"]["finding"]
    # the probe is what `run` sends: the default protocol's tools, tool_choice auto, a Qwen3-style task message
    probe = server.chat_requests()[1]["body"]
    assert probe["tool_choice"] == "auto" and probe["tools"][0]["function"]["name"] == "shell_exec"
    assert "shell_exec" in probe["messages"][-1]["content"]
    assert [bool(r["body"].get("stream")) for r in server.chat_requests()] == [False, True, True, True, True]


def test_parser_off_is_told_apart_and_names_the_fix(serve, tmp_path):
    on = doctor(serve({"flavour": "sglang", "replies": PROBES}), tmp_path)
    off = doctor(serve({"flavour": "noparser", "replies": PROBES}), tmp_path)
    assert on.returncode == off.returncode == 0, off.stdout + off.stderr
    assert "Traceback" not in on.stderr + off.stderr
    assert on.stdout != off.stdout
    assert "tool parser on" in on.stdout and "--tool-call-parser" not in on.stdout
    assert "tool parser off" in off.stdout and "salvages" in off.stdout
    assert PARSER_FIX in off.stdout  # printed whole, outside the table, so it can be copied
    assert "start sglang with `--tool-call-parser qwen25`" in off.stdout
    assert "`--enable-auto-tool-choice --tool-call-parser hermes`" in off.stdout

    code, report = doctor_json(serve({"flavour": "noparser", "replies": PROBES}), tmp_path)
    tool = checks(report)["tool calls"]
    assert code == 0 and tool["status"] == "warn" and tool["data"]["source"] == "salvaged"
    assert tool["fix"] == PARSER_FIX
    # the markup came back in content, so the think block was inline there too
    assert checks(report)["reasoning"]["data"] == {"where": "inline"}


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_reasoning_field(serve, tmp_path, field):
    thinking = {"text": "<think>\nThe user wants one word.\n</think>\n\nready"}
    script = {"flavour": "vllm", "reasoning_parser": True, "reasoning_field": field, "replies": [thinking, CALL, COUNT]}
    code, report = doctor_json(serve(script), tmp_path)
    assert code == 0
    by = checks(report)
    assert by["reasoning"]["data"] == {"where": "field", "field": field}
    assert f"`{field}`" in by["reasoning"]["finding"]
    assert by["tool calls"]["data"]["source"] == "native"


def test_no_think_output(serve, tmp_path):
    plain = [{"text": "ready"}, {"text": call_text("shell_exec", LS, think=False)}, {"text": "1 2 3"}]
    code, report = doctor_json(serve({"flavour": "sglang", "replies": plain}), tmp_path)
    assert code == 0 and checks(report)["reasoning"]["data"] == {"where": "none"}


def test_llamacpp_python_tools_go_unstreamed(serve, tmp_path):
    # strict: the fake refuses to stream with tools the way llama-cpp-python does (200, then nothing)
    server = serve({"flavour": "llamacpp-python", "strict": True, "replies": [READY, CALL, CALL, COUNT, COUNT, COUNT]})
    code, report = doctor_json(server, tmp_path)
    tool = checks(report)["tool calls"]
    assert code == 0 and tool["status"] == "ok" and tool["data"]["source"] == "native"
    assert tool["data"]["streamed"] is False and "cannot stream replies to requests with tools" in tool["finding"]
    assert [b["body"].get("tool_choice") for b in server.chat_requests()] == [None, "auto", "auto", None, None, None]
    assert [bool(b["body"].get("stream")) for b in server.chat_requests()] == [False, True, False, True, True, True]
    assert checks(report)["speed"]["status"] == "ok"


def test_server_down(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again before the doctor knocks
    proc = doctor(f"http://127.0.0.1:{port}/v1", tmp_path)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stdout + proc.stderr
    assert f"No model server answers at http://127.0.0.1:{port}/v1" in proc.stdout
    assert "--tool-call-parser qwen25" in proc.stdout and "examples/tiny-model/serve.sh" in proc.stdout
    assert "cannot serve the default protocol" in proc.stdout

    report = json.loads(doctor(f"http://127.0.0.1:{port}/v1", tmp_path, "--json").stdout)
    statuses = [(c["name"], c["status"]) for c in report["checks"]]
    assert report["exit_code"] == 1 and statuses[:-1] == [("server", "fail"), ("local sandbox", "ok")]


def test_vllm_without_auto_tool_choice_fails(serve, tmp_path):
    refusal = {
        "object": "error",
        "message": '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
    server = serve({"flavour": "vllm", "replies": [READY, {"http_error": 400, "body": refusal}]})
    code, report = doctor_json(server, tmp_path)
    tool = checks(report)["tool calls"]
    assert code == 1 and tool["status"] == "fail" and tool["fix"] == AUTO_TOOL_FIX
    assert "HTTP 400" in tool["finding"]
    assert len(server.chat_requests()) == 2  # refused once, not retried, no later probes


def test_prompt_larger_than_the_context_fails(serve, tmp_path):
    overflow = {"error": {"code": 400, "message": "too long", "type": "exceed_context_size_error", "n_ctx": 2048}}
    overflow["error"]["n_prompt_tokens"] = 2210
    code, report = doctor_json(
        serve({"flavour": "sglang", "replies": [READY, {"http_error": 400, "body": overflow}]}), tmp_path
    )
    tool = checks(report)["tool calls"]
    assert code == 1 and tool["status"] == "fail" and "2210" in tool["finding"] and "2048" in tool["finding"]
    assert f"--context-length {TRAINING_CONTEXT}" in tool["fix"]


def test_no_call_is_a_warning(serve, tmp_path):
    prose = {"text": "<think>\n\n</think>\n\nI would run ls, but I will not."}
    code, report = doctor_json(serve({"flavour": "sglang", "replies": [READY, prose, COUNT]}), tmp_path)
    tool = checks(report)["tool calls"]
    assert code == 0 and tool["status"] == "warn" and tool["data"]["source"] == "none"
    assert "did not call a tool" in tool["finding"] and "I would run ls" in tool["finding"]


def test_chat_failure_stops_the_probes(serve, tmp_path):
    server = serve({"flavour": "sglang", "replies": [{"http_error": 500}]})
    code, report = doctor_json(server, tmp_path)
    statuses = [(c["name"], c["status"]) for c in report["checks"]]
    assert code == 1 and statuses[:-1] == [("server", "ok"), ("chat", "fail"), ("local sandbox", "ok")]
    assert "HTTP 500" in report["checks"][1]["finding"]


def test_unlisted_model_is_a_warning(serve, tmp_path):
    code, report = doctor_json(serve({"flavour": "sglang", "replies": PROBES}), tmp_path, "--model", "other")
    server_check = checks(report)["server"]
    assert code == 0 and server_check["status"] == "warn" and "qwen3-8b-oc" in server_check["finding"]


# --- context length, from whichever endpoint the server has ----------------------------------------------------


def _gets(routes: dict[str, dict]) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        body = routes.get(request.url.path)
        return httpx.Response(200, json=body) if body is not None else httpx.Response(404, json={"detail": "no"})

    return httpx.MockTransport(answer)


MODELS = {"data": [{"id": "qwen3-8b-oc", "object": "model"}]}


@pytest.mark.parametrize(
    ("routes", "status", "length"),
    [
        ({"/v1/models": {"data": [{"id": "qwen3-8b-oc", "max_model_len": 32768}]}}, "ok", 32768),
        ({"/v1/models": MODELS, "/props": {"default_generation_settings": {"n_ctx": 8192}}}, "warn", 8192),
        ({"/v1/models": MODELS, "/props": {"n_ctx": 16384}}, "ok", 16384),
        ({"/v1/models": MODELS, "/get_model_info": {"context_length": 4096}}, "warn", 4096),
        ({"/v1/models": MODELS}, "warn", None),
    ],
    ids=["vllm-models", "llamacpp-nested", "llamacpp-top", "sglang-info", "absent"],
)
def test_context_length(serve, routes, status, length):
    server = serve({"flavour": "sglang", "replies": PROBES})
    report = diagnose(server.url, "k", transport=_gets(routes))
    context = checks(report.as_dict())["context"]
    assert report.exit_code == 0 and context["status"] == status
    assert context["data"].get("context") == length
    if status == "warn":
        assert f"--context-length {TRAINING_CONTEXT}" in context["fix"]
    if length is None:
        assert "does not reveal" in context["finding"]


def test_the_wires_that_answer_the_parser_and_the_wire_exact_will_use(serve, tmp_path):
    pytest.importorskip("tokenizers", reason="the fake server's text routes need the tokenizers package")
    from tests.tokenizer_support import model_dir

    model = model_dir(tmp_path / "Qwen3-8B-OpenClaw-RL", "{{ messages[0].content }}")
    script = {"flavour": "sglang", "tokenizer": str(model / "tokenizer.json"), "replies": [*PROBES, READY, READY]}
    server = serve({**script, "model_info": {"model_path": "/models/Qwen3-8B-OpenClaw-RL"}})
    code, report = doctor_json(server, tmp_path, "--tokenizer", str(model))
    wires, served = checks(report)["wires"], checks(report)["served model"]
    assert code == 0 and wires["status"] == "ok", wires
    assert wires["data"] == {
        "answers": {"chat": True, "completions": True, "generate": True},
        "tool_parser": True,
        "exact_wire": "generate",
    }
    assert "--exact will use the generate wire" in wires["finding"]
    assert served["status"] == "ok" and "/models/Qwen3-8B-OpenClaw-RL" in served["finding"]
    other = serve({**script, "model_info": {"model_path": "/models/Other-7B"}, "flavour": "noparser"})
    code, report = doctor_json(other, tmp_path, "--tokenizer", str(model))
    assert checks(report)["served model"]["status"] == "warn"
    assert checks(report)["wires"]["data"]["tool_parser"] is False


def test_a_server_without_generate_is_told_to_exact(serve, tmp_path):
    code, report = doctor_json(serve({"flavour": "vllm", "replies": PROBES}), tmp_path)
    wires = checks(report)["wires"]
    assert code == 0 and wires["status"] == "warn" and wires["data"]["answers"]["generate"] is False
    assert "--wire completions" in wires["fix"]


def test_a_server_that_cuts_a_stream_when_another_arrives_is_a_warning(serve, tmp_path):
    server = serve({"flavour": "sglang", "replies": [READY, CALL, COUNT, COUNT, {**COUNT, "drop_stream": True}]})
    code, report = doctor_json(server, tmp_path)
    concurrency = checks(report)["concurrency"]
    assert code == 0 and concurrency["status"] == "warn" and concurrency["data"]["failed"] == 1
    assert "--interrupt_requests False" in concurrency["fix"]


def test_docker_is_checked_and_each_wait_is_named(serve, tmp_path, monkeypatch):
    server = serve({"flavour": "sglang", "replies": PROBES})
    proc = doctor(server, tmp_path)
    assert "doctor: waiting on a one-line chat (at most 120s)" in proc.stderr
    assert "doctor: waiting on two streamed replies at once" in proc.stderr
    assert "doctor: waiting on the check of this machine for docker, docker-image" in proc.stderr
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'no-daemon.sock'}")
    code, report = doctor_json(server, tmp_path)
    docker = checks(report)["docker"]
    assert docker["status"] == "warn" and "cannot reach the docker daemon" in docker["finding"]
    assert docker["fix"].startswith('eval "$(.ci/dockerd.sh)" && .ci/test-image.sh')


# sglang 0.5.23's /server_info: its resolved server arguments under their own names (arg_groups/field_order.py),
# the release's version beside them (entrypoints/http_server.py::server_info); --preferred-sampling-params resolved
# from its JSON text to a dict
SGLANG_INFO = {
    "model_path": "/models/Qwen3-8B-OpenClaw-RL",
    "tool_call_parser": "qwen25",
    "reasoning_parser": None,
    "sampling_defaults": "openai",
    "preferred_sampling_params": {"temperature": 0.6, "top_k": 20, "min_p": 0.05},
    "version": "0.5.23",
}
VLLM_VERSION = {"version": "0.33.0"}  # vLLM 0.33's GET /version (entrypoints/serve/instrumentator/basic.py)


def _text_server(serve, tmp_path, flavour: str, gets: dict, generation_config: dict | None = None):
    pytest.importorskip("tokenizers", reason="the fake server's text routes need the tokenizers package")
    from tests.tokenizer_support import model_dir

    model = model_dir(tmp_path / "Qwen3-8B-OpenClaw-RL", "{{ messages[0].content }}")
    if generation_config is not None:
        (model / "generation_config.json").write_text(json.dumps(generation_config))
    script = {"flavour": flavour, "tokenizer": str(model / "tokenizer.json"), "replies": [*PROBES, READY, READY]}
    return serve({**script, "gets": gets}), model


def test_sglang_is_named_with_its_parser_and_the_chat_wire_rows_and_its_preferred_params_fill_generate(serve, tmp_path):
    server, model = _text_server(serve, tmp_path, "sglang", {"/server_info": SGLANG_INFO})
    code, report = doctor_json(server, tmp_path, "--tokenizer", str(model), "--wire", "generate")
    found, defaults = checks(report)["server version"], checks(report)["server defaults"]
    assert code == 0 and found["status"] == "ok"
    assert found["finding"].startswith("sglang 0.5.23, tool-call parser qwen25; on the chat wire server_renders_tools")
    assert "--wire completions or generate has none of them" in found["finding"]
    assert found["data"]["chat_wire_rows"] == ["server_renders_tools", "calls_may_be_constrained", "prompt_not_cut"]
    # training's /generate names temperature and top_k (null stop ids too): min_p alone is the server's
    assert defaults["status"] == "warn" and defaults["data"]["filled"] == {"--preferred-sampling-params": ["min_p"]}
    assert "--preferred-sampling-params" in defaults["fix"]


def test_sglang_before_server_info_answers_on_get_server_info_as_a_json_text(serve, tmp_path):
    info = {**SGLANG_INFO, "preferred_sampling_params": '{"top_k": 20}', "version": "0.5.9"}
    server, model = _text_server(serve, tmp_path, "sglang", {"/get_server_info": info})
    code, report = doctor_json(server, tmp_path, "--tokenizer", str(model), "--wire", "generate")
    assert checks(report)["server version"]["finding"].startswith("sglang 0.5.9")
    assert checks(report)["server defaults"]["status"] == "ok"  # top_k is sent


@pytest.mark.parametrize(
    ("wire", "status", "filled"),
    [("completions", "ok", {}), ("chat", "warn", {"generation_config.json": ["min_p", "repetition_penalty"]})],
)
def test_vllm_fills_from_generation_config_what_only_the_chat_wire_leaves_out(serve, tmp_path, wire, status, filled):
    qwen3 = {"temperature": 0.6, "top_k": 20, "top_p": 0.95, "min_p": 0.0, "repetition_penalty": 1.05}
    server, model = _text_server(serve, tmp_path, "vllm", {"/version": VLLM_VERSION}, qwen3)
    code, report = doctor_json(server, tmp_path, "--tokenizer", str(model), "--wire", wire)
    found, defaults = checks(report)["server version"], checks(report)["server defaults"]
    assert found["finding"].startswith("vLLM 0.33.0; on the chat wire")
    assert defaults["status"] == status and defaults["data"]["filled"] == filled, defaults
    if status == "warn":
        assert "--generation-config vllm" in defaults["fix"]


def test_vllm_without_a_tokenizer_folder_says_what_it_cannot_check(serve, tmp_path):
    server = serve({"flavour": "vllm", "replies": PROBES, "gets": {"/version": VLLM_VERSION}})
    code, report = doctor_json(server, tmp_path, "--wire", "chat")
    defaults = checks(report)["server defaults"]
    assert defaults["status"] == "ok" and "--tokenizer" in defaults["fix"]


def test_a_server_that_says_nothing_of_itself_is_no_fault(serve, tmp_path):
    code, report = doctor_json(serve({"flavour": "sglang", "replies": PROBES}), tmp_path)
    assert (
        checks(report)["server version"]["status"] == "ok"
        and "does not say" in checks(report)["server version"]["finding"]
    )
    assert "server defaults" not in checks(report)
