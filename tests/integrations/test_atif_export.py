"""`export --format atif`: a transcript's episodes as Harbor's ATIF trajectories, validated by Harbor's own models and
trajectory validator, with each turn's token ids and logprobs where the wire had them (sglang's /generate here)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("harbor")
pytest.importorskip("tokenizers", reason="the tokenizers package is not installed (pip install '.[tokens]')")

from tests.client.test_wire_runs import CHATML, ECHO, run, script  # noqa: E402
from tests.conftest import run_cli  # noqa: E402
from tests.fakemodel import call_text  # noqa: E402
from tests.tokenizer_support import model_dir  # noqa: E402


@pytest.mark.parametrize("wire", ["generate", "chat"])
def test_an_exported_trajectory_is_valid_atif_with_the_ids_the_wire_had(serve, tmp_path, wire):
    from harbor.models.trajectories import Trajectory
    from harbor.utils.trajectory_validator import TrajectoryValidator

    model = model_dir(tmp_path / "model", CHATML)
    replies = [{"text": call_text("shell_exec", ECHO)}, {"text": "<think>\n\n</think>\n\nIt prints wired."}]
    server = serve(script(model, replies))
    proc, events = run(server, tmp_path, "--wire", wire, "--tokenizer", str(model), "--verify", "true")
    assert proc.returncode == 0, proc.stderr
    exported = run_cli(["export", str(tmp_path / "t.jsonl"), "--format", "atif"], tmp_path)
    assert exported.returncode == 0, exported.stderr
    (line,) = exported.stdout.splitlines()
    trajectory = Trajectory.model_validate_json(line)
    written = tmp_path / "trajectory.json"
    written.write_text(line)
    assert TrajectoryValidator().validate(written)
    agent = [s for s in trajectory.steps if s.source == "agent"]
    assert [s.source for s in trajectory.steps[:2]] == ["system", "user"] and len(agent) == 2
    assert agent[0].tool_calls[0].function_name == "shell_exec"
    assert agent[0].observation.results[0].content.strip() == "wired"
    assert trajectory.extra["metadata"]["status"] == "verified" and trajectory.session_id == events[0]["thread_id"]
    sent = [e["usage"] for e in events if e["type"] == "turn.completed"]
    assert [s.metrics.prompt_tokens for s in agent] == [u["input_tokens"] for u in sent]
    posted = [r for r in server.requests if r["path"] == "/generate"]
    if wire == "generate":  # the ids as posted and generated, each generated token's logprob beside it
        assert [s.metrics.prompt_token_ids for s in agent] == [r["prompt_ids"] for r in posted]
        assert all(len(s.metrics.logprobs) == len(s.metrics.completion_token_ids) > 0 for s in agent)
    else:
        assert not posted and all(s.metrics.prompt_token_ids is None for s in agent)
    assert json.loads(line)["schema_version"] == "ATIF-v1.8"
