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
    server_checks += ["wires", "served model"]
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
