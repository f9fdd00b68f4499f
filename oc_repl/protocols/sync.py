"""`oc-repl protocols sync`: derive the exact upstream assets on the user's machine, check them, store them.

Three sources, each independent of the others (one failing never stops the rest), each in its own module:
- terminus: terminal-bench 0.2.18's wheel on PyPI: its prompt templates, and every other text its Terminus-2 agent
  and parsers send, derived by running its own code (`terminus/sync.py`);
- camel: camel-ai 0.2.90 in a cached virtualenv: the TerminalToolkit tool schemas and the texts its tools return
  (`camel/sync.py`);
- openclaw: OpenClaw-RL's `terminal-rl` (its files at a pinned commit, fetched and checked against their sha256, or a
  checkout, file or URL the user names): the system prompt rendered by its own function, and (from a checkout or the
  pinned files) the harness's tool-error and parse-error texts read out of its code (`camel/openclaw.py`).

Every asset is checked against a known sha256 (the manifests' `upstream_sha256`, else the hash a first sync
recorded) and refused on a mismatch unless forced; files are written atomically; `sync.json` records each store.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from oc_repl import paths
from oc_repl.lazy import load
from oc_repl.protocols.kinds import SYNC_SOURCES
from oc_repl.protocols.synced import RECORD, read_record

SOURCES = SYNC_SOURCES

Say = Callable[[str], None]


class SyncError(Exception):
    """A source could not be fetched; the message is one line meant for the user."""


@dataclass
class Fetched:
    protocol: str
    filename: str
    data: bytes
    expected: str  # "" when no hash is known yet
    origin: str
    published: bool = True  # the expected hash is a published one, not one an earlier sync recorded

    @property
    def key(self) -> str:
        return f"{self.protocol}/{self.filename}"


@dataclass
class Outcome:
    asset: str
    ok: bool
    message: str


# --- the record and atomic writes -------------------------------------------------------------------------------


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_atomic(path: Path, data: bytes) -> None:
    """Readers see the old file or the new one, never a half-written one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        os.chmod(temp, 0o644)  # mkstemp makes the file private; these are ordinary data files
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def _remember(fetched: Fetched, matched: bool) -> None:
    record = read_record()
    record["assets"][fetched.key] = {
        "sha256": sha256(fetched.data),
        "origin": fetched.origin,
        "matched": matched,
        # no published hash: what was stored becomes the reference later syncs compare against
        "recorded": not fetched.published,
        "synced_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_atomic(paths.upstream_dir() / RECORD, (json.dumps(record, indent=2, sort_keys=True) + "\n").encode())


def store(fetched: Fetched, force: bool) -> Outcome:
    digest = sha256(fetched.data)
    matched = not fetched.expected or digest == fetched.expected
    if not matched and not force:
        return Outcome(
            fetched.key,
            False,
            f"sha256 differs from the {'published' if fetched.published else 'recorded'} upstream hash: "
            f"expected {fetched.expected}, got {digest}; not stored (--force stores it anyway)",
        )
    write_atomic(paths.upstream_dir() / fetched.protocol / fetched.filename, fetched.data)
    _remember(fetched, matched)
    if not fetched.expected:
        return Outcome(fetched.key, True, f"stored, sha256 {digest} recorded as the reference")
    if matched:
        return Outcome(fetched.key, True, f"stored, sha256 {digest} matches")
    return Outcome(
        fetched.key, True, f"stored despite the mismatch (--force): expected {fetched.expected}, got {digest}"
    )


# --- running helpers ------------------------------------------------------------------------------------------------


def _progress(line: str, say: Say) -> None:
    if line.startswith("Collecting ") and "(from " not in line:  # what was asked for, not its dependencies
        say(f"  {line}")
    elif line.startswith("Successfully installed "):
        say(f"  installed {len(line.split()) - 2} packages")


def run(command: list[str], timeout: float, cwd: Path | None = None, say: Say | None = None) -> None:
    """Runs a command, reporting pip's progress as it comes; a failure becomes its last error line."""
    try:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=cwd)
    except OSError as exc:
        raise SyncError(f"cannot run {command[0]}: {exc}") from exc
    expired = threading.Event()
    timer = threading.Timer(timeout, lambda: (expired.set(), process.kill()))
    timer.start()
    lines = []
    try:
        assert process.stdout is not None
        for raw in process.stdout:
            lines.append(raw.strip())
            if say is not None:
                _progress(lines[-1], say)
        status = process.wait()
    finally:
        timer.cancel()
    if expired.is_set():
        raise SyncError(f"{Path(command[0]).name} took longer than {timeout:.0f} s and was stopped")
    if status != 0:
        lines = [line for line in lines if line]
        errors = [line for line in lines if line.startswith("ERROR")] or lines
        raise SyncError(errors[-1] if errors else f"{Path(command[0]).name} exited with status {status}")


def manifest_sha256(protocol: str, filename: str) -> str:
    from oc_repl.protocols import manifests

    manifest = manifests().get(protocol)
    return manifest.upstream_sha256(filename) if manifest else ""


# --- all of it ------------------------------------------------------------------------------------------------------

# What each source would store, so that a source that cannot be fetched still reports on each of its assets.
ASSETS = {
    "terminus": [
        f"{protocol}/{filename}"
        for protocol in ("terminus-json", "terminus-xml")
        for filename in ("prompt.txt", "timeout.txt", "messages.toml")
    ],
    "camel": ["camel-terminal-toolkit/tools.json", "camel-terminal-toolkit/toolkit.toml"],
    "openclaw": ["camel-terminal-toolkit/system.txt", "camel-terminal-toolkit/agent.toml"],
}


# Each source's fetcher, imported when it runs: the fetchers use this module's pieces.
FETCHERS = {
    "terminus": "oc_repl.protocols.terminus.sync:fetch_terminus",
    "camel": "oc_repl.protocols.camel.sync:fetch_camel",
    "openclaw": "oc_repl.protocols.camel.openclaw:fetch_openclaw",
}


def _fetchers(
    openclaw: str | None, mirror: str | None, camel_rich: str
) -> Iterator[tuple[str, Callable[[Say], list[Fetched]]]]:
    for source in SOURCES:
        fetch = load(FETCHERS[source])
        if source == "openclaw":
            yield source, lambda say, f=fetch: f(openclaw, say, mirror)
        elif source == "camel":
            yield source, lambda say, f=fetch: f(say, camel_rich)
        else:
            yield source, fetch


def sync(
    only: tuple[str, ...],
    openclaw: str | None,
    force: bool,
    say: Say,
    mirror: str | None = None,
    camel_rich: str = "14",
) -> Iterator[Outcome]:
    """Each source in turn; outcomes come as soon as their source is done, failures included. OpenClaw-RL's files
    come from `openclaw` (a checkout, file or address the user names, run as it is) or, with none, are fetched at
    the pinned commit (from `mirror` when given) and run only when their sha256 is the pinned one. camel's toolkit
    runs with rich's line `camel_rich`."""
    for source, fetch in _fetchers(openclaw, mirror, camel_rich):
        if only and source not in only:
            continue
        try:
            fetched = fetch(say)
        except SyncError as exc:
            yield from (Outcome(asset, False, str(exc)) for asset in ASSETS[source])
            continue
        for item in fetched:
            try:
                yield store(item, force)
            except OSError as exc:
                yield Outcome(item.key, False, f"could not write: {exc}")
