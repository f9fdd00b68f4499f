"""pytest's own record of a verifier's sessions: the plugin oc-repl gives the verifier (pytest_plugin/, loaded by
pytest through an entry point before conftest files and the code under test), and the reading of what it recorded.

A verdict taken from pytest's output reads text the code under test can print (a second "short test summary info"
full of PASSED, printed at exit); one taken from the record reads pytest's hooks as each test ended. A session that
started and never finished (an `os._exit` in the code under test) passes nothing, and where the sandbox learns each
recorded pytest process's exit status from the kernel, a status that disagrees with the session's own is a finding.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from oc_repl.events import Finding

PLUGIN = Path(__file__).with_name("pytest_plugin") / "oc_repl_pytest_record.py"
MODULE = "oc_repl_pytest_record"
PASSING = frozenset({"PASSED", "SKIPPED", "XFAIL"})  # as terminal-bench's parser counts them
_ENTRY_POINT = f"[pytest11]\noc_repl_record = {MODULE}\n"
_METADATA = f"Metadata-Version: 2.1\nName: {MODULE.replace('_', '-')}\nVersion: 1\n"


@dataclass
class Plan:
    """Where the record goes for one verifier run: its files, its environment, its FIFO."""

    directory: str  # the verifier's own directory
    nonce: str = field(default_factory=lambda: secrets.token_hex(8))

    @property
    def fifo(self) -> str:
        return f"{self.directory}/record"

    def files(self) -> list[tuple[str, bytes, int]]:
        dist = f"{self.directory}/{MODULE}-1.dist-info"
        return [
            (f"{self.directory}/{MODULE}.py", PLUGIN.read_bytes(), 0o644),
            (f"{dist}/METADATA", _METADATA.encode(), 0o644),
            (f"{dist}/entry_points.txt", _ENTRY_POINT.encode(), 0o644),
        ]

    def environment(self, pythonpath: str = "") -> dict[str, str]:
        path = f"{self.directory}:{pythonpath}" if pythonpath else self.directory
        return {"PYTHONPATH": path, "OC_REPL_PYTEST_RECORD": self.fifo, "OC_REPL_PYTEST_NONCE": self.nonce}


@dataclass
class Session:
    """One pytest session as its record tells it."""

    pid: int
    start: int
    tests: dict[str, str] = field(default_factory=dict)  # test id -> PASSED, FAILED, ERROR, SKIPPED, XFAIL, XPASS
    status: int | None = None  # pytest's exit status, once the session finished

    @property
    def key(self) -> str:
        return f"{self.pid}:{self.start}"


def sessions(records: bytes, nonce: str) -> list[Session]:
    """The sessions the records carrying `nonce` tell, in the order they started. A record without the nonce is not
    the plugin's (a line something else wrote to the FIFO) and is ignored, and so is anything recorded for a session
    after it finished."""
    found: list[Session] = []
    for line in records.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not isinstance(record, dict) or record.get("n") != nonce:
            continue
        event = record.get("ev")
        if event == "start":
            found.append(Session(int(record.get("pid", 0)), int(record.get("st", 0))))
        elif found and found[-1].status is None and event == "test":
            found[-1].tests[str(record.get("id", ""))] = str(record.get("outcome", ""))
        elif found and found[-1].status is None and event == "finish":
            found[-1].status = int(record.get("status", -1))
    return found


@dataclass
class Verdict:
    """What the recorded sessions say together: each test's last outcome, whether every session finished."""

    tests: dict[str, str]
    finished: bool

    @property
    def failed(self) -> list[str]:
        return [name for name, outcome in self.tests.items() if outcome not in PASSING]

    @property
    def passed(self) -> bool:
        return self.finished and bool(self.tests) and not self.failed


def verdict(found: list[Session]) -> Verdict | None:
    """None when pytest never ran with the record (the verifier ran no pytest, or one the plugin cannot reach)."""
    if not found:
        return None
    tests: dict[str, str] = {}
    for session in found:
        tests.update(session.tests)
    return Verdict(tests, all(s.status is not None for s in found))


def disagreements(found: list[Session], exits: dict[str, int]) -> list[Finding]:
    """A finding for each recorded pytest process that exited with success (its status from the kernel) although its
    session did not succeed, or never finished: something in the process ended it otherwise than pytest did (an
    `os._exit(0)` at exit, after a session that failed). Exits the other way (a signal, a crash) only fail a run."""
    findings = []
    for session in found:
        status = exits.get(session.key)
        if status is None or status != 0 or session.status == 0:
            continue
        why = (
            "its session never finished"
            if session.status is None
            else f"its session ended with status {session.status}"
        )
        detail = f"{why}, yet the process exited with status 0"
        findings.append(Finding(kind="verdict", path=f"pytest (pid {session.pid})", detail=detail, affects_tests=True))
    return findings
