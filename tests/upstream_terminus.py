"""terminal-bench 0.2.18 for the terminus tests: its wheel (downloaded from the package index once per machine and
cached), the texts `protocols sync` derives from it, a data folder laid out as a sync leaves it, and the pieces that
let upstream's agent and ours run side by side on the same replies and screens."""

from __future__ import annotations

from pathlib import Path

from oc_repl.protocols.templates import Templates, parse
from oc_repl.protocols.terminus.parse import SPECS
from oc_repl.protocols.terminus.sync import derive_messages
from oc_repl.protocols.terminus.tmux import Probe, Terminal
from oc_repl.protocols.terminus.upstream import PROMPTS, read_member
from tests.packages import package_file

VERSION = "0.2.18"
WHEEL_SHA256 = "564e8f50968c91a9018edf62ed0c2cfb3a1cf068cf4f843bcaeed06d8340f2e8"
FORMATS = {"json": "terminus-json", "xml": "terminus-xml"}


def wheel() -> Path:
    """The wheel, checked by its published sha256; skips the test when it cannot be had (fails it under CI=true)."""
    return package_file(f"terminal-bench=={VERSION}", f"terminal-bench-{VERSION}", WHEEL_SHA256, timeout=100)


def derived_files(wheel_path: Path) -> dict[str, bytes]:
    """{protocol: messages.toml} exactly as `protocols sync` derives it (in a fresh interpreter)."""
    return derive_messages(wheel_path)


def templates(files: dict[str, bytes]) -> dict[str, Templates]:
    """The derived texts loaded the way the protocols load theirs, by format."""
    return {fmt: Templates(parse(files[name], SPECS[fmt], name)) for fmt, name in FORMATS.items()}


def lay_out_sync(data_home: Path, wheel_path: Path, files: dict[str, bytes]) -> None:
    """The upstream folder a terminus sync leaves under XDG_DATA_HOME: each protocol's prompt and messages."""
    for fmt, name in FORMATS.items():
        folder = data_home / "oc-repl" / "upstream" / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "prompt.txt").write_bytes(read_member(wheel_path, PROMPTS[fmt]))
        (folder / "messages.toml").write_bytes(files[name])


class ScriptedTerminal(Terminal):
    """The terminal the protocol drives, with the screens given in advance and no waiting: what upstream's agent is
    shown can then be fed to ours, and the keys and waits each sends compared."""

    def __init__(self, sandbox: object, screens: list[str]) -> None:
        self.sandbox = sandbox  # type: ignore[assignment]
        self.screens = list(screens)
        self.sent: list[tuple[str, float]] = []

    def send_keys(self, keys: str) -> None:
        self.sent.append((keys, float("nan")))

    def wait(self, duration: float, started: float, until_idle: bool = True) -> None:
        self.sent[-1] = (self.sent[-1][0], duration)

    def observe(self) -> tuple[str, str]:
        shown = self.screens.pop(0)
        new = "New Terminal Output:\n"  # the markers protocols.md quotes
        if shown.startswith(new):
            return "new", shown[len(new) :]
        return "screen", shown.removeprefix("Current Terminal Screen:\n")

    def probe(self) -> Probe:
        return Probe(idle=True, screen="")  # at its prompt: only loop detection asks, and upstream has none

    def alive(self) -> bool:
        return True

    def close(self) -> None:
        pass
