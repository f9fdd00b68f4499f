"""examples/quickstart.sh end to end against the loopback fake server (OPENAI_BASE_URL), in both of its sandboxes: a
fresh container of the test image where a docker daemon answers, else a confined local: directory. The scripted model
tries to write to / and to $HOME; neither write reaches this machine, and the run goes on to its verdict."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.test_cli import answer, exec_call
from tests.conftest import ROOT, cli_env, read_jsonl
from tests.docker_support import IMAGE, docker_session
from tests.fakeserver import call_text
from tests.sandbox.test_local_sandbox import CONFINE_OK, CONFINE_REASON

QUICKSTART = ROOT / "examples" / "quickstart.sh"


@pytest.fixture
def outside_home() -> Iterator[Path]:
    """A HOME outside /tmp: inside a confined sandbox /tmp is private, so a write there would not show on the host."""
    home = Path(tempfile.mkdtemp(prefix="oc-repl-home-", dir="/var/tmp"))
    yield home
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def docker_up() -> Iterator[None]:
    for _client in docker_session():  # a skip (a failure under CI=true) without a daemon or the test image
        yield


def quickstart(tmp_path: Path, server_url: str, home: Path, **env: str) -> subprocess.CompletedProcess[str]:
    bin_dir = Path(sys.executable).parent  # the oc-repl this interpreter installed, as `pip install .` puts it
    full = {**cli_env(tmp_path), "HOME": str(home), "OPENAI_BASE_URL": server_url, "OC_REPL_TEST_IMAGE": IMAGE}
    full["PATH"] = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
    return subprocess.run(
        ["bash", str(QUICKSTART)],
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
        env={**full, **env},
        cwd=tmp_path,
    )


@pytest.mark.parametrize(
    "where",
    [
        pytest.param("docker", marks=pytest.mark.docker),
        pytest.param(
            "local", marks=pytest.mark.skipif(not CONFINE_OK, reason=f"no confinement here: {CONFINE_REASON}")
        ),
    ],
)
def test_the_quick_start_never_writes_outside_its_sandbox(where, serve, tmp_path, outside_home, request):
    if where == "docker":
        request.getfixturevalue("docker_up")
    probe = f"oc-repl-probe-{uuid.uuid4().hex[:12]}"
    in_root, in_home = Path("/") / probe, outside_home / probe
    server = serve(
        {
            "replies": [
                exec_call(f"touch {in_root}; echo touched $?"),
                {"text": call_text("shell_write_content_to_file", {"content": "x\n", "file_path": str(in_home)})},
                {"text": call_text("shell_write_content_to_file", {"content": "Hello\n", "file_path": "hello.txt"})},
                answer("Created hello.txt containing Hello."),
            ]
        }
    )
    # No daemon answers at a socket that does not exist: the quick start must then confine a local: directory.
    hidden = {} if where == "docker" else {"DOCKER_HOST": f"unix://{tmp_path}/no-daemon.sock"}
    try:
        proc = quickstart(tmp_path, server.url, outside_home, **hidden)
        assert not in_root.exists() and not in_home.exists()
    finally:
        in_root.unlink(missing_ok=True)
    assert proc.returncode == 0, proc.stderr
    assert "oc-repl exited 0: verified" in proc.stderr  # the run went on past both writes, to the verifier's pass
    sandbox = f"sandbox: docker-image:{IMAGE}" if where == "docker" else "sandbox: local:"
    assert sandbox in proc.stderr, proc.stderr
    transcript = Path(proc.stderr.split("quickstart: transcript: ", 1)[1].split("\n", 1)[0])
    assert transcript.is_relative_to(tmp_path / "state" / "oc-repl" / "quickstart")
    assert f"replay it: oc-repl show {transcript}" in proc.stderr

    # "no network", as the quick start says, is what the run itself states it ran with
    started = next(e for e in read_jsonl(transcript) if e["type"] == "thread.started")
    confinement = "container" if where == "docker" else "bubblewrap"
    assert (started["isolation"]["confinement"], started["isolation"]["network"]) == (confinement, "none")
    items = [e["item"] for e in read_jsonl(transcript) if e["type"] == "item.completed"]
    touched = next(i for i in items if i["type"] == "command_execution")
    written = [i for i in items if i["type"] == "file_change"]
    if where == "local":  # / is refused on this host, and the model is told so; $HOME is an empty one of its own
        assert "Read-only file system" in touched["aggregated_output"] and "touched 1" in touched["aggregated_output"]
        assert [w["status"] for w in written] == ["completed", "completed"]
    else:  # in a container the writes land in the container's own / and $HOME, which end with it
        assert "touched 0" in touched["aggregated_output"]
        assert [w["status"] for w in written] == ["completed", "completed"]
    requests = server.chat_requests()  # the model was asked again after each write, and saw the second one's result
    assert len(requests) == 4 and str(in_home) in str(requests[2]["body"]["messages"])


def test_the_quick_start_stops_when_no_sandbox_can_hold_the_model(serve, tmp_path, outside_home):
    """Neither docker nor bubblewrap: a clear stop before any model call, never an unconfined run."""
    server = serve({"replies": [answer("never asked")]})
    bin_dir = tmp_path / "bin"  # this PATH hides bwrap: the confinement cannot start
    bin_dir.mkdir()
    for tool in ("bash", "sed", "date", "mkdir", "dirname", "id"):
        found = shutil.which(tool)
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    (bin_dir / "python3").symlink_to(Path(sys.executable).resolve())
    (bin_dir / "oc-repl").symlink_to(Path(sys.executable).parent / "oc-repl")
    proc = quickstart(
        tmp_path, server.url, outside_home, PATH=str(bin_dir), DOCKER_HOST=f"unix://{tmp_path}/no-daemon.sock"
    )
    assert proc.returncode == 1, proc.stderr
    assert "no safe sandbox here" in proc.stderr and "fix: apt-get install bubblewrap" in proc.stderr
    assert server.chat_requests() == []
