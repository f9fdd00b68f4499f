"""Kinds defined by the tests alone, each in one module with no edit elsewhere, and installed the way a package
installs them: a dist-info whose entry points name them (oc_repl/plugins.py)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import ROOT, cli_env

# group -> entry point name -> the descriptor it names
ENTRY_POINTS = {
    "oc_repl.protocols": {"shout": "tests.kinds.shout_protocol:KIND"},
    "oc_repl.sandboxes": {"noted-image": "tests.kinds.noted_image:KIND"},
    "oc_repl.wires": {"relay": "tests.kinds.relay_wire:WIRE"},
    "oc_repl.task_formats": {"recipe": "tests.kinds.recipe_format:FORMAT"},
}


def installed(tmp_path: Path) -> dict[str, str]:
    """The environment of a machine where a package (`ocr-test-kinds`) registers the four kinds."""
    info = tmp_path / "site" / "ocr_test_kinds-1.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ocr-test-kinds\nVersion: 1.0\n")
    sections = [
        f"[{group}]\n" + "".join(f"{n} = {ref}\n" for n, ref in refs.items()) for group, refs in ENTRY_POINTS.items()
    ]
    (info / "entry_points.txt").write_text("\n".join(sections))
    return {**cli_env(tmp_path), "PYTHONPATH": f"{tmp_path / 'site'}:{ROOT}"}
