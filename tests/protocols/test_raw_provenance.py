"""The raw protocol end to end, and provenance: which assets a run used, their source and their hashes."""

from __future__ import annotations

import hashlib
import json

from oc_repl.event_read import parse_event
from tests.conftest import cli_env, read_jsonl, run_cli
from tests.fakeserver import call_text


def test_raw_is_plain_chat_and_never_executes_markup(serve, tmp_path):
    markup = call_text("shell_exec", {"id": "a", "command": "touch pwned", "block": True, "timeout": None})
    server = serve({"flavour": "noparser", "replies": [{"text": "Sure.\n" + markup.split("</think>\n\n")[1]}]})
    proc = run_cli(
        [
            "run",
            "--api-base",
            server.url,
            "--protocol",
            "raw",
            "--system",
            "Be brief.",
            "--sandbox",
            f"local:{tmp_path / 'w'}",
            "--json",
            "hello there",
        ],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr  # no --yes needed: nothing runs
    body = server.chat_requests()[0]["body"]
    assert body["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello there"}]
    assert "tools" not in body
    events = [parse_event(line) for line in proc.stdout.splitlines()]
    final = events[-1]
    assert final.status == "done" and "<tool_call>" in final.final_answer and "touch pwned" in final.final_answer
    declined = [e.item for e in events if e.type == "item.completed" and e.item.type == "command_execution"]
    assert [d.status for d in declined] == ["declined"]
    assert not (tmp_path / "w" / "pwned").exists()


def _first_request_and_assets(serve, tmp_path, *args):
    server = serve({"replies": [{"text": "<think>\n\n</think>\n\nok"}]})
    transcript = tmp_path / "t.jsonl"
    proc = run_cli(
        [
            "run",
            "--api-base",
            server.url,
            "--sandbox",
            f"local:{tmp_path / 'w'}",
            "--yes",
            "--transcript",
            str(transcript),
            *args,
            "say ok",
        ],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    started = read_jsonl(transcript)[0]
    return server.chat_requests()[0]["body"], {a["name"]: a for a in started["assets"]}


def test_recorded_hashes_are_of_the_bytes_sent(serve, tmp_path):
    body, assets = _first_request_and_assets(serve, tmp_path)
    system = body["messages"][0]["content"].encode()
    assert assets["system.txt"]["sha256"] == hashlib.sha256(system).hexdigest()
    assert assets["system.txt"]["source"] == "built-in"
    tools = "\n".join(json.dumps(t) for t in body["tools"]).encode()
    assert assets["tools.json"]["sha256"] == hashlib.sha256(tools).hexdigest()


def test_user_override_folder_changes_the_request_and_the_source(serve, tmp_path):
    folder = tmp_path / "config" / "oc-repl" / "protocols" / "camel-terminal-toolkit"
    folder.mkdir(parents=True)
    (folder / "system.txt").write_text("A custom prompt. /no_think")
    body, assets = _first_request_and_assets(serve, tmp_path)
    assert body["messages"][0]["content"] == "A custom prompt. /no_think"
    assert assets["system.txt"]["source"] == "user" and assets["system.txt"]["path"] == str(folder / "system.txt")
    assert assets["tools.json"]["source"] == "built-in"


def test_a_user_protocol_reuses_a_kind(serve, tmp_path):
    folder = tmp_path / "config" / "oc-repl" / "protocols" / "camel-short"
    folder.mkdir(parents=True)
    (folder / "manifest.toml").write_text('kind = "camel"\n')
    (folder / "system.txt").write_text("Short prompt. /no_think")
    body, assets = _first_request_and_assets(serve, tmp_path, "--protocol", "camel-short")
    assert body["messages"][0]["content"] == "Short prompt. /no_think"
    assert len(body["tools"]) == 4 and assets["tools.json"]["source"] == "built-in"
    listing = run_cli(["protocols", "list"], tmp_path, env=cli_env(tmp_path))
    assert "camel-short" in listing.stdout
