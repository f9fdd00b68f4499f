"""`oc-repl protocols list | show | sync` through the real CLI, with the user's directories in tmp.

The terminus sync downloads terminal-bench from the package index for real (skipped offline, failed under CI=true);
the OpenClaw-RL prompt comes from a fixture of our own, so its hash never matches the published one; the camel
schema sync builds a virtualenv with camel-ai and is opt-in (OC_REPL_SLOW_TESTS=1).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from oc_repl.protocols import data_dir
from tests.conftest import ROOT, cli_env, read_jsonl, run_cli

FIXTURE = ROOT / "tests" / "fixtures" / "openclaw"
FOUR = ["camel-terminal-toolkit", "terminus-json", "terminus-xml", "raw"]
TOOLS = ["shell_exec", "shell_view", "shell_write_to_process", "shell_write_content_to_file"]
# The hashes reference/protocols.md gives for terminal-bench 0.2.18's templates, those of the texts the sync derives
# from its code (messages.toml), and the hash of the rendered OpenClaw-RL prompt.
TERMINUS_SHA256 = {
    "terminus-json/prompt.txt": "a52a860b54a1cd9beb8ed4083fe8ad3bdf1a5df59c7c6767abfdc33c5359aff2",
    "terminus-xml/prompt.txt": "89c74ea0d7ffe6344e00cdff6c2e50af62bcc6735c53221efb95d65c7fb371af",
    "terminus-json/timeout.txt": "32bf9aa7b157a6a0e0ba0d33b81e59dd67204276f158afc1fe6cb684ced68872",
    "terminus-xml/timeout.txt": "32bf9aa7b157a6a0e0ba0d33b81e59dd67204276f158afc1fe6cb684ced68872",
    "terminus-json/messages.toml": "b62f439ab6a8eb745d821c44098ad3b564452cdee3dbe010d60c426405596be9",
    "terminus-xml/messages.toml": "898efedac843d2050f62c381267b3cc87b69e468e060f38730313a957a935a92",
}
OPENCLAW_SHA256 = "e7a8b69d1aec1cfaf2f3d62243ce2a48dd5b292a782fe0af7fd9cfcccc81f5bd"
FIXTURE_PROMPT = "<role>\nFixture prompt for Linux (in Docker) on x86_64.\n</role>\n /no_think"
SCREEN = "Current Terminal Screen:\nroot@sandbox:/app#" + "\n" * 40


def env(tmp_path: Path) -> dict[str, str]:
    return {**cli_env(tmp_path), "XDG_DATA_HOME": str(tmp_path / "data")}


def oc(tmp_path: Path, *args: str, timeout: float = 60):
    return run_cli(list(args), tmp_path, timeout=timeout, env=env(tmp_path))


def upstream(tmp_path: Path) -> Path:
    return tmp_path / "data" / "oc-repl" / "upstream"


def listing(tmp_path: Path) -> dict[str, dict]:
    proc = oc(tmp_path, "protocols", "list", "--json")
    assert proc.returncode == 0, proc.stderr
    described = json.loads(proc.stdout)["protocols"]
    return {p["name"]: p | {"by_asset": {a["name"]: a for a in p["assets"]}} for p in described}


def show(tmp_path: Path, *args: str) -> dict:
    proc = oc(tmp_path, "protocols", "show", *args, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def run_args(server, tmp_path: Path, transcript: Path, *more: str) -> list[str]:
    sandbox = f"local:{tmp_path / 'w'}"
    return ["run", "--api-base", server.url, "--sandbox", sandbox, "--yes", "--transcript", str(transcript), *more]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- list ----------------------------------------------------------------------------------------------------------


def test_list_shows_the_four_protocols_and_where_each_asset_comes_from(tmp_path):
    proc = oc(tmp_path, "protocols", "list")
    assert proc.returncode == 0, proc.stderr
    for name in FOUR:
        assert any(line.startswith(name + " ") for line in proc.stdout.splitlines()), proc.stdout
    found = listing(tmp_path)
    assert set(FOUR) <= set(found)
    assert {name: found[name]["kind"] for name in FOUR} == {
        "camel-terminal-toolkit": "camel",
        "terminus-json": "terminus-json",
        "terminus-xml": "terminus-xml",
        "raw": "raw",
    }
    camel = found["camel-terminal-toolkit"]["by_asset"]
    system = (data_dir("camel-terminal-toolkit") / "system.txt").read_bytes()
    assert camel["system.txt"]["source"] == "built-in" and camel["system.txt"]["sha256"] == sha(system)
    # our own wording is not upstream's, for the prompt and for the tool descriptions alike
    assert camel["system.txt"]["upstream"] == "differs" and camel["system.txt"]["upstream_sha256"] == OPENCLAW_SHA256
    assert camel["tools.json"]["upstream"] == "differs"
    terminus = found["terminus-json"]["by_asset"]
    assert set(terminus) == {"prompt.txt", "timeout.txt", "messages.toml", "notices.toml"}
    assert terminus["prompt.txt"]["upstream"] == terminus["messages.toml"]["upstream"] == "differs"
    assert terminus["messages.toml"]["upstream_sha256"] == TERMINUS_SHA256["terminus-json/messages.toml"]
    assert terminus["notices.toml"]["upstream"] == "unknown"  # the project's own: upstream has no person in its loop
    assert found["raw"]["assets"] == []


def test_list_follows_user_folders(tmp_path):
    config = tmp_path / "config" / "oc-repl" / "protocols"
    (config / "terminus-xml").mkdir(parents=True)
    (config / "terminus-xml" / "prompt.txt").write_text("Mine: {instruction}\n{terminal_state}")
    (config / "camel-short").mkdir()
    (config / "camel-short" / "manifest.toml").write_text('kind = "camel"\n')
    found = listing(tmp_path)
    xml = found["terminus-xml"]["by_asset"]["prompt.txt"]
    assert xml["source"] == "user" and xml["path"] == str(config / "terminus-xml" / "prompt.txt")
    assert xml["upstream"] == "differs"
    short = found["camel-short"]
    assert short["kind"] == "camel" and set(short["by_asset"]) == set(CAMEL_ASSETS)
    assert short["by_asset"]["tools.json"]["source"] == "built-in"


CAMEL_ASSETS = ("system.txt", "tools.json", "toolkit.toml", "agent.toml", "chat_agent.toml", "notices.toml")


# --- show ----------------------------------------------------------------------------------------------------------


def test_show_camel_prints_the_first_request(tmp_path):
    proc = oc(tmp_path, "protocols", "show", "camel-terminal-toolkit", "--task", "fix the tests")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    system = (data_dir("camel-terminal-toolkit") / "system.txt").read_text()
    assert system.endswith(" /no_think") and system in out
    assert "Task name:fix-the-tests\nTask instruction: fix the tests" in out
    assert all(f'"name": "{tool}"' in out for tool in TOOLS)
    assert "temperature=0.7 top_p=0.8 max_tokens=4096" in out
    assert f"system.txt: built-in sha256 {sha(system.encode())}" in out

    document = show(tmp_path, "camel-terminal-toolkit", "--sampling", "training", "--max-tokens", "1000")
    request = document["request"]
    assert [m["role"] for m in request["messages"]] == ["system", "user"]
    assert request["messages"][0]["content"] == system
    assert [t["function"]["name"] for t in request["tools"]] == TOOLS and request["tool_choice"] == "auto"
    assert (request["temperature"], request["top_p"], request["max_tokens"]) == (1.0, 1.0, 1000)
    tools = (data_dir("camel-terminal-toolkit") / "tools.json").read_bytes()
    assert "\n".join(json.dumps(t) for t in request["tools"]).encode() == tools
    used = [name for name in CAMEL_ASSETS if name != "chat_agent.toml"]  # camel's token cut needs a tokenizer
    assert {a["name"]: a["source"] for a in document["assets"]} == dict.fromkeys(used, "built-in")


def test_show_terminus_xml_uses_a_placeholder_screen(tmp_path):
    proc = oc(tmp_path, "protocols", "show", "terminus-xml", "--task", "make hello.txt")
    assert proc.returncode == 0, proc.stderr
    assert "PLACEHOLDER" in proc.stdout and "no tools" in proc.stdout
    document = show(tmp_path, "terminus-xml", "--task", "make hello.txt", "--temperature", "0.2")
    template = (data_dir("terminus-xml") / "prompt.txt").read_text()
    request = document["request"]
    assert request["messages"] == [
        {"role": "user", "content": template.format(instruction="make hello.txt", terminal_state=SCREEN)}
    ]
    assert "tools" not in request and "tool_choice" not in request and request["temperature"] == 0.2
    assert document["placeholder_screen"] is True and document["assets"][0]["source"] == "built-in"


def test_show_raw_and_an_unknown_protocol(tmp_path):
    request = show(tmp_path, "raw", "--task", "hello", "--system", "Be brief.", "--model", "m1")["request"]
    assert request["model"] == "m1"
    assert request["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello"}]
    proc = oc(tmp_path, "protocols", "show", "no-such-protocol")
    assert proc.returncode == 2 and "unknown protocol 'no-such-protocol'" in proc.stderr


# --- sync: terminus templates from the package index ---------------------------------------------------------------


def _no_temp_files(folder: Path) -> None:
    assert not [p for p in folder.rglob("*") if p.name.endswith(".part")]


def test_sync_terminus_templates_from_the_package_index(serve, tmp_path):
    from tests.protocols.terminus.test_terminus_exact import _sync

    _sync(tmp_path)
    stored = {key: sha((upstream(tmp_path) / key).read_bytes()) for key in TERMINUS_SHA256}
    assert stored == TERMINUS_SHA256
    _no_temp_files(upstream(tmp_path))
    record = json.loads((upstream(tmp_path) / "sync.json").read_text())["assets"]
    assert {key: record[key]["sha256"] for key in TERMINUS_SHA256} == TERMINUS_SHA256

    found = listing(tmp_path)
    for name in ("terminus-json", "terminus-xml"):
        for asset in ("prompt.txt", "messages.toml"):
            listed = found[name]["by_asset"][asset]
            assert (listed["source"], listed["upstream"]) == ("upstream", "match")
    template = (upstream(tmp_path) / "terminus-json" / "prompt.txt").read_text()
    content = show(tmp_path, "terminus-json", "--task", "say hi")["request"]["messages"][0]["content"]
    assert content == template.format(instruction="say hi", terminal_state=SCREEN)

    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed: the run that records the assets cannot start")
    reply = {"analysis": "a", "plan": "p", "commands": [], "task_complete": True}
    server = serve({"replies": [{"text": json.dumps(reply)}] * 2})
    transcript = tmp_path / "t.jsonl"
    run = oc(tmp_path, *run_args(server, tmp_path, transcript, "--protocol", "terminus-json", "say hi"), timeout=120)
    assert run.returncode == 0, run.stderr
    started = read_jsonl(transcript)[0]
    assert started["type"] == "thread.started" and started["exact"] is False
    notices = sha((data_dir("terminus-json") / "notices.toml").read_bytes())
    assert [(a["name"], a["source"], a["sha256"]) for a in started["assets"]] == [
        ("prompt.txt", "upstream", TERMINUS_SHA256["terminus-json/prompt.txt"]),
        ("messages.toml", "upstream", TERMINUS_SHA256["terminus-json/messages.toml"]),
        ("notices.toml", "built-in", notices),
    ]
    assert server.chat_requests()[0]["body"]["messages"][0]["content"].startswith(template.split("{")[0])


# --- sync: the OpenClaw-RL prompt ----------------------------------------------------------------------------------


def test_openclaw_prompt_mismatch_refuses_and_force_stores_it(serve, tmp_path):
    proc = oc(tmp_path, "protocols", "sync", "--only", "openclaw", "--openclaw-rl", str(FIXTURE))
    assert proc.returncode == 1
    assert OPENCLAW_SHA256 in proc.stdout and sha(FIXTURE_PROMPT.encode()) in proc.stdout
    assert "FAILED  camel-terminal-toolkit/system.txt" in proc.stdout and "--force" in proc.stdout
    assert not (upstream(tmp_path) / "camel-terminal-toolkit").exists()
    assert "Traceback" not in proc.stderr

    prompts = FIXTURE / "terminal-rl" / "agent" / "prompts.py"
    forced = oc(tmp_path, "protocols", "sync", "--only", "openclaw", "--openclaw-rl", str(prompts), "--force")
    assert forced.returncode == 0, forced.stdout + forced.stderr
    assert (upstream(tmp_path) / "camel-terminal-toolkit" / "system.txt").read_text() == FIXTURE_PROMPT
    _no_temp_files(upstream(tmp_path))
    system = listing(tmp_path)["camel-terminal-toolkit"]["by_asset"]["system.txt"]
    assert (system["source"], system["upstream"]) == ("upstream", "differs")
    assert show(tmp_path, "camel-terminal-toolkit")["request"]["messages"][0]["content"] == FIXTURE_PROMPT

    server = serve({"replies": [{"text": "<think>\n\n</think>\n\nok"}]})
    transcript = tmp_path / "t.jsonl"
    run = oc(tmp_path, *run_args(server, tmp_path, transcript, "say ok"))
    assert run.returncode == 0, run.stderr
    assets = {a["name"]: a for a in read_jsonl(transcript)[0]["assets"]}
    assert assets["system.txt"]["source"] == "upstream"
    assert assets["system.txt"]["sha256"] == sha(FIXTURE_PROMPT.encode())
    assert server.chat_requests()[0]["body"]["messages"][0]["content"] == FIXTURE_PROMPT


def test_openclaw_sources_that_cannot_be_read(tmp_path):
    closed = "http://127.0.0.1:9/terminal-rl/agent/prompts.py"  # the discard port: nothing listens there
    proc = oc(tmp_path, "protocols", "sync", "--only", "openclaw", "--openclaw-rl", closed)
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()  # one line for each asset of the source: the prompt and the harness's texts
    assert [line.split(":", 1)[0] for line in lines] == [
        "FAILED  camel-terminal-toolkit/system.txt",
        "FAILED  camel-terminal-toolkit/agent.toml",
    ]
    assert all(f"cannot download {closed}" in line for line in lines)
    missing = oc(tmp_path, "protocols", "sync", "--only", "openclaw", "--openclaw-rl", str(tmp_path / "nowhere"))
    assert missing.returncode == 1 and "no OpenClaw-RL prompts file" in missing.stdout
    assert not upstream(tmp_path).exists() or not any(upstream(tmp_path).rglob("*.txt"))


# --- pieces --------------------------------------------------------------------------------------------------------


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(tmp_path, monkeypatch):
    from oc_repl.protocols import sync

    target = tmp_path / "a" / "prompt.txt"
    sync.write_atomic(target, b"old")

    def broken(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(sync.os, "replace", broken)
    with pytest.raises(OSError):
        sync.write_atomic(target, b"new")
    assert target.read_bytes() == b"old" and [p.name for p in target.parent.iterdir()] == ["prompt.txt"]


def test_github_addresses_become_raw_file_addresses():
    from oc_repl.protocols.camel.openclaw import raw_github_url

    raw = "https://raw.githubusercontent.com/Gen-Verse/OpenClaw-RL"
    assert raw_github_url("https://github.com/Gen-Verse/OpenClaw-RL") == f"{raw}/main/terminal-rl/agent/prompts.py"
    tree = "https://github.com/Gen-Verse/OpenClaw-RL/tree/dev"
    assert raw_github_url(tree) == f"{raw}/dev/terminal-rl/agent/prompts.py"
    blob = "https://github.com/Gen-Verse/OpenClaw-RL/blob/abc123/terminal-rl/agent/prompts.py"
    assert raw_github_url(blob) == f"{raw}/abc123/terminal-rl/agent/prompts.py"
    assert raw_github_url("https://example.org/prompts.py") == "https://example.org/prompts.py"


def test_the_cli_and_the_sync_module_agree_on_the_sources():
    from oc_repl.cli.cmd_protocols import SAMPLING_NAMES, SYNC_SOURCES
    from oc_repl.protocols.sync import SOURCES
    from oc_repl.training import SAMPLING_PRESETS

    assert SYNC_SOURCES == SOURCES and set(SAMPLING_NAMES) == set(SAMPLING_PRESETS)


# --- sync: camel's own tool schemas (slow: installs camel-ai into a virtualenv) ------------------------------------


TOOLS_SHA256 = "b4f474bce5bf4d4d1f3981bba26e4dbd4654991e6599494f8bf699b8adb4519c"


@pytest.mark.skipif(os.environ.get("OC_REPL_SLOW_TESTS") != "1", reason="installs camel-ai; set OC_REPL_SLOW_TESTS=1")
@pytest.mark.timeout(1800)
def test_camel_tool_schemas_are_generated_by_camel(tmp_path):
    first = oc(tmp_path, "protocols", "sync", "--only", "camel", timeout=1700)
    assert first.returncode == 0, first.stdout + first.stderr
    # the manifest carries the hash the first sync recorded; camel 0.2.90 must reproduce it byte for byte
    assert f"sha256 {TOOLS_SHA256} matches" in first.stdout
    data = (upstream(tmp_path) / "camel-terminal-toolkit" / "tools.json").read_bytes()
    tools = [json.loads(line) for line in data.decode().split("\n")]
    assert [t["function"]["name"] for t in tools] == TOOLS and "\n".join(map(json.dumps, tools)).encode() == data
    for tool in tools:
        params = tool["function"]["parameters"]
        assert tool["function"]["strict"] is True and params["additionalProperties"] is False
        assert params["required"] == list(params["properties"])
    shell_exec = tools[0]["function"]["parameters"]["properties"]
    assert shell_exec["block"]["type"] == ["boolean", "null"] and shell_exec["timeout"]["type"] == ["number", "null"]
    record = upstream(tmp_path) / "sync.json"
    assert json.loads(record.read_text())["assets"]["camel-terminal-toolkit/tools.json"]["sha256"] == sha(data)

    again = oc(tmp_path, "protocols", "sync", "--only", "camel", timeout=300)
    assert again.returncode == 0 and "reusing the virtualenv" in again.stderr and "matches" in again.stdout
    listed = listing(tmp_path)["camel-terminal-toolkit"]["by_asset"]["tools.json"]
    assert (listed["source"], listed["upstream"]) == ("upstream", "match")
