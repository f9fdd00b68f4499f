"""The test command's closing summary (tests/skips.py): skipped tests by what they need, and what fixes it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

SKIPPING = """
import pytest

def test_no_daemon():
    pytest.skip("docker daemon unreachable (DOCKER_HOST=unix:///nowhere): Error while fetching server API version")

@pytest.mark.docker
def test_no_image():
    pytest.skip("test image oc-repl-test:bookworm is missing; .ci/test-image.sh builds it")

@pytest.mark.docker
def test_no_image_either():
    pytest.skip("docker or the test image is missing: 404 Client Error: No such image: oc-repl-test:bookworm")

@pytest.mark.skipif(True, reason="tmux is not installed")
def test_no_tmux():
    pass

def test_no_bubblewrap():
    pytest.skip("no confinement here: bwrap, nsenter, setpriv not found")

def test_unknown():
    pytest.skip("the moon is not full")

def test_runs():
    pass
"""


def pytest_summary(tmp_path: Path, source: str) -> str:
    (tmp_path / "test_some.py").write_text(source)
    args = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "tests.skips", "-p", "no:cacheprovider"]
    args.append(str(tmp_path))
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_the_summary_counts_skips_by_what_they_need_and_names_the_fix(tmp_path):
    out = pytest_summary(tmp_path, SKIPPING)
    assert "= skipped: 6, by what they need =" in out
    lines = out.splitlines()
    for count, need, fix in [
        (2, "the test image", ".ci/test-image.sh"),
        (1, "a docker daemon", 'eval "$(.ci/dockerd.sh)" && .ci/test-image.sh'),  # the whole command, image too
        (1, "tmux", "apt-get install tmux"),
        (1, "bubblewrap", "apt-get install bubblewrap"),
    ]:
        at = next(i for i, line in enumerate(lines) if line.startswith(f"{count:4}  need {need}"))
        assert lines[at + 1].strip().startswith(f"fix: {fix}")
    assert "   1  the moon is not full" in lines
    assert "docker tests skipped: 3" in lines
    assert out.index("docker tests skipped") < out.index("1 passed, 6 skipped")


def test_no_skips_still_says_how_many_docker_tests_were_skipped(tmp_path):
    out = pytest_summary(tmp_path, "def test_runs():\n    pass\n")
    assert "= skipped: 0 =" in out and "docker tests skipped: 0" in out.splitlines()


def test_the_venv_the_quick_start_builds_is_found_without_being_named(tmp_path, monkeypatch):
    """The tiny model's tests run on the venv examples/tiny-model/install.sh makes by default, unnamed."""
    import subprocess
    import sys

    from tests import test_real_model

    venv = tmp_path / "tiny-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    [site] = venv.glob("lib/python*/site-packages")
    (site / "llama_cpp" / "server").mkdir(parents=True)
    (site / "llama_cpp" / "__init__.py").write_text("")
    (site / "llama_cpp" / "server" / "__init__.py").write_text("")
    monkeypatch.delenv("OC_REPL_TINY_VENV", raising=False)
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setattr(test_real_model, "DEFAULT_VENV", venv)
    try:
        found = test_real_model.tiny_venv()
    except pytest.skip.Exception as skipped:  # a skip here is the venv not found: this test's failure
        pytest.fail(f"the quick start's venv was not found: {skipped}")
    assert found == venv


def test_the_summary_says_which_tests_something_on_the_machine_turned_on(tmp_path):
    source = "import pytest\n\n@pytest.mark.realmodel\ndef test_tiny():\n    pass\n\ndef test_plain():\n    pass\n"
    out = pytest_summary(tmp_path, source)
    assert "the tiny model's tests ran (1): a real llama-cpp-python server" in out
    assert "OC_REPL_TINY_VENV=/nowhere leaves them out" in out
    assert "tiny model" not in pytest_summary(tmp_path, "def test_plain():\n    pass\n")
