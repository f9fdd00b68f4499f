"""A sandbox kind: a `local:` directory (confined alike) that finds a note of one setting's words in it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from oc_repl.rows import FILE, FLAG, row
from oc_repl.sandbox.kinds import SandboxKind
from oc_repl.sandbox.local import LocalSandbox


class ScratchSandbox(LocalSandbox):
    @classmethod
    def from_spec(cls, rest: str, scratch_note: str | None = None, **opts: Any) -> ScratchSandbox:
        root = Path(rest)
        root.mkdir(parents=True, exist_ok=True)
        (root / "NOTE").write_text(scratch_note or "no note")
        box = cls(root, **opts)
        box.spec = f"scratch:{box.root}"
        return box


def check() -> tuple[str, str, str, str]:
    """The scratch sandboxes' look at this machine: they confine as local: ones do."""
    from oc_repl.sandbox.confine import check as confinement

    ok, why = confinement()
    if ok:
        return ("scratch sandbox", "ok", f"scratch: directories are confined as local: ones ({why})", "")
    return ("scratch sandbox", "warn", f"scratch: directories cannot be confined here: {why}", "install bubblewrap")


KIND = SandboxKind(
    "scratch",
    "tests.kinds.scratch_sandbox:ScratchSandbox",
    "scratch:<dir>",
    on_host=True,
    options=(row("scratch_note", "str", None, "scratch: the note put in the directory", FLAG, FILE),),
    takes=("limits", "private_files"),
    doctor="tests.kinds.scratch_sandbox:check",
)
