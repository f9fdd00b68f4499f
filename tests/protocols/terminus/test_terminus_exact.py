"""terminus, exactly: after a real `oc-repl protocols sync --only terminus`, `oc-repl run --exact`
sends, after every reply, exactly what terminal-bench 0.2.18's own agent sends for the same reply and the same
terminal output; without the sync it refuses to start.

The run is real (the CLI, a local tmux terminal, the loopback fake server, scripted replies that give warnings, a
parse error, an observation over 10 000 bytes, both completion claims and an output-length overflow, and for XML a
rescued cut reply). Then upstream's agent runs the same episode from its wheel: it is given the same replies and, as
its terminal output, the observations oc-repl captured (the transcript holds them), and every request it makes is
compared with every request oc-repl sent, whole. The replies avoid warnings that list two or more names (unknown
command fields, several missing sections or unknown tags): upstream lists those in set order, which depends on the
string hashing of the process, and oc-repl runs in another process than upstream here.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from oc_repl.protocols.terminus.upstream import Upstream, loaded
from tests import upstream_terminus as tb
from tests.conftest import cli_env, read_jsonl, run_cli

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")

TASK = "Write {a} file"
BIG = "head -c 12000 /dev/zero | tr '\\0' x; echo\n"  # one line over 10 000 bytes, wrapped by the terminal


def js(commands: list[dict], complete: bool = False, before: str = "") -> str:
    body = {"analysis": "looking", "plan": "next", "commands": commands, "task_complete": complete}
    return before + json.dumps(body)


def xml(keystrokes: str, complete: bool = False, before: str = "") -> str:
    done = "<task_complete>true</task_complete>" if complete else ""
    return f"{before}<response><analysis>a</analysis><plan>p</plan><commands>{keystrokes}</commands>{done}</response>"


LONG_JSON = js([{"keystrokes": "cat > notes.txt <<'EOF'\n" + "words " * 200 + "\nEOF\n", "duration": 0.5}])
RESCUED = xml(f'<keystrokes duration="3">{BIG}</keystrokes>') + "\n<response><analysis>and more"
LONG_XML = xml('<keystrokes duration="0.5">cat > notes.txt <<EOF\n' + "words " * 200 + "\nEOF\n</keystrokes>")
SCRIPTS = {
    "json": [
        {"text": js([{"keystrokes": "echo one\n"}], before="Sure.\n")},  # warnings: text before, no duration
        {"text": '{"plan": "p"}'},  # a parse error: nothing runs
        {"text": js([{"keystrokes": BIG, "duration": 3}])},  # an observation over 10 000 bytes
        {"text": js([{"keystrokes": "ls\n", "duration": 0.5}], complete=True)},  # the completion question
        {"text": LONG_JSON, "max_tokens_cut": 120},  # cut by the output token limit: nothing runs
        {"text": js([], complete=True)},  # the second claim in a row: done
    ],
    "xml": [
        {"text": xml("<keystrokes>echo one\n</keystrokes>", before="Sure.\n")},
        {"text": "<response><analysis>a</analysis><plan>p</plan></response>"},
        {"text": RESCUED, "max_tokens_cut": len(RESCUED) - 2},  # cut, but its first block is whole: it runs
        {"text": xml('<keystrokes duration="0.5">ls\n</keystrokes>', complete=True)},
        {"text": LONG_XML, "max_tokens_cut": 120},
        {"text": xml("", complete=True)},
    ],
}


@pytest.fixture(scope="module")
def up() -> Iterator[Upstream]:
    with loaded(tb.wheel()) as upstream:
        yield upstream


def oc(home: Path, *args: str, timeout: float = 120):
    return run_cli(list(args), home, timeout=timeout, env={**cli_env(home), "XDG_DATA_HOME": str(home / "data")})


def run_exact(home: Path, server, fmt: str, transcript: Path):
    work = home / "work"
    work.mkdir(exist_ok=True)
    args = ["run", "--exact", "--protocol", f"terminus-{fmt}", "--api-base", server.url, "--retries", "0"]
    return oc(home, *args, "--sandbox", f"local:{work}", "--yes", "--transcript", str(transcript), TASK)


def test_exact_without_a_sync_refuses_to_start(serve, tmp_path) -> None:
    server = serve({"replies": SCRIPTS["json"]})
    proc = run_exact(tmp_path, server, "json", tmp_path / "t.jsonl")
    assert proc.returncode == 2, proc.stderr
    assert "oc-repl protocols sync" in proc.stderr and "Traceback" not in proc.stderr
    assert server.chat_requests() == []  # refused before any model call


def _sync(home: Path) -> None:
    proc = oc(home, "protocols", "sync", "--only", "terminus", timeout=300)
    if proc.returncode != 0 and "could not download" in proc.stdout:
        reason = f"terminal-bench could not be downloaded: {proc.stdout.splitlines()[0]}"
        if os.environ.get("CI") == "true":
            pytest.fail(reason + "; CI=true, so this test may not be skipped", pytrace=False)
        pytest.skip(reason)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _replies(up: Upstream, script: list[dict]) -> list:
    """What upstream's model client hands its agent for each scripted reply: the text, or for one cut by the token
    limit, the error litellm raises with the cut text."""
    return [up.overflow(r["text"][: r["max_tokens_cut"]]) if "max_tokens_cut" in r else r["text"] for r in script]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("fmt", ["json", "xml"])
def test_exact_run_sends_what_terminal_bench_sends(serve, tmp_path, up: Upstream, fmt: str) -> None:
    _sync(tmp_path)
    server = serve({"replies": SCRIPTS[fmt]})
    transcript = tmp_path / "t.jsonl"
    proc = run_exact(tmp_path, server, fmt, transcript)
    assert proc.returncode == 0, proc.stderr
    events = read_jsonl(transcript)

    started = events[0]
    assert started["type"] == "thread.started" and started["exact"] is True and started["deviations"] == []
    assert {a["name"] for a in started["assets"]} == {"prompt.txt", "messages.toml"}
    assert all(a["source"] == "upstream" for a in started["assets"]), started["assets"]

    sent = [e["request"]["messages"] for e in events if e["type"] == "request.sent"]
    items = [e["item"] for e in events if e["type"] == "item.completed" and e["item"]["type"] == "command_execution"]
    observations = [i["aggregated_output"] for i in items if i["tool"] == "terminal"]
    typed = [i["command"] for i in items if i["tool"] == "keystrokes"]
    # the screen the first message shows, taken out of it: the synced template filled around a marker
    template = (tmp_path / "data" / "oc-repl" / "upstream" / f"terminus-{fmt}" / "prompt.txt").read_text()
    before, after = template.format(instruction=TASK, terminal_state="\0").split("\0")
    first = sent[0][0]["content"]
    assert first.startswith(before) and first.endswith(after)
    screen = first[len(before) : len(first) - len(after)]

    # upstream reads the screen once more after the confirming reply, and ends: no request shows it, and oc-repl,
    # saving the sandbox a call, does not take it
    unseen = "the screen after the confirmation"
    model, session = up.converse(fmt, TASK, _replies(up, SCRIPTS[fmt]), [screen, *observations, unseen])
    assert session.observations == [] and unseen not in json.dumps(model.conversation())
    assert len(sent) == len(SCRIPTS[fmt]) == len(model.calls)
    for number, (ours, theirs) in enumerate(zip(sent, model.conversation(), strict=True), 1):
        assert ours == theirs, f"request {number} differs"
    assert typed == [keys for keys, _ in session.sent]
    # the scripted situations really happened, as upstream's agent saw them
    assert any(len(o.encode()) > 10000 for o in observations)
    user = [m["content"] for m in sent[-1] if m["role"] == "user"]
    assert user[-1] == user[-2]  # the overflow error, sent twice in a row as upstream does
