"""`bench --harbor` where Harbor cannot take the bench: said before anything runs (Harbor's own runs of it are in
tests/integrations/test_harbor_jobs.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.cli.test_cli import answer
from tests.conftest import cli_env, run_cli

ROOT = Path(__file__).resolve().parent.parent.parent
HARBOR_TASK = ROOT / "tests" / "fixtures" / "harbor" / "write-hi"
TB_TASK = ROOT / "examples" / "tasks" / "write-greeting"


def without_harbor(tmp_path: Path) -> dict[str, str]:
    """This machine's environment with no `harbor` on PATH (and none beside this interpreter, checked below)."""
    env = cli_env(tmp_path)
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if not (Path(p) / "harbor").exists())
    return env


@pytest.mark.skipif((Path(sys.executable).parent / "harbor").exists(), reason="Harbor is installed beside Python")
def test_without_harbor_the_bench_says_how_to_install_it(serve, tmp_path):
    server = serve({"cycle": True, "replies": [answer("ok")]})
    args = ["bench", "--harbor", "docker", str(HARBOR_TASK), "--api-base", server.url, "--out", str(tmp_path / "j")]
    done = run_cli(args, tmp_path, env=without_harbor(tmp_path))
    assert done.returncode == 2, done.stderr
    assert "bench --harbor needs Harbor" in done.stderr and "pip install 'oc-repl[harbor]'" in done.stderr
    assert not (tmp_path / "j").exists()


def test_terminal_bench_tasks_and_settings_harbors_agent_does_not_take_are_refused(serve, tmp_path):
    server = serve({"cycle": True, "replies": [answer("ok")]})
    base = ["bench", "--harbor", "docker", "--api-base", server.url, "--out", str(tmp_path / "j")]
    done = run_cli([*base, str(TB_TASK)], tmp_path)
    assert done.returncode == 2 and "Harbor runs tasks in its own format; not: write-greeting" in done.stderr
    # two servers of one model: two arms Harbor's jobs cannot tell apart
    other = serve({"cycle": True, "replies": [answer("ok")]})
    twins = ["--api-base", f"{server.url},{other.url}", "--model", "qwen3-8b-oc", "--out", str(tmp_path / "j")]
    done = run_cli(["bench", "--harbor", "docker", str(HARBOR_TASK), *twins], tmp_path)
    assert done.returncode == 2, done.stderr
    assert "look the same to Harbor (oc-repl:camel-terminal-toolkit@qwen3-8b-oc)" in done.stderr
    done = run_cli([*base, "--dataset", "terminal-bench@2.0", "--memory-mb", "512"], tmp_path)
    assert done.returncode == 2 and "Harbor's oc-repl agent does not take memory_mb" in done.stderr, done.stderr
    done = run_cli(
        [*base, str(HARBOR_TASK), "--protocol", "camel-terminal-toolkit,terminus-json", "--until", "decided"], tmp_path
    )
    assert done.returncode == 2 and "--until decided runs rounds on the local bench" in done.stderr
