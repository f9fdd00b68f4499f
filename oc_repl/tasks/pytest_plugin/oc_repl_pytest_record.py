"""oc-repl's record of a pytest session, for a verifier's verdict: loaded by pytest itself (an entry point beside this
file, found through PYTHONPATH), before conftest files and the code under test. It writes one JSON line per event to
the FIFO $OC_REPL_PYTEST_RECORD as the event happens, so that what the tested code prints, or does at exit, cannot
change what was recorded: the session's start (pid and start time, so the reader can learn the process's exit status),
each test's outcome as pytest's `-rA` summary would name it, and the session's end with pytest's exit status. Each line
carries $OC_REPL_PYTEST_NONCE. Nothing here imports oc-repl: it runs in the task's container, under any Python 3 and
pytest there.
"""

import json
import os

_FIFO = os.environ.get("OC_REPL_PYTEST_RECORD", "")
_NONCE = os.environ.get("OC_REPL_PYTEST_NONCE", "")
_out = [None]


def _write(event, **fields):
    if _out[0] is None:
        return
    fields.update(n=_NONCE, ev=event)
    try:
        os.write(_out[0], (json.dumps(fields) + "\n").encode("utf-8", "replace"))
    except OSError:
        _out[0] = None


def _start_time():
    try:
        with open("/proc/self/stat") as f:
            return int(f.read().rsplit(")", 1)[-1].split()[19])
    except (OSError, ValueError, IndexError):
        return 0


def pytest_configure(config):
    if not _FIFO or hasattr(config, "workerinput"):  # an xdist worker: its controller records the session
        return
    try:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
        _out[0] = os.open(_FIFO, flags, 0o600)  # a FIFO oc-repl reads as the tests run, or a file where it cannot
    except OSError:
        return
    os.set_blocking(_out[0], True)
    _write("start", pid=os.getpid(), st=_start_time())


def _outcome(report):
    if hasattr(report, "wasxfail"):
        return "XPASS" if report.passed else "XFAIL"
    if report.skipped:
        return "SKIPPED"
    if report.failed:
        return "FAILED" if report.when == "call" else "ERROR"
    return "PASSED" if report.when == "call" else None


def pytest_runtest_logreport(report):
    outcome = _outcome(report)
    if outcome is not None:
        _write("test", id=report.nodeid, outcome=outcome)


def pytest_collectreport(report):
    if report.failed:
        _write("test", id=report.nodeid or "collection", outcome="ERROR")


def pytest_sessionfinish(session, exitstatus):
    _write("finish", status=int(exitstatus), failed=int(getattr(session, "testsfailed", 0)))
