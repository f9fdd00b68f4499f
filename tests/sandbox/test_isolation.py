"""The run's header and `thread.started` state the confinement, network and limits actually in force on a `local:`
sandbox, whatever chose them: a flag, the config file, or the fallback to unconfined when bubblewrap cannot run."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from oc_repl.config import validate
from oc_repl.errors import UsageError
from tests.cli.test_cli import answer, base_args
from tests.conftest import cli_env, default_sigint, read_jsonl, run_cli
from tests.sandbox.test_local_confine import failing_bwrap

DONE = [answer("Nothing to do.")]


def started(transcript: Path) -> dict:
    return next(e for e in read_jsonl(transcript) if e["type"] == "thread.started")


def write_config(tmp_path: Path, text: str) -> None:
    folder = tmp_path / "config" / "oc-repl"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.toml").write_text(text)


@pytest.mark.parametrize("how", ["flag", "config file"])
def test_an_unconfined_local_sandbox_says_so_whatever_set_it(serve, tmp_path, how):
    server = serve({"replies": DONE})
    transcript = tmp_path / "t.jsonl"
    more = ["--transcript", str(transcript), "say hi"]
    if how == "flag":
        more.insert(0, "--no-confine")
    else:
        write_config(tmp_path, "confine = false\n")
    proc = run_cli(base_args(server, tmp_path / "w", *more), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "sandbox: UNCONFINED: commands run as you on this host · network the host's" in proc.stderr
    isolation = started(transcript)["isolation"]
    assert (isolation["confinement"], isolation["network"]) == ("none", "host")


@pytest.mark.parametrize(("more", "network"), [((), "none"), (("--network",), "host")])
def test_a_confined_local_sandbox_states_its_network(serve, tmp_path, more, network):
    server = serve({"replies": DONE})
    transcript = tmp_path / "t.jsonl"
    proc = run_cli(base_args(server, tmp_path / "w", *more, "--transcript", str(transcript), "say hi"), tmp_path)
    assert proc.returncode == 0, proc.stderr
    shown = "none" if network == "none" else "the host's"
    confined = "sandbox: confined by bubblewrap (the host read-only, what it shares hidden)"
    assert f"{confined} · network {shown}" in proc.stderr
    isolation = started(transcript)["isolation"]
    assert (isolation["confinement"], isolation["network"]) == ("bubblewrap", network)


def test_the_fallback_to_unconfined_when_bubblewrap_fails_is_in_the_header(serve, tmp_path):
    """bubblewrap cannot run, the user says yes to running unconfined at the prompt: the header must not keep
    the confined sandbox's words."""
    env = {**cli_env(tmp_path), "PATH": f"{failing_bwrap(tmp_path)}:{os.environ['PATH']}"}
    server = serve({"replies": DONE})
    transcript = tmp_path / "t.jsonl"
    args = base_args(server, tmp_path / "w", "--transcript", str(transcript), "say hi")
    args.remove("--yes")  # a yes at the terminal instead, to each question
    leader, follower = os.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "oc_repl", *args], stdin=follower, stdout=follower, stderr=follower, env=env,
        cwd=tmp_path, preexec_fn=lambda: (os.setsid(), default_sigint()),
    )  # fmt: skip
    os.close(follower)
    seen, answered = b"", 0
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            seen += os.read(leader, 4096)
        except OSError:  # the other side closed: the run is over
            break
        if seen.count(b"[y/N]") > answered:
            answered += 1
            os.write(leader, b"y\n")
    assert proc.wait(30) == 0, seen.decode(errors="replace")
    os.close(leader)
    assert answered == 2 and b"UNCONFINED on this host" in seen  # the second question names what it asks
    assert b"sandbox: UNCONFINED: commands run as you on this host" in seen
    assert started(transcript)["isolation"]["confinement"] == "none"


def test_process_and_memory_limits_are_settings_with_bounds(tmp_path):
    settings = validate({})
    assert (settings.max_processes, settings.memory_mb) == (4096, 4096)
    assert (validate({"max_processes": 64, "memory_mb": 256}).max_processes, settings.memory_mb) == (64, 4096)
    for key in ("max_processes", "memory_mb"):
        with pytest.raises(UsageError, match=key):
            validate({key: 0})
    write_config(tmp_path, "max_processes = 100\nmemory_mb = 1\n")
    proc = run_cli(["run", "--sandbox", f"local:{tmp_path / 'w'}", "--yes", "x"], tmp_path)
    assert proc.returncode == 2 and "memory_mb: must be >= 64" in proc.stderr


def test_the_help_names_the_limits_defaults():
    proc = subprocess.run([sys.executable, "-m", "oc_repl", "run", "--help"], capture_output=True, text=True)
    text = " ".join(proc.stdout.split())
    assert "--max-processes INTEGER" in text and "--memory-mb INTEGER" in text
    assert text.count("(default: 4096)") >= 2
