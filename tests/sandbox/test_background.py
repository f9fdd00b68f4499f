"""A client started in the background (`oc-repl ... &`, nohup) inherits SIGINT and SIGQUIT ignored; the model's
commands on a terminal of a local: sandbox still get them at their default, as in a container, so ^C stops them."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator

import pytest

from oc_repl.sandbox.local import LocalSandbox
from tests.sandbox.test_local_sandbox import sandbox  # noqa: F401 (the fixture, confined and not)

KEYS = (signal.SIGINT, signal.SIGQUIT)


@pytest.fixture
def started_in_the_background() -> Iterator[None]:
    """This process ignores the keys' signals, as a shell leaves a job it starts with `&`."""
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in KEYS}
    yield
    for sig, handler in previous.items():
        signal.signal(sig, handler)


def ignored_by(status: bytes) -> int:
    mask = next(line for line in status.decode().splitlines() if line.startswith("SigIgn:"))
    return int(mask.split()[1], 16) & sum(1 << (sig - 1) for sig in KEYS)


@pytest.mark.usefixtures("started_in_the_background")
def test_ctrl_c_on_a_terminal_stops_a_command_of_a_background_client(sandbox: LocalSandbox):  # noqa: F811
    proc = sandbox.spawn("grep SigIgn /proc/self/status", tty=True)
    assert proc.wait(60)
    assert ignored_by(proc.read_available()) == 0
    terminal = sandbox.spawn("echo ready; exec sleep 600", tty=True)
    deadline = time.monotonic() + 60
    while b"ready" not in terminal.read_available():  # the terminal is its own by now: ^C reaches it
        assert time.monotonic() < deadline and terminal.alive()
        time.sleep(0.05)
    terminal.write(b"\x03")
    assert terminal.wait(60) and not terminal.alive()
