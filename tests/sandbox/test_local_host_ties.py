"""What ties a confined local sandbox to the host it runs on, cut, on real bubblewrap and real processes: the PATH it
inherits, the session keyring, version-control directories the user's own tools would obey, the client's config and
key files, and the key on the client's command line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from oc_repl.sandbox.local import LocalSandbox
from tests.sandbox.test_local_sandbox import CONFINE_OK, CONFINE_REASON, run

pytestmark = pytest.mark.skipif(not CONFINE_OK, reason=f"no confinement here: {CONFINE_REASON}")

PLANT = "mkdir -p {bin} && printf '#!/bin/sh\\necho PLANTED; exit 3\\n' > {bin}/python3 && chmod +x {bin}/python3"


# --- PATH -----------------------------------------------------------------------------------------------------------


def test_a_program_planted_where_path_looks_is_not_what_a_later_command_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The client's PATH names places the sandbox may write (its home, its /tmp, its own directory, the directory a
    command stands in, by name or through /proc): none of them is searched inside, so a later command's `python3` is
    the host's."""
    home = Path(os.environ["HOME"])
    root = tmp_path / "box"
    places = [home / ".local" / "bin", Path("/tmp/oc-repl-bin"), root / "bin", "", ".", "/proc/self/cwd/bin"]
    monkeypatch.setenv("PATH", ":".join([*map(str, places), os.environ["PATH"]]))
    box = LocalSandbox(root)
    try:
        for bin_dir in (home / ".local" / "bin", "/tmp/oc-repl-bin", root / "bin", root):
            assert run(box, PLANT.format(bin=bin_dir))[0] == 0
        code, out = run(box, 'command -v python3; python3 -c \'print("REAL")\'; echo "$PATH"')
        assert code == 0 and "PLANTED" not in out and "REAL" in out, out
        where, _real, path = out.splitlines()
        assert Path(where).resolve() != root / "python3" and not Path(where).is_relative_to(root)
        searched = path.split(":")
        private = [home, Path("/tmp"), Path("/root"), root]
        assert all(entry.startswith("/") for entry in searched), searched
        assert not any(Path(entry).is_relative_to(place) for entry in searched for place in private), searched
        assert "/usr/bin" in searched  # the host's own places stay
    finally:
        box.close()


def test_a_verifier_does_not_run_a_program_the_model_planted_on_path(serve, tmp_path: Path):
    """End to end: the model plants a failing `python3` in ~/.local/bin, which the client's PATH lists first; the
    verifier's `python3` is still the host's, and the run is verified."""
    from tests.cli.test_cli import answer, base_args, exec_call
    from tests.conftest import cli_env, run_cli

    env = cli_env(tmp_path)
    env["PATH"] = f"{env['HOME']}/.local/bin:{env['PATH']}"
    server = serve({"replies": [exec_call(PLANT.format(bin="~/.local/bin")), answer("Planted.")]})
    verify = 'python3 -c "import sys; sys.exit(0)"'
    proc = run_cli([*base_args(server, tmp_path / "w", "--verify", verify), "plant"], tmp_path, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "PASS" in proc.stderr and len(server.chat_requests()) == 2
