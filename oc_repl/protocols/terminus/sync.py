"""The terminus source: terminal-bench 0.2.18's wheel from the package index.

Its prompt templates are files in the wheel. Every other text its Terminus-2 agent and parsers send is derived by
running their code (derive.py) into one `messages.toml` per protocol, written canonically
(`templates.dump`) so that its sha256 depends on the texts alone and can be checked like any other asset.
"""

from __future__ import annotations

import json
import sys
import tempfile
import zipfile
from pathlib import Path

from oc_repl.errors import UsageError
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
MESSAGES = "messages.toml"
FORMATS = {"terminus-json": "json", "terminus-xml": "xml"}
DERIVE = Path(__file__).with_name("derive.py")


def download_wheel(target: Path) -> Path:
    # The wheel declares Python >= 3.12; its code is only run with stand-ins for its imports, which works from 3.10.
    command = [sys.executable, "-m", "pip", "download", TERMINAL_BENCH, "--no-deps", "--ignore-requires-python"]
    try:
        run([*command, "--only-binary=:all:", "-d", str(target)], timeout=600)
    except SyncError as exc:
        raise SyncError(f"pip could not download {TERMINAL_BENCH} (is the package index reachable?): {exc}") from exc
    wheels = sorted(target.glob("terminal_bench-*.whl"))
    if not wheels:
        raise SyncError(f"pip downloaded no wheel for {TERMINAL_BENCH}")
    return wheels[0]


def derive_messages(wheel: Path) -> dict[str, bytes]:
    """Each terminus protocol's `messages.toml` in upstream's words, checked against the protocol's template spec.

    The derivation runs upstream's code in a fresh interpreter: its modules and the stand-ins for their imports
    never enter this process, and a failure there is one line here.
    """
    from oc_repl.protocols.templates import dump, parse
    from oc_repl.protocols.terminus.parse import SPECS

    with tempfile.TemporaryDirectory(prefix="oc-repl-derive-") as temp:
        out = Path(temp) / "derived.json"
        # -E -S: no PYTHON* variables and no site-packages (the standard library suffices); run by path, the
        # script's own folder gives it its sibling module
        run([sys.executable, "-E", "-S", str(DERIVE), str(wheel), str(out)], timeout=300, cwd=Path(temp))
        derived = json.loads(out.read_text(encoding="utf-8"))
    files = {}
    for protocol, fmt in FORMATS.items():
        data = dump(derived.get(protocol, {}))
        try:
            parse(data, SPECS[fmt], f"derived {protocol}/{MESSAGES}")
        except UsageError as exc:
            raise SyncError(f"the texts derived from {TERMINAL_BENCH} do not fit the protocol: {exc.message}") from exc
        files[protocol] = data
    return files


def fetch_terminus(say: Say) -> list[Fetched]:
    say(f"terminus: downloading {TERMINAL_BENCH} from the package index")
    with tempfile.TemporaryDirectory(prefix="oc-repl-sync-") as temp:
        wheel = download_wheel(Path(temp))
        try:
            with zipfile.ZipFile(wheel) as archive:
                members = {member: archive.read(TEMPLATE_DIR + member) for _, _, member, _ in TERMINUS_FILES}
        except (KeyError, zipfile.BadZipFile) as exc:
            raise SyncError(f"{wheel.name} does not hold the expected templates: {exc}") from exc
        say("terminus: deriving the agent's and the parsers' texts by running their code")
        messages = derive_messages(wheel)
    origin = f"{TERMINAL_BENCH} wheel: {TEMPLATE_DIR}"
    derived = f"{TERMINAL_BENCH} wheel: derived by running its Terminus-2 agent and parsers"
    return [
        *(
            Fetched(protocol, filename, members[member], manifest_sha256(owner, filename), origin + member)
            for protocol, filename, member, owner in TERMINUS_FILES
        ),
        *(
            Fetched(protocol, MESSAGES, data, manifest_sha256(protocol, MESSAGES), derived)
            for protocol, data in messages.items()
        ),
    ]
