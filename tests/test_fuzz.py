"""The whole Session, driven by random server bodies and random model texts, for every protocol.

Whatever arrives (valid and broken JSON, SSE fragments, odd types, huge and non-UTF-8 strings, tool-call and reply
markup in every shape), a run ends with one of the documented exit codes, never 70, and its transcript parses line by
line and ends with `thread.completed`. Commands come only from a short list of harmless ones, and run in a confined
local sandbox. OC_REPL_FUZZ_EXAMPLES sets the examples per protocol (CI: 600, so 2400 in all).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oc_repl.config import validate
from oc_repl.event_read import parse_event
from oc_repl.outcome import EXIT_CODES
from oc_repl.plan import Given, plan
from oc_repl.sandbox.local import LocalSandbox
from oc_repl.session import Fanout, Session
from oc_repl.transcript import TranscriptWriter
from tests.fakeserver import FakeServer, call_text

EXAMPLES = int(os.environ.get("OC_REPL_FUZZ_EXAMPLES", "60"))
DOCUMENTED = set(EXIT_CODES.values()) - {70}
TOOLS = ["shell_exec", "shell_view", "shell_write_to_process", "shell_write_content_to_file"]
SAFE_COMMANDS = ["echo hi", "true", "printf 'a\\tb\\n'", "cat /dev/null", "ls", "echo é", "exit 3"]
KEYS = ["ls\n", "echo hi\n", "", "C-c", "-1\n", "Enter", "echo é\n", "C-d"]

# --- values a server or a model may produce ---------------------------------------------------------------------

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["\ud800", "stop", "length", "tool_calls", "", "x" * 300]),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)
ids = st.one_of(st.sampled_from(["a", "s1", "job"]), json_values)


def _json(value: object) -> str:
    return json.dumps(value, allow_nan=True)


tool_arguments = st.one_of(
    st.fixed_dictionaries(
        {
            "id": ids,
            "command": st.sampled_from(SAFE_COMMANDS),
            "block": st.sampled_from([True, False, None]),
            "timeout": st.sampled_from([None, 0, 0.3, 2, "1"]),
        }
    ),
    st.fixed_dictionaries({"content": st.text(max_size=30), "file_path": st.sampled_from(["f.txt", "d/e.txt", "."])}),
    st.dictionaries(st.sampled_from(["id", "command", "x"]), json_values, max_size=3),
    json_values,
    st.lists(json_values, max_size=2),
)
tool_calls = st.builds(
    lambda name, args, newlines: call_text(name, args, newlines=newlines, think=False),
    st.sampled_from([*TOOLS, "bogus", "", "shell_kill_process"]),
    tool_arguments,
    st.booleans(),
)
terminus_json = st.builds(
    lambda commands, complete, extra: _json(
        {"analysis": "a", "plan": "p", "commands": commands, "task_complete": complete, **extra}
    ),
    st.lists(
        st.one_of(
            st.builds(lambda k, d: {"keystrokes": k, "duration": d}, st.sampled_from(KEYS), st.sampled_from([0, 0.2])),
            json_values,
        ),
        max_size=3,
    ),
    st.one_of(st.booleans(), json_values),
    st.dictionaries(st.sampled_from(["x", "analysis", "commands"]), json_values, max_size=2),
)
terminus_xml = st.builds(
    lambda keys, tail: (
        "<response><analysis>a</analysis><plan>p</plan><commands>"
        + "".join(f'<keystrokes duration="0.1">{k}</keystrokes>' for k in keys)
        + f"</commands>{tail}"
    ),
    st.lists(st.sampled_from(KEYS), max_size=3),
    st.sampled_from(["<task_complete>true</task_complete></response>", "</response>", "", "<response>", "<a"]),
)
fragments = st.sampled_from(
    ["<think>", "</think>", "<tool_call>", "</tool_call>", "{", "}", "[" * 300, "<response>", "\n", "```json\n"]
)
# Listed more than once: most of what a terminal agent writes is calls and replies in the protocol's shape.
model_texts = st.lists(
    st.one_of(
        st.text(max_size=40), fragments, tool_calls, tool_calls, terminus_json, terminus_xml, st.just("é" * 2000)
    ),
    max_size=4,
).map("".join)

# --- what the server sends ---------------------------------------------------------------------------------------

chunk = st.one_of(
    json_values,
    st.builds(
        lambda delta, finish: {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]},
        json_values,
        json_values,
    ),  # fmt: skip
    st.text(max_size=20),
)
model_replies = st.one_of(
    st.builds(lambda text: {"text": text}, model_texts),
    st.builds(
        lambda text: {"text": text},
        st.lists(st.one_of(tool_calls, terminus_json, terminus_xml), max_size=2).map("".join),
    ),
    st.builds(lambda text, cut: {"text": text, "max_tokens_cut": cut}, model_texts, st.integers(0, 40)),
)
broken_replies = st.one_of(
    st.builds(lambda body, stream: {"raw_body": body, "raw_stream": stream}, json_values, st.lists(chunk, max_size=5)),
    st.builds(
        lambda data: {"raw_body": data, "raw_stream": [data]},
        st.binary(max_size=60).map(lambda b: b + b"\xff\xfe"),
    ),
    st.builds(
        lambda status, body: {"http_error": status, "body": body}, st.sampled_from([400, 404, 500, 503]), json_values
    ),  # fmt: skip
    st.sampled_from([{"disconnect": True, "text": "x"}, {"drop_stream": True}, {"reset": True, "text": "yy"}]),
)
# Mostly what a model writes, turn after turn; sometimes a broken body at the end, which ends the run.
replies = st.tuples(st.lists(model_replies, min_size=1, max_size=4), st.one_of(st.none(), broken_replies)).map(
    lambda both: both[0] + ([both[1]] if both[1] is not None else [])
)
scripts = st.fixed_dictionaries(
    {
        "flavour": st.sampled_from(["sglang", "vllm", "noparser", "llamacpp-python", "ollama"]),
        "reasoning_parser": st.booleans(),
        "replies": replies,
    }
)


@pytest.fixture(scope="module")
def server():
    with FakeServer({"replies": []}) as fake:
        yield fake


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    sandbox = LocalSandbox(tmp_path_factory.mktemp("fuzz") / "box")  # confined: the host stays read-only
    yield sandbox
    sandbox.close()


@pytest.fixture(scope="module")
def judges() -> dict[int, Any]:
    """The judge of the shared sandbox, taken by the first example and reused by the rest, as a shell's conversation
    reuses its sandbox's: the baseline costs more than most examples and is not what they try."""
    return {}


def run_once(
    server: FakeServer,
    box: LocalSandbox,
    judges: dict[int, Any],
    folder: Path,
    protocol: str,
    script: dict,
    stream: bool,
) -> None:
    server.script, server._served = script, 0
    settings_ = validate(
        {
            "api_base": server.url,
            "model": "fuzz",
            "protocol": protocol,
            "sandbox": box.spec,
            "yes": True,
            "retries": 0,
            "max_turns": 3,
            "stream": stream,
            "idle_timeout": 5,
            "request_timeout": 5,
        }
    )
    path = folder / "t.jsonl"
    path.unlink(missing_ok=True)
    transcript = TranscriptWriter(path)
    # one confined sandbox for every example: starting one costs more than most examples
    session = Session(dataclasses.replace(plan(settings_), sandboxes=Given(box)), Fanout(transcript))
    session.judge = judges.get(id(box))
    try:
        result = session.run("do the thing")
    finally:
        judges[id(box)] = session.judge
        session.new_conversation()
        session.client.close()
        transcript.close()
    assert result.exit_code in DOCUMENTED, (result.status, script)
    events = [parse_event(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert events[-1].type == "thread.completed" and events[-1].exit_code == result.exit_code
    assert not any(e.type == "error" and e.kind == "internal" for e in events), script


def _fuzz(protocol: str):
    # The whole search is one test: its time limit grows with the examples (a terminus example takes about 0.15 s
    # alone, several times that beside three other workers on two cores).
    @pytest.mark.timeout(max(120, EXAMPLES))
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
    )
    @given(script=scripts, stream=st.booleans())
    def test(server, box, judges, tmp_path, script, stream):
        run_once(server, box, judges, tmp_path, protocol, script, stream)

    return test


test_fuzz_raw = _fuzz("raw")
test_fuzz_camel = _fuzz("camel-terminal-toolkit")
test_fuzz_terminus_json = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")(
    _fuzz("terminus-json")
)
test_fuzz_terminus_xml = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")(
    _fuzz("terminus-xml")
)
