"""The camel source: camel-ai 0.2.90 installed in a cached virtualenv, run to generate what the toolkit sends."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from oc_repl import paths
from oc_repl.protocols.sync import Fetched, Say, SyncError, manifest_sha256, recorded_sha256, run

CAMEL_REQUIREMENTS = ("camel-ai==0.2.90", "mcp<2")
CAMEL_VENV = "camel-ai-0.2.90"
CAMEL_TOOLS = ("shell_exec", "shell_view", "shell_write_to_process", "shell_write_content_to_file")

# Runs inside the camel virtualenv. The toolkit's constructor sets up environments (or a docker connection);
# the schemas depend only on the methods' signatures and docstrings, so an instance without __init__ suffices.
CAMEL_SCRIPT = """
import json, sys
from camel.toolkits import FunctionTool
from camel.toolkits.terminal_toolkit import TerminalToolkit
toolkit = TerminalToolkit.__new__(TerminalToolkit)
schemas = [FunctionTool(getattr(toolkit, name)).get_openai_tool_schema() for name in sys.argv[2:]]
with open(sys.argv[1], "w", encoding="utf-8") as out:
    out.write("\\n".join(json.dumps(schema) for schema in schemas))
"""


def _venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def camel_venv(say: Say) -> Path:
    """A throwaway virtualenv with camel-ai, built once and reused by later syncs."""
    venv = paths.data_dir() / "cache" / CAMEL_VENV
    ready = venv / ".oc-repl-ready"
    if ready.is_file():
        say(f"camel: reusing the virtualenv in {venv}")
        return _venv_python(venv)
    shutil.rmtree(venv, ignore_errors=True)  # an earlier attempt may have stopped half-way
    say(f"camel: creating a virtualenv in {venv} (once; installing takes a minute or more)")
    run([sys.executable, "-m", "venv", str(venv)], timeout=600)
    say(f"camel: installing {' '.join(CAMEL_REQUIREMENTS)}")
    run([str(_venv_python(venv)), "-m", "pip", "install", *CAMEL_REQUIREMENTS], timeout=1800, say=say)
    ready.write_text(" ".join(CAMEL_REQUIREMENTS) + "\n", encoding="utf-8")
    return _venv_python(venv)


def fetch_camel(say: Say) -> list[Fetched]:
    from oc_repl.protocols.camel import load_tools

    try:
        python = camel_venv(say)
    except SyncError as exc:
        raise SyncError(f"could not install {' '.join(CAMEL_REQUIREMENTS)}: {exc}") from exc
    say("camel: generating the tool schemas with camel's FunctionTool")
    with tempfile.TemporaryDirectory(prefix="oc-repl-sync-") as temp:
        out = Path(temp) / "tools.json"
        run([str(python), "-I", "-c", CAMEL_SCRIPT, str(out), *CAMEL_TOOLS], timeout=300, cwd=Path(temp))
        data = out.read_bytes()
    try:
        names = [tool["function"]["name"] for tool in load_tools(data)]
    except Exception as exc:  # whatever camel printed, it is not a tool list we can send
        raise SyncError(f"camel produced an unusable tool list: {exc}") from exc
    if tuple(names) != CAMEL_TOOLS:
        raise SyncError(f"camel produced the tools {names}, not {list(CAMEL_TOOLS)}")
    published = manifest_sha256("camel-terminal-toolkit", "tools.json")
    expected = published or recorded_sha256("camel-terminal-toolkit", "tools.json")
    origin = f"{' '.join(CAMEL_REQUIREMENTS)}: FunctionTool(TerminalToolkit.<name>).get_openai_tool_schema()"
    return [Fetched("camel-terminal-toolkit", "tools.json", data, expected, origin, published=bool(published))]
