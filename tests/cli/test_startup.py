"""What a command does to start fast: the collector paused while it starts and resumed after, the display loaded
while the sandbox starts."""

from __future__ import annotations

import subprocess
import sys

from oc_repl.fanout import Fanout, Later
from tests.cli.test_cli import answer, base_args
from tests.conftest import cli_env

# the command as installed (oc_repl.__main__:main), the collector's state said at the very end of the process
REPORT = (
    "import atexit, gc, sys\n"
    "atexit.register(lambda: print('gc', gc.isenabled(), gc.get_freeze_count() > 0, sys.getswitchinterval()))\n"
    "sys.argv = ['oc-repl', *sys.argv[1:]]\n"
    "from oc_repl.__main__ import main\n"
    "main()\n"
)


def command_end_state(argv: list[str], tmp_path) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", REPORT, *argv], capture_output=True, text=True, timeout=60, env=cli_env(tmp_path)
    )
    return proc.stdout.splitlines()[-1]


def test_a_run_resumes_collection_once_its_thread_started(serve, tmp_path):
    server = serve({"replies": [answer("ok")]})
    assert command_end_state(base_args(server, tmp_path / "w", "hi"), tmp_path) == "gc True True 0.005"


def test_a_command_that_starts_no_thread_resumes_collection_at_once(tmp_path):
    missing = tmp_path / "none.jsonl"
    missing.write_text("")
    assert command_end_state(["show", str(missing)], tmp_path) == "gc True True 0.005"


def test_a_library_process_keeps_its_collector_as_it_was():
    code = "import gc\nfrom oc_repl import startup\nstartup.settled()\nprint(gc.isenabled(), gc.get_freeze_count())"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.split() == ["True", "0"]


def test_the_display_loads_while_the_sandbox_starts(serve, tmp_path):
    server = serve({"replies": [answer("ok")]})
    argv = [sys.executable, "-X", "importtime", "-m", "oc_repl", *base_args(server, tmp_path / "w", "hi")]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=cli_env(tmp_path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    order = [line.split("|")[-1].strip() for line in proc.stderr.splitlines() if "import time:" in line]
    assert order.index("rich.console") > order.index("oc_repl.sandbox.confine")


def test_a_later_sink_is_made_once_by_prepare_or_by_its_first_event():
    made, seen = [], []

    def make():
        made.append(1)
        return seen.append

    early = Later(make)
    Fanout(early).prepare()
    assert made == [1] and not seen
    Fanout(early)("e1")
    lazy = Later(make)
    Fanout(lazy)("e2")
    assert made == [1, 1] and seen == ["e1", "e2"]
