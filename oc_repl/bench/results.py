"""A trial's record: `result.json`, derived from its transcript and its process's exit, written atomically.

DIR/trials/<task>/<arm>/<n>/ holds `transcript.jsonl`, `stderr.txt` and, once the trial is over, `result.json`; an
arm is a protocol, or with several models or servers in one bench, a protocol with one of them (its label). A trial
without a result.json is unfinished: a re-run with the same --out runs it again from scratch.

A trial's partial score is what training rewarded: the share of its tests that passed (terminal-bench's format), or
the reward a Harbor task's tests wrote, as it is; a trial with no count is 1 when resolved, else 0; a tampered one 0.
"""

from __future__ import annotations

import json
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from oc_repl.bench.signatures import signatures, turn_actions
from oc_repl.outcome import FAILURE_MODES, Status
from oc_repl.private import write_atomic
from oc_repl.redact import Redactor, redactor
from oc_repl.safejson import BadInput, lines, load_file

SCHEMA = "oc-repl-bench/1"
TRANSCRIPT, RESULT, STDERR = "transcript.jsonl", "result.json", "stderr.txt"


@dataclass
class TrialResult:
    task: str
    protocol: str
    attempt: int
    outcome: str  # an oc_repl.outcome.Status value
    failure_mode: str
    resolved: bool
    exit_code: int | None
    task_format: str = ""
    tests_passed: int | None = None
    tests_total: int | None = None
    reward: float | None = None
    findings: int = 0  # what the agent tried, as found before the verifier (`tampered` when one affects tests)
    turns: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    parse_errors: int = 0
    tool_calls_native: int = 0
    tool_calls_salvaged: int = 0
    wall_time_s: float = 0.0
    sandbox_calls: int = 0  # calls made into the sandbox, and the seconds spent in them (thread.completed)
    sandbox_seconds: float = 0.0
    started_at: float = 0.0  # Unix time
    model: str = ""
    server: str = ""
    image: str = ""
    exact: bool = False
    assets: list[dict[str, str]] = field(default_factory=list)  # name, sha256, source of each asset the model saw
    error: str = ""  # the last error event's message, if any
    transcript: str = TRANSCRIPT  # relative to the trial's directory; "" when no run started (build_error)
    arm: str = ""  # the label of the trial's arm when it is not the protocol's name
    signatures: list[str] = field(default_factory=list)  # failure signatures (oc_repl/bench/signatures.py)
    actions: list[str] = field(default_factory=list)  # per turn, what the model did
    infra_before: list[str] = field(default_factory=list)  # earlier runs of this trial that failed on infrastructure
    directory: str = ""  # the trial's folder relative to the bench's, where it is not trials/<task>/<arm>/<n> (Harbor)
    schema: str = SCHEMA

    @property
    def label(self) -> str:
        """The arm the trial belongs to: its directory, its row in the tables."""
        return self.arm or self.protocol

    @property
    def infrastructure(self) -> bool:
        return Status(self.outcome).infrastructure

    @property
    def partial(self) -> float:
        if self.outcome == Status.TAMPERED.value:
            return 0.0
        if self.reward is not None:
            return self.reward
        if self.tests_total:
            return (self.tests_passed or 0) / self.tests_total
        return 1.0 if self.resolved else 0.0

    @classmethod
    def from_dict(cls, data: Any) -> TrialResult:
        """A record read back, each field of its type; ValueError naming the first that is not (a result.json may
        have been written by anyone)."""
        if not isinstance(data, dict):
            raise ValueError("not a trial record (a JSON object)")
        checked = {f.name: _checked(f.name, str(f.type), data[f.name]) for f in fields(cls) if f.name in data}
        missing = [f.name for f in fields(cls) if f.name not in data and f.default is MISSING]
        if missing:
            raise ValueError(f"{missing[0]}: missing")
        result = cls(**checked)
        if result.outcome not in {s.value for s in Status}:
            raise ValueError(f"outcome: not an oc-repl outcome: {result.outcome[:40]!r}")
        if result.failure_mode not in FAILURE_MODES:
            raise ValueError(f"failure_mode: not a failure mode: {result.failure_mode[:40]!r}")
        if result.attempt < 1:
            raise ValueError(f"attempt: must be at least 1, got {result.attempt}")
        return result


_KINDS: dict[str, tuple[type, ...]] = {"str": (str,), "int": (int,), "bool": (bool,), "float": (int, float)}


def _checked(name: str, declared: str, value: Any) -> Any:
    kind, _, optional = declared.partition(" | ")
    if value is None and optional == "None":
        return None
    if kind == "list[str]":
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return value
        raise ValueError(f"{name}: expected a list of strings")
    if kind.startswith("list["):  # the assets: names, hashes and sources
        if isinstance(value, list) and all(
            isinstance(a, dict) and all(isinstance(v, str) for v in a.values()) for a in value
        ):
            return value
        raise ValueError(f"{name}: expected a list of objects of strings")
    if isinstance(value, _KINDS[kind]) and (kind == "bool" or not isinstance(value, bool)):
        return float(value) if kind == "float" else value
    raise ValueError(f"{name}: expected {kind}{' or null' if optional else ''}, got {_json_type(value)}")


def _json_type(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    return {dict: "an object", list: "a list", str: "a string"}.get(type(value), "a number")


def trial_dir(out: Path, task: str, arm: str, attempt: int) -> Path:
    return out / "trials" / task / arm / str(attempt)


def inside(path: Path, root: Path) -> bool:
    """`path`, with every symlink followed, is `root` or under it."""
    return path.resolve().is_relative_to(root.resolve())


def transcript_of(out: Path, result: TrialResult) -> Path | None:
    """The trial's transcript, when it has one that is a file inside the bench directory."""
    if not result.transcript:
        return None
    folder = out / result.directory if result.directory else trial_dir(out, result.task, result.label, result.attempt)
    path = folder / result.transcript
    return path if path.is_file() and inside(path, out) else None


def _events(transcript: Path) -> list[dict[str, Any]]:
    """The transcript's events as plain JSON (a line cut by a crash is skipped). Not the typed reader on purpose:
    a signal that arrives while pydantic validates could surface as a bad line and be swallowed with it."""
    if not transcript.is_file():
        return []
    return [event for _, event in lines(transcript) if isinstance(event, dict)]


def from_transcript(
    transcript: Path,
    *,
    task: str,
    protocol: str,
    attempt: int,
    exit_code: int | None,
    wall_time_s: float,
    started_at: float,
    image: str = "",
    task_format: str = "",
    arm: str = "",
) -> TrialResult:
    """The trial's record as its transcript tells it; its exit says how it ended when the transcript cannot."""
    by_type: dict[str, list[dict[str, Any]]] = {}
    events = _events(transcript)
    for event in events:
        by_type.setdefault(str(event.get("type")), []).append(event)
    started = (by_type.get("thread.started") or [{}])[0]
    completed = (by_type.get("thread.completed") or [None])[-1]
    verify = (by_type.get("verify.completed") or [None])[-1]
    usages = [e.get("usage") or {} for e in by_type.get("turn.completed", [])]
    items = [e.get("item") or {} for e in by_type.get("item.completed", [])]
    errors = [e for e in by_type.get("error", []) if not e.get("retrying") and e.get("kind") != "display"]
    status = Status(completed["status"]) if completed else Status.of_exit(exit_code)
    timed_out = bool(verify and verify.get("timed_out"))
    return TrialResult(
        task=task,
        protocol=protocol,
        attempt=attempt,
        outcome=status.value,
        failure_mode="" if status is Status.INTERRUPTED else status.failure_mode(timed_out),
        resolved=status is Status.VERIFIED,
        exit_code=exit_code,
        task_format=task_format,
        tests_passed=(verify or {}).get("tests_passed"),
        tests_total=(verify or {}).get("tests_total"),
        reward=(verify or {}).get("reward"),
        findings=len((verify or {}).get("findings") or []),
        turns=(completed or {}).get("turns", 0),
        tokens_in=sum(u.get("input_tokens", 0) for u in usages),
        tokens_out=sum(u.get("output_tokens", 0) for u in usages),
        parse_errors=sum(item.get("type") == "parse_error" for item in items),
        tool_calls_native=(completed or {}).get("tool_calls_native", 0),
        tool_calls_salvaged=(completed or {}).get("tool_calls_salvaged", 0),
        wall_time_s=round(wall_time_s, 3),
        sandbox_calls=(completed or {}).get("sandbox_calls", 0),
        sandbox_seconds=(completed or {}).get("sandbox_seconds", 0.0),
        started_at=round(started_at, 3),
        model=started.get("model", ""),
        server=started.get("api_base", ""),
        image=image,
        exact=bool(started.get("exact")),
        assets=[{k: a.get(k, "") for k in ("name", "sha256", "source")} for a in started.get("assets") or []],
        error=errors[-1].get("message", "") if errors else "",
        arm="" if arm == protocol else arm,
        signatures=signatures(events, status),
        actions=turn_actions(events),
    )


def write_json_atomic(path: Path, data: Any, redact: Redactor | None = None) -> None:
    """Readers see the old file or the new one, never a part: a kill mid-write leaves no half record. Private, as
    every record is, with the secrets redacted (by default: this process's own, see oc_repl.redact)."""
    data = (redact or redactor()).data(data)
    write_atomic(path, json.dumps(data, indent=1, ensure_ascii=False) + "\n")


def write_result(directory: Path, result: TrialResult, redact: Redactor | None = None) -> None:
    write_json_atomic(directory / RESULT, asdict(result), redact)


def read_result(directory: Path) -> TrialResult | None:
    """The trial's record, or None while it is unfinished (no file, or one this version cannot read)."""
    try:
        return _parsed(directory / RESULT)
    except BadInput:
        return None


def _parsed(path: Path) -> TrialResult | None:
    """The record at `path`; None for another schema's; BadInput for one that is not a record."""
    data = load_file(path)
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        return None
    try:
        return TrialResult.from_dict(data)
    except ValueError as exc:
        raise BadInput(path, str(exc)) from None


def load_results(out: Path) -> list[TrialResult]:
    """Every finished trial under DIR/trials, in task, protocol, attempt order. A record that is not one, or that
    is not where its own task, protocol and attempt put it (inside DIR), is a BadInput naming it."""
    found = []
    for path in (out / "trials").glob(f"*/*/*/{RESULT}"):
        result = _parsed(path)
        if result is None:
            continue
        if trial_dir(out, result.task, result.label, result.attempt) != path.parent or not inside(path, out):
            raise BadInput(path, "a trial record outside its own trial directory")
        found.append(result)
    return sorted(found, key=lambda r: (r.task, r.label, r.attempt))
