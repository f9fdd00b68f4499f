"""`protocols sync` with no source fetches OpenClaw-RL's pinned files itself (here from a loopback mirror serving the
pinned copies), runs them only when each sha256 is the pinned one, and `--openclaw-rl PATH` still works offline; the
first camel run with built-in texts says once that they are one sync away."""

from __future__ import annotations

import functools
import shutil
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.conftest import cli_env, run_cli
from tests.packages import shared_upstream

PINNED = ("terminal-rl/agent/prompts.py", "terminal-rl/agent/camel_agent.py", "terminal-rl/remote/terminal_env.py")
SYNCED = ("camel-terminal-toolkit/system.txt", "camel-terminal-toolkit/agent.toml")


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def mirror(tmp_path) -> Iterator[tuple[str, Path]]:
    """A loopback server of the pinned files, laid out as the repository host serves them at the commit."""
    root = tmp_path / "mirror"
    checkout = shared_upstream("openclaw-rl-3cdb79d")
    for name in PINNED:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(checkout / name, root / name)
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", root
    finally:
        server.shutdown()
        server.server_close()


def oc(tmp_path: Path, *args: str):
    env = {**cli_env(tmp_path), "XDG_DATA_HOME": str(tmp_path / "data")}
    return run_cli(list(args), tmp_path, timeout=120, env=env)


def test_sync_with_no_source_fetches_the_pinned_files_and_checks_them(mirror, tmp_path):
    url, _ = mirror
    proc = oc(tmp_path, "protocols", "sync", "--only", "openclaw", "--openclaw-rl-mirror", url)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [line.split(":")[0] for line in proc.stdout.splitlines()] == [f"ok  {asset}" for asset in SYNCED]
    assert all("matches" in line for line in proc.stdout.splitlines())
    assert "fetching 3 files of OpenClaw-RL at 0d034dd5e653" in proc.stderr
    stored = tmp_path / "data" / "oc-repl" / "upstream" / "camel-terminal-toolkit"
    assert (stored / "system.txt").is_file() and (stored / "agent.toml").is_file()


def test_a_file_that_is_not_the_pinned_one_is_never_run(mirror, tmp_path):
    url, root = mirror
    ran = tmp_path / "it-ran"
    prompts = root / PINNED[0]
    prompts.write_text(prompts.read_text() + f"\nopen({str(ran)!r}, 'w').write('ran')\n")
    proc = oc(tmp_path, "protocols", "sync", "--only", "openclaw", "--openclaw-rl-mirror", url, "--force")
    assert proc.returncode == 1
    assert "is not OpenClaw-RL's file at 0d034dd5e653" in proc.stdout and "nothing of it was run" in proc.stdout
    assert not ran.exists()
    assert not (tmp_path / "data" / "oc-repl" / "upstream" / "camel-terminal-toolkit").exists()


def test_a_checkout_still_syncs_offline(tmp_path):
    checkout = shared_upstream("openclaw-rl-3cdb79d")
    proc = oc(tmp_path, "protocols", "sync", "--only", "openclaw", "--openclaw-rl", str(checkout))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "fetching" not in proc.stderr


def test_the_first_camel_run_with_built_in_texts_says_once_that_a_sync_makes_them_exact(serve, tmp_path):
    server = serve({"replies": [{"text": "ok"}, {"text": "ok"}]})
    args = ["run", "--api-base", server.url, "--sandbox", f"local:{tmp_path / 'w'}", "--yes", "say ok"]
    first, second = oc(tmp_path, *args), oc(tmp_path, *args)
    assert first.returncode == second.returncode == 0, first.stderr
    assert first.stderr.count("oc-repl protocols sync") == 1 and "Said once" in first.stderr
    assert "protocols sync" not in second.stderr
