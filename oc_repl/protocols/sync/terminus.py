"""The terminus source: terminal-bench 0.2.18's wheel from the package index."""

from __future__ import annotations

import sys
import tempfile
import zipfile
from pathlib import Path

from oc_repl.protocols.sync import Fetched, Say, SyncError, manifest_sha256, run

TERMINAL_BENCH = "terminal-bench==0.2.18"
# (protocol folder, file name, member of the wheel, protocol whose manifest holds the expected hash)
TERMINUS_FILES = (
    ("terminus-json", "prompt.txt", "terminus-json-plain.txt", "terminus-json"),
    ("terminus-xml", "prompt.txt", "terminus-xml-plain.txt", "terminus-xml"),
    ("terminus-json", "timeout.txt", "timeout.txt", "terminus-json"),
    ("terminus-xml", "timeout.txt", "timeout.txt", "terminus-json"),
)
TEMPLATE_DIR = "terminal_bench/agents/prompt-templates/"


def fetch_terminus(say: Say) -> list[Fetched]:
    say(f"terminus: downloading {TERMINAL_BENCH} from the package index")
    with tempfile.TemporaryDirectory(prefix="oc-repl-sync-") as temp:
        # The wheel declares Python >= 3.12; only data files are read from it, so any interpreter will do.
        command = [sys.executable, "-m", "pip", "download", TERMINAL_BENCH, "--no-deps", "--ignore-requires-python"]
        try:
            run([*command, "--only-binary=:all:", "-d", temp], timeout=600)
        except SyncError as exc:
            raise SyncError(
                f"pip could not download {TERMINAL_BENCH} (is the package index reachable?): {exc}"
            ) from exc
        wheels = sorted(Path(temp).glob("terminal_bench-*.whl"))
        if not wheels:
            raise SyncError(f"pip downloaded no wheel for {TERMINAL_BENCH}")
        try:
            with zipfile.ZipFile(wheels[0]) as wheel:
                members = {member: wheel.read(TEMPLATE_DIR + member) for _, _, member, _ in TERMINUS_FILES}
        except (KeyError, zipfile.BadZipFile) as exc:
            raise SyncError(f"{wheels[0].name} does not hold the expected templates: {exc}") from exc
    origin = f"{TERMINAL_BENCH} wheel: {TEMPLATE_DIR}"
    return [
        Fetched(protocol, filename, members[member], manifest_sha256(owner, filename), origin + member)
        for protocol, filename, member, owner in TERMINUS_FILES
    ]
