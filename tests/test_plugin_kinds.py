"""A protocol, a sandbox kind, a wire and a task format, each defined in one test module (tests/kinds/) and installed
by entry points alone, are kinds like the built-in ones: `--help` lists their settings and names them, the config
file takes their settings, `run`, `bench` and `doctor` use them. Harbor's agent options: test_harbor_agent.py."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.bench.test_bench import results
from tests.cli.test_cli import answer
from tests.conftest import ROOT, cli_env, run_cli
from tests.docker_support import IMAGE, docker_session
from tests.kinds import installed


def events(proc: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def test_help_lists_the_installed_kinds_and_their_settings(tmp_path):
    shown = run_cli(["run", "--help"], tmp_path, process=True, env=installed(tmp_path)).stdout
    assert "--shout-word TEXT" in shown and "--image-note TEXT" in shown
    flat = " ".join(shown.split())
    assert "installed: shout" in flat and "installed: noted-image:<image>" in flat and "installed: relay" in flat
    assert "installed: recipe" in flat
    bare = run_cli(["run", "--help"], tmp_path, process=True).stdout  # nothing installed: none of theirs
    assert "--shout-word" not in bare and "installed:" not in bare


def test_an_installed_protocol_is_built_with_its_own_setting_from_a_flag_or_the_config_file(serve, tmp_path):
    server = serve({"replies": [answer("DONE.")], "cycle": True})
    env = installed(tmp_path)
    args = ["run", "--api-base", server.url, "--protocol", "shout", "--json", "hi"]
    started = events(run_cli([*args, "--shout-word", "BOO"], tmp_path, process=True, env=env))[0]
    assert started["protocol"] == "shout"
    assert server.chat_requests()[-1]["body"]["messages"][0]["content"] == "BOO! Answer in capitals."
    config = tmp_path / "config" / "oc-repl" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('shout_word = "CFG"\nwire = "relay"\n')
    events(run_cli(args, tmp_path, process=True, env=env))
    request = server.chat_requests()[-1]
    assert request["body"]["messages"][0]["content"] == "CFG! Answer in capitals."
    assert request["path"] == "/v1/relay/chat/completions"  # the installed wire's own route
    config.write_text('shout_word = "CFG"\n')
    refused = run_cli(args, tmp_path, process=True)  # without the package, its setting is no setting
    assert refused.returncode == 2 and "unknown keys" in refused.stderr and "shout_word" in refused.stderr


def test_doctor_runs_each_installed_kinds_check_of_this_machine(serve, tmp_path):
    server = serve({"replies": [answer("DONE.")], "cycle": True})
    proc = run_cli(["doctor", "--api-base", server.url, "--json"], tmp_path, process=True, env=installed(tmp_path))
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    for name in ("shout protocol", "relay wire", "recipe tasks", "local sandbox", "docker"):
        assert name in checks, (name, list(checks))
    assert list(checks).count("docker") == 1  # a check two kinds share runs once
    assert "waiting on the check of this machine for docker, docker-image, noted-image" in proc.stderr


def test_a_run_of_built_in_kinds_reads_no_entry_points(serve, tmp_path):
    """Reading the installed packages' entry points costs a fifth of a start: a run that names nothing new skips it."""
    server = serve({"replies": [answer("DONE.")], "cycle": True})
    probe = (
        "import atexit, runpy, sys\n"
        "atexit.register(lambda: print('metadata read:', 'importlib.metadata' in sys.modules, file=sys.stderr))\n"
        f"sys.argv = ['oc-repl', 'run', '--api-base', {server.url!r}, '--sandbox', 'local:{tmp_path}/w', '--yes',"
        " 'hi']\n"
        "runpy.run_module('oc_repl', run_name='__main__')\n"
    )
    for env in (installed(tmp_path), cli_env(tmp_path)):
        proc = subprocess.run([sys.executable, "-c", probe], env=env, cwd=tmp_path, capture_output=True, text=True)
        assert "metadata read: False" in proc.stderr, proc.stderr
    named = probe.replace("'hi'", "'--protocol', 'shout', 'hi'")
    proc = subprocess.run(
        [sys.executable, "-c", named], env=installed(tmp_path), cwd=tmp_path, capture_output=True, text=True
    )
    assert "metadata read: True" in proc.stderr, proc.stderr  # the check can fail: a name it lacks reads them


@pytest.fixture
def docker_client() -> Iterator[Any]:
    yield from docker_session()


def recipe(where: Path, check: str) -> Path:
    where.mkdir(parents=True)
    (where / "recipe.toml").write_text(
        f'instruction = "Say hello."\nimage = "{IMAGE}"\ncheck = "{check}"\n', encoding="utf-8"
    )
    return where


@pytest.mark.docker
def test_an_installed_sandbox_kind_opens_with_its_own_setting(serve, tmp_path, docker_client):
    server = serve({"replies": [answer("DONE.")], "cycle": True})
    args = ["run", "--api-base", server.url, "--sandbox", f"noted-image:{IMAGE}", "--image-note", "written"]
    given = [*args, "--verify", "grep -qx written /NOTE", "--json", "hi"]
    seen = events(run_cli(given, tmp_path, timeout=300, process=True, env=installed(tmp_path)))
    assert seen[0]["sandbox"] == f"noted-image:{IMAGE}" and seen[-1]["status"] == "verified"


@pytest.mark.docker
def test_installed_kinds_run_in_a_bench_and_a_task_run(serve, tmp_path, docker_client):
    """A bench of recipe tasks (their image, their check) in noted-image sandboxes, spoken to by the shout protocol
    on the relay wire."""
    server = serve({"replies": [answer("HELLO.")], "cycle": True})
    tasks = tmp_path / "tasks"
    recipe(tasks / "passes", "grep -qx benched /NOTE"), recipe(tasks / "fails", "test -e /nothing-here")
    env = installed(tmp_path)
    out = tmp_path / "out"
    args = ["bench", str(tasks), "--protocol", "shout", "--wire", "relay", "--api-base", server.url, "-k", "1"]
    args += ["--task-sandbox", "noted-image", "--image-note", "benched"]
    proc = run_cli([*args, "--out", str(out)], tmp_path, timeout=600, process=True, env=env)
    assert proc.returncode == 0, proc.stderr
    found = {key[0]: r["failure_mode"] for key, r in results(out).items()}
    assert found == {"passes": "resolved", "fails": "unresolved"}
    assert {r["path"] for r in server.chat_requests()} == {"/v1/relay/chat/completions"}
    single = run_cli(
        ["run", "--api-base", server.url, "--protocol", "shout", "--task", str(tasks / "passes"), "--json", *args[-4:]],
        tmp_path,
        timeout=300,
        process=True,
        env=env,
    )
    assert events(single)[-1]["status"] == "verified"


def test_the_kinds_modules_are_all_a_new_kind_takes():
    """No module of oc_repl names the test kinds: what makes them work is theirs and the entry points."""
    from tests.test_seams import named_outside

    assert (
        named_outside({"shout", "shout_word", "noted-image", "noted-image:", "image_note", "relay", "recipe"}, "-")
        == []
    )
    assert [p for p in (ROOT / "oc_repl").rglob("*.py") if "tests.kinds" in p.read_text(encoding="utf-8")] == []
