from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakeserver import FakeServer
from tests.skips import pytest_terminal_summary  # noqa: F401 (a hook: pytest finds it here)

ROOT = Path(__file__).resolve().parent.parent
# The task fixtures' own tests (tests/fixtures/live_tasks/*/*/tests) run inside their tasks' containers, never here.
collect_ignore_glob = ["fixtures/*"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "reference: runs tasks through the reference harnesses, terminal-bench 0.2.18 or Harbor 0.25 (slow)"
    )


@pytest.fixture(autouse=True, scope="session")
def _plain_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The commands and terminals tests start read none of the start-up files of whoever runs the suite: a
    ~/.bashrc hook (pyenv's, say) would print into observations, and a confined sandbox cannot write that HOME."""
    os.environ.setdefault("OC_REPL_CACHE", str(Path.home() / ".cache" / "oc-repl-tests"))
    old = os.environ.get("HOME")
    os.environ["HOME"] = str(tmp_path_factory.mktemp("home"))
    yield
    if old is None:
        os.environ.pop("HOME", None)
    else:
        os.environ["HOME"] = old


def default_sigint() -> None:
    """A `preexec_fn`: children start with Ctrl-C's default action even when the suite runs in the background (nohup,
    `&`), where SIGINT is inherited ignored; a test that interrupts a process it started must pass this."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture
def ctrl_c_interrupts() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt in this process during the test, also in a suite started in the background
    (Python leaves a SIGINT it inherited ignored as it is)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture
def box(tmp_path: Path) -> Iterator:
    """A confined local sandbox in a directory of the test's own (the test skips first where none can be made)."""
    from oc_repl.sandbox.local import LocalSandbox

    sandbox = LocalSandbox(tmp_path / "box")
    yield sandbox
    sandbox.close()


@pytest.fixture
def host_place() -> Iterator[Path]:
    """A fresh directory on the host that this process may write and a sandbox neither hides nor may write."""
    import shutil
    import uuid

    for base in ("/var/lib", "/opt", "/srv", "/mnt"):
        place = Path(base) / f"oc-repl-test-{uuid.uuid4().hex[:8]}"
        try:
            place.mkdir()
        except OSError:
            continue
        yield place
        shutil.rmtree(place, ignore_errors=True)
        return
    pytest.skip("no writable directory on this host outside the places a sandbox hides")


@pytest.fixture
def serve() -> Iterator:
    """Start scripted loopback servers; all are stopped at the end of the test."""
    started: list[FakeServer] = []

    def start(script: dict, requests_log: Path | None = None) -> FakeServer:
        server = FakeServer(script, requests_log=requests_log).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def cli_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "OC_REPL_"))}
    env.update(
        XDG_STATE_HOME=str(tmp_path / "state"),
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        XDG_DATA_HOME=str(tmp_path / "data"),
        NO_COLOR="1",
    )
    return env


def run_cli(
    args: list[str], tmp_path: Path, timeout: float = 60, process: bool = False, **kw
) -> subprocess.CompletedProcess[str]:
    """oc-repl with `args`, stdin empty, in `tmp_path` with its own state and config folders.

    In this process through click's runner unless `process`: a test of what a command does needs no interpreter of
    its own. Tests of the process itself (signals, a closed pipe, what outlives it, the exit code as the shell sees
    it, imports at start-up) pass process=True.
    """
    env, cwd = kw.pop("env", None) or cli_env(tmp_path), kw.pop("cwd", tmp_path)
    if process or kw:
        argv = [sys.executable, "-m", "oc_repl", *args]
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL, cwd=cwd, **kw
        )
    return invoke_cli(args, env, cwd)


def invoke_cli(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    from click.testing import CliRunner

    from oc_repl.cli import main

    # The runner sets the variables it is given and restores them after; one set to None is removed meanwhile.
    given = {**{name: None for name in os.environ if name not in env}, **env}
    before = Path.cwd()
    os.chdir(cwd)
    try:
        result = CliRunner().invoke(main, args, env=given, prog_name="oc-repl")
    finally:
        os.chdir(before)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return subprocess.CompletedProcess(["oc-repl", *args], result.exit_code, result.stdout, result.stderr)


def read_jsonl(path: Path) -> list[dict]:
    """The lines of a JSONL file as JSON; in a transcript, each request whole, as every reader of them gives it (a
    transcript writes each against the one before: tests/test_transcript_format.py holds the two together)."""
    from oc_repl.transcript_delta import Requests

    requests, found = Requests(), []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        data = json.loads(line)
        if isinstance(data, dict) and data.get("type") == "thread.started":
            requests.start()
        elif isinstance(data, dict) and data.get("type") == "request.sent":
            data = requests.read(data)
        found.append(data)
    return found


def raw_jsonl(path: Path) -> list[dict]:
    """The lines of a JSONL file as JSON, as written."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


pytest_plugins = ["tests.docker_support"]
