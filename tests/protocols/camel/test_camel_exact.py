"""`--exact` for camel-terminal-toolkit: the tools as camel-ai 0.2.90's docker backend answered in training.

The differential test runs the same scenarios of tool calls through the real camel-ai 0.2.90 TerminalToolkit
(docker backend, built and called as the training harness did; tests/camel_reference.py, in the sync's camel
virtualenv) and through `oc-repl run --exact --sandbox docker:<container>` against the loopback fake server, each in a
fresh container of the test image (network none), and compares what oc-repl sent back to the model (the tool results
in the transcript's request.sent events) with what the toolkit returned, byte for byte after normalising container
names and ids, temporary file names and how often the no-new-output marker repeats (timing decides that).

`--exact` runs only with every asset synced from upstream. camel's (toolkit.toml, tools.json) come from a real
`oc-repl protocols sync --only camel`. OpenClaw-RL's (system.txt, agent.toml) cannot be fetched here: they are synced
with `--force` from the project's own stand-ins in tests/fixtures/openclaw, and `oc_repl.protocols.upstream_sha256`
is patched for exactly those two assets to the stand-ins' hashes. The reference side words a raised exception with
that same synced agent.toml, so the comparison covers the exception's type and message, not the harness's wording.

The camel virtualenv is cached between runs: XDG_DATA_HOME points at a folder under $OC_REPL_CACHE (CI) or
~/.cache/oc-repl-tests. Slow (a virtualenv, then ~2 minutes of scenarios): runs with OC_REPL_SLOW_TESTS=1, as in CI.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from oc_repl import deviations
from oc_repl.protocols.camel.protocol import AGENT_SPEC
from oc_repl.protocols.camel.text import RICH_LINES
from oc_repl.protocols.camel.tools import TOOLKIT_SPEC, ToolCallError
from oc_repl.protocols.templates import Templates, parse
from tests.camel_scenarios import ATTEMPTS, SCENARIOS
from tests.conftest import ROOT, cli_env, read_jsonl, run_cli
from tests.fakeserver import calls_text
from tests.protocols.camel.test_camel_tools import NO_OUTPUT, TERMINATED_EMPTY, M, N, builtin_tools

PROTOCOL = "camel-terminal-toolkit"
IMAGE = os.environ.get("OC_REPL_TEST_IMAGE", "oc-repl-test:bookworm")
FIXTURE = ROOT / "tests" / "fixtures" / "openclaw"
SLOW = os.environ.get("OC_REPL_SLOW_TESTS") == "1"

# --- the synced assets ---------------------------------------------------------------------------------------------


def data_home(rich: str) -> Path:
    """Where the sync with rich's line `rich` keeps its files and camel's virtualenv."""
    root = os.environ.get("OC_REPL_CACHE") or Path.home() / ".cache" / "oc-repl-tests"
    return Path(root) / f"camel-exact-data-rich{rich}"


def upstream_file(rich: str, name: str) -> Path:
    return data_home(rich) / "oc-repl" / "upstream" / PROTOCOL / name


@pytest.fixture(scope="module", params=RICH_LINES, ids=lambda line: f"rich{line}")
def synced(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, str]]:
    """A real camel sync with rich's line of the param, and a forced one of the stand-ins: the line, and the
    stand-ins' hashes, by asset."""
    from oc_repl.protocols.sync import sha256

    rich = request.param
    tmp = tmp_path_factory.mktemp("sync")
    env = {**cli_env(tmp), "XDG_DATA_HOME": str(data_home(rich))}
    camel = run_cli(["protocols", "sync", "--only", "camel", "--camel-rich", rich], tmp, timeout=1700, env=env)
    assert camel.returncode == 0, camel.stdout + camel.stderr
    for name in ("tools.json", "toolkit.toml", "chat_agent.toml"):  # camel-ai 0.2.90 gives the published bytes
        assert f"ok  {PROTOCOL}/{name}: stored, sha256 " in camel.stdout and camel.stdout.count(" matches") == 3
    args = ["protocols", "sync", "--only", "openclaw", "--openclaw-rl", str(FIXTURE), "--force"]
    openclaw = run_cli(args, tmp, timeout=120, env=env)
    assert openclaw.returncode == 0, openclaw.stdout + openclaw.stderr
    return rich, {name: sha256(upstream_file(rich, name).read_bytes()) for name in ("system.txt", "agent.toml")}


def docker_client() -> Any:
    import docker

    try:
        client = docker.from_env()
        client.ping()
        client.images.get(IMAGE)
    except docker.errors.DockerException as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"docker or the test image is missing ({exc}); CI=true, so this may not be skipped")
        pytest.skip(f"docker or the test image is missing: {exc}")
    return client


# --- the two sides -------------------------------------------------------------------------------------------------


def reference(tmp: Path, scenarios: list[Any], rich: str) -> subprocess.Popen:
    """The real toolkit on `scenarios`, in the background: a subprocess in the camel virtualenv of rich's line."""
    plan = {"image": IMAGE, "scenarios": [{"name": n, "calls": c, "image_workdir": w} for n, c, w in scenarios]}
    (tmp / "plan.json").write_text(json.dumps(plan))
    python = data_home(rich) / "oc-repl" / "cache" / f"camel-ai-0.2.90-rich{rich}" / "bin" / "python"
    script = ROOT / "tests" / "camel_reference.py"
    return subprocess.Popen(
        [str(python), "-I", str(script), str(tmp / "plan.json"), str(tmp / "reference.json")],
        cwd=tmp,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def oc_repl_side(
    client: Any,
    serve: Any,
    tmp: Path,
    monkeypatch: pytest.MonkeyPatch,
    synced: tuple[str, dict[str, str]],
    scenarios: list[Any],
) -> dict:
    """`oc-repl run --exact --camel-rich LINE` on `scenarios`, in process: the tool results it sent, and the container,
    by name."""
    rich, hashes = synced
    from click.testing import CliRunner

    import oc_repl.protocols
    from oc_repl.cli import main

    published = oc_repl.protocols.upstream_sha256
    monkeypatch.setattr(
        oc_repl.protocols,
        "upstream_sha256",
        lambda protocol, name: hashes[name] if name in hashes else published(protocol, name),
    )
    for key, value in cli_env(tmp).items():
        if key.startswith("XDG_") or key == "NO_COLOR":
            monkeypatch.setenv(key, value)
    monkeypatch.setenv("XDG_DATA_HOME", str(data_home(rich)))
    found = {}
    for index, (name, calls, workdir) in enumerate(scenarios):
        server = serve({"replies": [{"text": calls_text(calls)}, {"text": "done"}]})
        extra = {"working_dir": workdir} if workdir else {}
        container = client.containers.run(
            IMAGE, ["sleep", "infinity"], detach=True, network_mode="none", name=f"oc-exact-{uuid.uuid4().hex[:10]}",
            **extra,
        )  # fmt: skip
        try:
            transcript = tmp / f"{index}.jsonl"
            args = ["run", "--api-base", server.url, "--sandbox", f"docker:{container.name}", "--exact", "--yes"]
            args += ["--wire", "chat", "--camel-rich", rich]  # the tool results here, the prompt's tokens elsewhere
            sigterm = signal.getsignal(signal.SIGTERM)  # `run` installs its own handler; this process keeps its own
            try:
                result = CliRunner().invoke(main, [*args, "--transcript", str(transcript), "do it"])
            finally:
                signal.signal(signal.SIGTERM, sigterm)
            assert result.exit_code == 0, (name, result.output, result.exception)
        finally:
            container.remove(force=True)
        sent = [e for e in read_jsonl(transcript) if e["type"] == "request.sent"]
        blocks = sent[-1]["request"]["messages"][-1]["content"]
        texts = blocks.removeprefix("<tool_response>\n").removesuffix("\n</tool_response>")
        found[name] = {"texts": texts.split("\n</tool_response>\n<tool_response>\n"), "container": container}
    return found


def normalised(text: str, container: tuple[str, str], marker: str) -> str:
    ident, name = container
    for value in (ident, ident[:12], name):
        text = text.replace(value, "<container>")
    text = re.sub(r"temp_[0-9a-f]{32}\.txt", "temp_<hex>.txt", text)
    # docker's client, refusing a path before it has read the whole file, logs that the reading was cut, or not:
    # timing decides
    text = re.sub(r'time="[^"]*" level=error msg="[^\n]*"\n', "", text)
    return re.sub(f"(?:{re.escape(marker)})+", marker, text)


def differences_of(scenarios: list[Any], ours: dict, theirs: dict, agent: Templates, marker: str) -> dict[str, list]:
    found: dict[str, list[str]] = {}
    for name, calls, _ in scenarios:
        got, want = ours[name], theirs[name]
        assert len(got["texts"]) == len(calls) == len(want["results"]), name
        for (tool, arguments), text, result in zip(calls, got["texts"], want["results"], strict=True):
            expected = result.get("text")
            if expected is None:
                kind, message = result["raised"]
                expected = agent.render("tool_error", name=tool, type=kind, message=message)
            mine = normalised(text, (got["container"].id, got["container"].name), marker)
            upstream = normalised(expected, tuple(want["container"]), marker)
            if mine != upstream:
                found.setdefault(name, []).append(
                    f"{name}: {tool}({arguments}):\n  oc-repl  {mine!r}\n  upstream {upstream!r}"
                )
    return found


@pytest.mark.skipif(not SLOW, reason="installs camel-ai and runs every scenario twice; set OC_REPL_SLOW_TESTS=1")
@pytest.mark.timeout(2400)
def test_exact_tool_results_equal_camel_ai_0_2_90(synced, serve, tmp_path, monkeypatch):
    client = docker_client()
    assert len(SCENARIOS) >= 20
    rich = synced[0]
    toolkit = Templates(parse(upstream_file(rich, "toolkit.toml").read_bytes(), TOOLKIT_SPEC, "toolkit.toml"))
    agent = Templates(parse(upstream_file(rich, "agent.toml").read_bytes(), AGENT_SPEC, "agent.toml"))
    marker = toolkit.render("view.terminated_empty")
    started = time.monotonic()
    pending, differences, runs = list(SCENARIOS), {}, []
    for attempt in range(ATTEMPTS):
        where = tmp_path / f"attempt-{attempt}"
        where.mkdir()
        ref = reference(where, pending, rich)
        try:
            ours = oc_repl_side(client, serve, where, monkeypatch, synced, pending)
            out, _ = ref.communicate(timeout=1200)
        finally:
            ref.kill()
        assert ref.returncode == 0, out
        theirs = json.loads((where / "reference.json").read_text())
        differences = differences_of(pending, ours, theirs, agent, marker)
        runs.append(f"{len(pending)} scenarios: {len(differences)} differed")
        pending = [scenario for scenario in pending if scenario[0] in differences]
        if not pending:
            break
    print(
        f"{len(SCENARIOS)} scenarios, {sum(len(c) for _, c, _ in SCENARIOS)} calls, {time.monotonic() - started:.0f} s;"
        f" runs: {'; '.join(runs)}"
    )
    assert not differences, "\n".join(line for lines in differences.values() for line in lines)


# --- exact mode on a local sandbox: what the differential test cannot time or reach ------------------------------


@pytest.fixture
def box(tmp_path: Path):
    from oc_repl.sandbox.local import LocalSandbox

    sandbox = LocalSandbox(tmp_path / "box")
    yield sandbox
    sandbox.close()


@pytest.fixture
def exact(box):
    tools = builtin_tools(box, deviations=deviations.none())
    yield tools
    tools.close_sessions()


def test_timeout_is_shown_as_given_and_null_waits_without_limit(box):
    for is_exact in (True, False):
        chosen = deviations.none() if is_exact else deviations.defaults()
        tools = builtin_tools(box, deviations=chosen, default_timeout=0.25)
        try:
            left_out = tools.call("shell_exec", {"id": "a", "command": "sleep 2"})
            assert left_out.text == M.render("exec.timeout", id="a", timeout="0.25")  # str() of the default
            given = tools.call("shell_exec", {"id": "b", "command": "sleep 2", "timeout": 0})
            assert given.text == M.render("exec.timeout", id="b", timeout="0")
            null = tools.call("shell_exec", {"id": "c", "command": "sleep 0.6; echo done", "timeout": None})
            # upstream's join(None) waited for the end; with null_timeout_bounded null is the default
            assert null.text == ("done" if is_exact else M.render("exec.timeout", id="c", timeout="0.25"))
        finally:
            tools.close_sessions()


def test_escape_codes_alone_give_an_empty_result_and_blanks_the_no_output_text(exact):
    assert exact.call("shell_exec", {"id": "a", "command": r"printf '\033[0m\033[?25l'"}).text == ""
    assert exact.call("shell_exec", {"id": "a", "command": r"printf ' \n\t'"}).text == NO_OUTPUT


def test_input_to_a_timed_out_command_fails_after_the_drain_as_upstream(box, exact):
    exact.call("shell_exec", {"id": "t", "command": "sleep 5", "timeout": 0.1})
    started = time.monotonic()
    text = exact.call("shell_write_to_process", {"id": "t", "command": "hi"}).text
    assert time.monotonic() - started >= 1.9  # upstream drained for its full 2 s first
    assert text == M.render("write.error", id="t", error="'NoneType' object has no attribute '_sock'")
    ours = builtin_tools(box)
    try:
        ours.call("shell_exec", {"id": "t", "command": "sleep 5", "timeout": 0.1})
        refused = ours.call("shell_write_to_process", {"id": "t", "command": "hi"})
        assert refused.text == N.render("blocking_session_input", id="t")
    finally:
        ours.close_sessions()


def test_a_timed_out_command_counts_as_running_until_a_view_reports_its_end(exact):
    exact.call("shell_exec", {"id": "t", "command": "sleep 0.3", "timeout": 0.1})
    assert exact._sessions["t"].proc.wait(5)
    again = exact.call("shell_exec", {"id": "t", "command": "cat", "block": False})
    assert again.text == M.render("exec.already_running", id="t")
    assert exact.call("shell_view", {"id": "t"}).text == M.render("view.completed", output="")
    assert exact.call("shell_exec", {"id": "t", "command": "cat", "block": False}).text == M.render(
        "exec.session_started", id="t"
    )


def test_calls_other_than_shell_exec_end_at_the_wall_limit(exact):
    exact.wall_limit = 0.3  # upstream's is 20 s, which its own waits never reach
    exact.call("shell_exec", {"id": "c", "command": "cat", "block": False})
    text = exact.call("shell_write_to_process", {"id": "c", "command": "x"}).text
    assert text == M.render("wrapper.timeout", function="shell_write_to_process", timeout="0.3")


def test_ending_sessions_pile_up_the_marker_for_the_whole_wait(exact):
    exact.call("shell_exec", {"id": "py", "command": "python3 -q", "block": False})
    started = time.monotonic()
    text = exact.call("shell_write_to_process", {"id": "py", "command": "exit()"}).text
    assert time.monotonic() - started >= 4.5
    assert text.endswith(M.render("collect.still_outputting", output="")) and text.count(TERMINATED_EMPTY) >= 7


def test_values_of_other_types_meet_pythons_own_errors(exact, tmp_path: Path):
    with pytest.raises(ToolCallError, match="expected string or bytes-like object, got 'int'"):
        exact.call("shell_exec", {"id": "a", "command": 5})
    assert exact.call("shell_exec", {"id": "a", "command": False}).text == NO_OUTPUT  # quoted as ''
    error = "'>' not supported between instances of 'int' and 'str'"
    assert exact.call("shell_exec", {"id": "a", "command": "true", "timeout": "1"}).text == M.render(
        "exec.error", error=error
    )
    with pytest.raises(ToolCallError, match="unhashable type: 'list'"):
        exact.call("shell_view", {"id": ["a"]})
    assert exact.call("shell_view", {"id": None}).text == M.render("view.unknown", id="None")
    target = str(tmp_path / "f.txt")
    written = exact.call("shell_write_content_to_file", {"content": 5, "file_path": target})
    assert written.text == M.render("file.error", file_path=target, error="write() argument must be str, not int")


def test_a_directory_as_the_target_gets_the_copy_inside_it(exact, box):
    folder = box.root / "folder"  # inside the sandbox directory: a confined sandbox writes nowhere else
    folder.mkdir()
    result = exact.call("shell_write_content_to_file", {"content": "x", "file_path": str(folder)})
    assert result.text == M.render("file.ok", file_path=str(folder))
    (inside,) = folder.iterdir()
    assert re.fullmatch(r"temp_[0-9a-f]{32}\.txt", inside.name) and inside.read_text() == "x"


# --- agent.toml from the training harness's own f-strings ------------------------------------------------------


def test_agent_texts_are_read_out_of_the_harness_f_strings():
    from oc_repl.protocols.camel.openclaw import fetch_openclaw

    fetched = {item.filename: item for item in fetch_openclaw(str(FIXTURE), lambda line: None)}
    texts = parse(fetched["agent.toml"].data, AGENT_SPEC, "agent.toml")
    # the stand-ins' own wording, turned into templates: literal braces doubled, each expression a field
    assert texts == {
        "parse_error": "Fixture feedback: {error}\nA call looks like {{'name': ..., 'arguments': {{}}}}\n"
        "Block start: {content}",
        "tool_error": "<fixture> {name} raised {type} ({message})",
        "unknown_tool": "<fixture> no such tool {name}",
    }
    assert fetched["agent.toml"].expected == oc_repl_manifest_hash("agent.toml")
    only_prompt = fetch_openclaw(str(FIXTURE / "terminal-rl" / "agent" / "prompts.py"), lambda line: None)
    assert [item.filename for item in only_prompt] == ["system.txt"]


def test_an_f_string_field_oc_repl_cannot_fill_fails_the_sync():
    from oc_repl.protocols.camel.openclaw import tool_texts
    from oc_repl.protocols.sync import SyncError

    source = b'class E:\n    async def exec_tool(self, name, arguments):\n        return f"{name!r} unknown"\n'
    with pytest.raises(SyncError, match="f-string field"):
        tool_texts(source, "terminal_env.py")


def oc_repl_manifest_hash(name: str) -> str:
    from oc_repl.protocols.sync import manifest_sha256

    return manifest_sha256(PROTOCOL, name)
