"""A protocol registered only by an `oc_repl.protocols` entry point (a package installed beside oc-repl, no data
folder) is a protocol like the shipped ones: `run` and `bench` take it by name."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.bench.test_bench import results
from tests.bench_scripts import TASKS
from tests.conftest import cli_env, run_cli
from tests.docker_support import answer, docker_session

PLUGIN = """
from oc_repl.protocols.raw import RawProtocol


class EchoPlugin(RawProtocol):
    '''The bare model, under a plugin's name.'''
"""


def plugin_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a machine where a package registers the protocol `echo-plugin` by its entry point."""
    site = tmp_path / "site"
    (site / "ocr_echo_plugin-1.0.dist-info").mkdir(parents=True)
    (site / "ocr_echo_plugin.py").write_text(PLUGIN)
    info = site / "ocr_echo_plugin-1.0.dist-info"
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ocr-echo-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[oc_repl.protocols]\necho-plugin = ocr_echo_plugin:EchoPlugin\n")
    return {**cli_env(tmp_path), "PYTHONPATH": str(site)}


def test_a_protocol_an_entry_point_registers_runs(serve, tmp_path):
    server = serve({"replies": [answer("Hello from the plugin.")]})
    args = ["run", "--api-base", server.url, "--protocol", "echo-plugin", "--json", "say hello"]
    proc = run_cli(args, tmp_path, process=True, env=plugin_env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert events[0]["protocol"] == "echo-plugin" and events[-1]["final_answer"].endswith("Hello from the plugin.")


@pytest.fixture
def docker_client() -> Iterator[Any]:
    yield from docker_session()


@pytest.mark.docker
def test_a_protocol_an_entry_point_registers_runs_in_a_bench(serve, tmp_path, docker_client):
    server = serve({"replies": [answer("I will not do it.")], "cycle": True})
    out = tmp_path / "out"
    args = ["bench", str(TASKS / "write-greeting"), "--protocol", "echo-plugin", "--api-base", server.url]
    env = plugin_env(tmp_path)
    proc = run_cli([*args, "-k", "1", "--out", str(out)], tmp_path, timeout=300, process=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert [(key[1], r["failure_mode"]) for key, r in results(out).items()] == [("echo-plugin", "unresolved")]
