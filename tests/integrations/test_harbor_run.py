"""Real `harbor run` jobs with `--agent oc_repl.harbor:OcRepl` against the loopback fake model
server, on Harbor's local docker environment with no network (tests/harbor_support.py: Harbor's DockerEnvironment
over Debian's docker-compose 1.29), on the Harbor task tests/fixtures/harbor/write-hi.

What of Harbor runs here: its CLI and job/trial machinery (`-k`, `-n`, agent loading by import path, `--ak` options,
the agent timeout), its docker environment class (compose up/exec/cp/down against the real daemon, prebuilt image),
its verifier (tests/test.sh, reward file), its result files and ATIF backfill. What does not: Compose v2 itself (the
wrapper stands in), Harbor's egress sidecar (the containers simply have no network), cloud environments, registries.

Needs Harbor beside this interpreter (skipped without it) and the docker daemon and test image.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("harbor")

from tests.docker_support import REWARD_WRITER, docker_session  # noqa: E402
from tests.fakeserver import call_text  # noqa: E402
from tests.harbor_support import AGENT, TASK, harbor_run, trial_results  # noqa: E402

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]
MODEL = "openai/qwen3-8b-oc"


@pytest.fixture(scope="module", autouse=True)
def docker_up():
    yield from docker_session()


def camel_writes(text: str) -> dict[str, Any]:
    """A model that writes `text` into the task's file, then says it is done."""
    command = f"echo {text} > /srv/out.txt; cat /srv/out.txt"
    return {
        "replies": [
            {"text": call_text("shell_exec", {"id": "s1", "command": command, "block": True, "timeout": None})},
            {"text": "<think>\n\n</think>\n\nDone: the file holds the word."},
        ]
    }


def run(
    serve: Any, script: dict[str, Any], jobs: Path, name: str, *args: str, env: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    server = serve(script)
    done, job = harbor_run(
        jobs, name, "-p", str(TASK), "--agent", AGENT, "-m", MODEL, "--ak", f"api_base={server.url}", *args, env=env
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return trial_results(job)


def events(trial: dict[str, Any]) -> list[dict[str, Any]]:
    path = Path(trial["dir"]) / "agent" / "oc-repl.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def reward(trial: dict[str, Any]) -> float:
    return trial["verifier_result"]["rewards"]["reward"]


def test_harbor_run_rewards_a_correct_solution_with_1(serve, tmp_path):
    (trial,) = run(serve, camel_writes("hi"), tmp_path, "right")
    assert trial["exception_info"] is None and reward(trial) == 1.0
    # oc-repl's transcript is in the trial's logs, whole
    found = events(trial)
    assert found[0]["type"] == "thread.started" and found[0]["task_name"] == "write-hi"
    assert found[0]["sandbox"] == "harbor:docker"
    # what holds the commands in is Harbor's: its environment, the task's network policy (no-network), its limits
    isolation = found[0]["isolation"]
    assert (isolation["confinement"], isolation["network"], isolation["limits"]) == ("harbor", "none", "harbor")
    assert found[-1]["type"] == "thread.completed" and found[-1]["status"] == "done"
    assert not any(e["type"] == "verify.completed" for e in found)  # Harbor judges; oc-repl's verifier never ran
    # token and turn counts reach Harbor's agent context, and from there its job totals
    sent = [e["usage"] for e in found if e["type"] == "turn.completed"]
    context = trial["agent_result"]
    assert context["n_input_tokens"] == sum(u["input_tokens"] for u in sent) > 0
    assert context["n_output_tokens"] == sum(u["output_tokens"] for u in sent) > 0
    assert context["metadata"]["n_turns"] == 2 and context["metadata"]["status"] == "done"
    assert context["metadata"]["tampered"] is False and context["metadata"]["findings"] == []
    job = json.loads((Path(trial["dir"]).parent / "result.json").read_text())
    assert job["stats"]["n_input_tokens"] == context["n_input_tokens"]
    # the ATIF trajectory passes Harbor's validator, and Harbor took the per-model usage from it
    from harbor.utils.trajectory_validator import TrajectoryValidator

    path = Path(trial["dir"]) / "agent" / "trajectory.json"
    assert TrajectoryValidator().validate(path), path.read_text()
    steps = json.loads(path.read_text())["steps"]
    assert [s["source"] for s in steps] == ["system", "user", "agent", "agent"]
    assert steps[2]["tool_calls"][0]["function_name"] == "shell_exec"
    assert steps[2]["observation"]["results"][0]["content"] == "hi"  # camel on rich 14 (the default)
    assert context["model_usage"]["qwen3-8b-oc"]["n_input_tokens"] == context["n_input_tokens"]


def test_harbor_run_rewards_a_wrong_solution_with_0(serve, tmp_path):
    (trial,) = run(serve, camel_writes("bye"), tmp_path, "wrong")
    assert trial["exception_info"] is None and reward(trial) == 0.0
    assert events(trial)[-1]["status"] == "done"


def test_a_background_reward_writer_runs_beside_harbors_verifier_and_the_trial_is_marked_tampered(serve, tmp_path):
    call = {"id": "s1", "command": REWARD_WRITER, "block": True, "timeout": None}
    script = {"replies": [{"text": call_text("shell_exec", call)}, {"text": "<think>\n\n</think>\n\nDone."}]}
    (trial,) = run(serve, script, tmp_path, "writer")
    # Harbor's verifier runs beside what the agent left (as with its own agents): the writer still runs then, and the
    # reward is whatever the race between it and test.sh left (Harbor's own verdict: a reward, or a file the writer had
    # just emptied when Harbor read it); oc-repl's says tampered
    assert trial["exception_info"] is None or trial["exception_info"]["exception_type"] == "RewardFileEmptyError"
    assert "while :" in (Path(trial["dir"]) / "verifier" / "processes.txt").read_text()
    metadata = trial["agent_result"]["metadata"]
    assert metadata["tampered"] is True and metadata["status"] == "tampered" and metadata["exit_code"] == 8
    (process,) = [f for f in metadata["findings"] if f["kind"] == "process"]
    assert process["affects_tests"] and "/logs/verifier/reward.txt" in process["path"]
    assert events(trial)[-1]["status"] == "tampered"


@pytest.mark.parametrize(
    ("options", "status"),
    [(("--ak", "max_turns=1"), "turn_cap"), ((), "loop")],
    ids=["turn-cap", "loop"],
)
def test_turn_cap_and_loop_return_normally_so_harbor_still_grades(serve, tmp_path, options, status):
    # the model writes the file, then repeats itself: the verifier must still run and find it
    script = {**camel_writes("hi"), "cycle": True}
    script["replies"] = script["replies"][:1]
    (trial,) = run(serve, script, tmp_path, status, *options)
    assert trial["exception_info"] is None and reward(trial) == 1.0
    assert trial["agent_result"]["metadata"]["status"] == status


def test_parse_error_limit_returns_normally_so_harbor_still_grades(serve, tmp_path):
    unreadable = '<think>\n\n</think>\n\n<tool_call>\n{"name": "shell_exec", "arguments": {"id": \n</tool_call>'
    (trial,) = run(serve, {"cycle": True, "replies": [{"text": unreadable}]}, tmp_path, "unreadable")
    assert trial["exception_info"] is None and reward(trial) == 0.0
    assert trial["agent_result"]["metadata"]["status"] == "parse_errors"


def test_four_trials_run_concurrently(serve, tmp_path):
    # terminus-json; every reply types the solution and claims completion, and the model "thinks" 2 s per reply, so
    # the replies can be shared by trials in any order
    answer = {
        "analysis": "The file is missing.",
        "plan": "Write it.",
        "commands": [{"keystrokes": "echo hi > /srv/out.txt\n", "duration": 0.5}],
        "task_complete": True,
    }
    script = {"cycle": True, "replies": [{"text": json.dumps(answer), "delay": 2}]}
    trials = run(serve, script, tmp_path, "four", "--ak", "protocol=terminus-json", "-k", "4", "-n", "4")
    assert len(trials) == 4 and all(t["exception_info"] is None and reward(t) == 1.0 for t in trials)
    assert {events(t)[-1]["status"] for t in trials} == {"done"}
    from harbor.utils.trajectory_validator import TrajectoryValidator

    for t in trials:  # terminus turns in ATIF: the keystrokes as calls, the screen after them as the observation
        path = Path(t["dir"]) / "agent" / "trajectory.json"
        assert TrajectoryValidator().validate(path)
        first = json.loads(path.read_text())["steps"][1]
        assert first["tool_calls"][0]["arguments"] == {"command": "echo hi > /srv/out.txt\n"}
        assert "echo hi > /srv/out.txt" in first["observation"]["results"][-1]["content"]
    when = [(datetime.fromisoformat(t["started_at"]), datetime.fromisoformat(t["finished_at"])) for t in trials]
    assert max(start for start, _ in when) < min(end for _, end in when)  # all four were running at once


def test_harbor_timeout_stops_the_worker_and_kills_its_commands(serve, tmp_path):
    # the model starts a 10-minute command; Harbor's agent timeout (120 s x 0.05 = 6 s) stops the agent
    call = {"id": "s1", "command": "sleep 3006; echo hi > /srv/out.txt", "block": True, "timeout": 600}
    script = {"replies": [{"text": call_text("shell_exec", call)}]}
    (trial,) = run(serve, script, tmp_path, "timeout", "--agent-timeout-multiplier", "0.05")
    assert trial["exception_info"]["exception_type"] == "AgentTimeoutError"
    assert reward(trial) == 0.0  # the verifier still ran
    processes = (Path(trial["dir"]) / "verifier" / "processes.txt").read_text()
    assert "sleep 3006" not in processes  # killed before the verifier started
    found = events(trial)
    assert any(e["type"] == "turn.failed" for e in found)
    assert found[-1]["type"] == "thread.completed" and found[-1]["status"] == "agent_timeout"
    assert trial["agent_result"]["metadata"]["status"] == "agent_timeout"
    assert (Path(trial["dir"]) / "agent" / "trajectory.json").is_file()


def test_unreachable_model_server_is_the_trials_exception_not_a_zero(tmp_path):
    closed = "api_base=http://127.0.0.1:9/v1"  # nothing listens there
    _, job = harbor_run(
        tmp_path, "down", "-p", str(TASK), "--agent", AGENT, "-m", MODEL, "--ak", closed, "--ak", "retries=0"
    )
    (trial,) = trial_results(job)
    # filed by Harbor as a failed model provider (retried with --max-retries), not graded as the agent's failure
    assert trial["exception_info"]["exception_type"] == "ApiConnectionError"
    assert trial["verifier_result"] is None
    assert events(trial)[-1]["status"] == "server_error"


def test_a_worker_stuck_in_a_model_request_is_abandoned_and_its_processes_killed(serve, tmp_path):
    # turn 1 leaves a background command; turn 2's reply stalls after its first chunk for longer than the test lasts,
    # so the stopped worker never reaches a point where it could stop: after the grace it is abandoned
    call = {"id": "bg", "command": "sleep 3007", "block": False, "timeout": None}
    script = {"replies": [{"text": call_text("shell_exec", call)}, {"text": "never", "stall": 600}]}
    (trial,) = run(serve, script, tmp_path, "stuck", "--agent-timeout-multiplier", "0.05")
    assert trial["exception_info"]["exception_type"] == "AgentTimeoutError"
    assert "sleep 3007" not in (Path(trial["dir"]) / "verifier" / "processes.txt").read_text()
    assert "did not stop within" in (Path(trial["dir"]) / "trial.log").read_text()
    assert trial["agent_result"]["metadata"]["n_turns"] == 2


def test_a_model_echoing_the_key_leaves_it_in_none_of_the_agents_records(serve, tmp_path):
    from tests.secrets_support import KEY, TOKEN, assert_no_secret, echo_answer, echo_command

    script = {
        "require_key": KEY,  # the key reached the server, from Harbor's environment
        "replies": [
            {"text": call_text("shell_exec", {"id": "s1", "command": echo_command(), "block": True, "timeout": None})},
            {"text": "<think>\n\n</think>\n\n" + echo_answer()},
        ],
    }
    (trial,) = run(serve, script, tmp_path, "echo", env={"OPENAI_API_KEY": KEY, "MY_SERVICE_TOKEN": TOKEN})
    assert trial["exception_info"] is None, trial["exception_info"]
    agent = Path(trial["dir"]) / "agent"
    trajectory = json.loads((agent / "trajectory.json").read_text())
    assert "[REDACTED]" in json.dumps(trajectory["steps"][-2]["tool_calls"])  # the echoes were there, redacted
    for path in (agent / "trajectory.json", agent / "oc-repl.jsonl", Path(trial["dir"]) / "result.json"):
        assert_no_secret(path)
    assert oct((agent / "trajectory.json").stat().st_mode & 0o777) == "0o600"
