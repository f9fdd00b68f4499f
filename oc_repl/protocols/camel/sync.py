"""The camel source: camel-ai 0.2.90 installed in a cached virtualenv, run to generate what the toolkit sends."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from oc_repl import paths
from oc_repl.errors import UsageError
from oc_repl.protocols.sync import Fetched, Say, SyncError, manifest_sha256, run
from oc_repl.protocols.synced import recorded_sha256
from oc_repl.protocols.templates import dump, parse

# camel-ai itself needs neither rich nor docker. rich turns blocking output into plain text, in the release line
# chosen (`--camel-rich`: text.py converts as either does); docker lets the differential test run the toolkit's docker
# backend.
RICH = {"14": "rich==14.3.4", "15": "rich>=15,<16"}


def requirements(rich: str) -> tuple[str, ...]:
    return ("camel-ai==0.2.90", "mcp<2", RICH[rich], "docker>=7.1,<8")


CAMEL_VENV = "camel-ai-0.2.90-rich{}"
CAMEL_TOOLS = ("shell_exec", "shell_view", "shell_write_to_process", "shell_write_content_to_file")

# Runs inside the camel virtualenv: builds the toolkit against stand-ins and calls its methods (see the script).
DERIVE_SCRIPT = Path(__file__).with_name("derive.py")


def _venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def camel_venv(say: Say, rich: str = "14") -> Path:
    """A throwaway virtualenv with camel-ai and rich's line `rich`, built once and reused by later syncs."""
    venv = paths.data_dir() / "cache" / CAMEL_VENV.format(rich)
    ready = venv / ".oc-repl-ready"
    wanted = " ".join(requirements(rich)) + "\n"
    if ready.is_file() and ready.read_text(encoding="utf-8") == wanted:
        say(f"camel: reusing the virtualenv in {venv}")
        return _venv_python(venv)
    shutil.rmtree(venv, ignore_errors=True)  # an earlier attempt may have stopped half-way
    say(f"camel: creating a virtualenv in {venv} (once; installing takes a minute or more)")
    run([sys.executable, "-m", "venv", str(venv)], timeout=600)
    say(f"camel: installing {' '.join(requirements(rich))}")
    run([str(_venv_python(venv)), "-m", "pip", "install", *requirements(rich)], timeout=1800, say=say)
    ready.write_text(wanted, encoding="utf-8")
    return _venv_python(venv)


def fetch_camel(say: Say, rich: str = "14") -> list[Fetched]:
    try:
        python = camel_venv(say, rich)
    except SyncError as exc:
        raise SyncError(f"could not install {' '.join(requirements(rich))}: {exc}") from exc
    say("camel: calling TerminalToolkit's own methods for its tool schemas and the texts it answers with")
    with tempfile.TemporaryDirectory(prefix="oc-repl-sync-") as temp:
        out = Path(temp) / "derived.json"
        run([str(python), "-I", str(DERIVE_SCRIPT), str(out)], timeout=300, cwd=Path(temp))
        derived = json.loads(out.read_text(encoding="utf-8"))
    tools, toolkit = _checked(derived)
    chat_agent = _checked_chat_agent(derived)
    _compare_plain_text(derived["probes"], say, rich)
    installed = " ".join(requirements(rich))
    return [
        _fetched("tools.json", tools, f"{installed}: FunctionTool(TerminalToolkit.<name>).get_openai_tool_schema()"),
        _fetched("toolkit.toml", toolkit, f"{installed}: TerminalToolkit's answers, derived by calling it"),
        _fetched("chat_agent.toml", chat_agent, f"{installed}: ChatAgent._truncate_tool_result's notice"),
    ]


def _checked_chat_agent(derived: dict) -> bytes:
    from oc_repl.protocols.camel.protocol import CHAT_AGENT_SPEC
    from oc_repl.training import CAMEL_SUMMARIZE_THRESHOLD

    if derived["summarize_threshold"] != CAMEL_SUMMARIZE_THRESHOLD:  # the budget oc-repl cuts to would be wrong
        found = derived["summarize_threshold"]
        raise SyncError(f"camel's ChatAgent cuts at {found}%, not {CAMEL_SUMMARIZE_THRESHOLD}%")
    data = dump(derived["chat_agent"])
    try:
        parse(data, CHAT_AGENT_SPEC, "chat_agent.toml")
    except UsageError as exc:
        raise SyncError(f"camel's notice does not make the template oc-repl needs: {exc}") from exc
    return data


def _fetched(filename: str, data: bytes, origin: str) -> Fetched:
    published = manifest_sha256("camel-terminal-toolkit", filename)
    expected = published or recorded_sha256("camel-terminal-toolkit", filename)
    return Fetched("camel-terminal-toolkit", filename, data, expected, origin, published=bool(published))


def _checked(derived: dict) -> tuple[bytes, bytes]:
    from oc_repl.protocols.camel.protocol import load_tools
    from oc_repl.protocols.camel.tools import TOOLKIT_SPEC

    tools = derived["tools"].encode("utf-8")
    try:
        names = [tool["function"]["name"] for tool in load_tools(tools)]
    except Exception as exc:  # whatever camel printed, it is not a tool list we can send
        raise SyncError(f"camel produced an unusable tool list: {exc}") from exc
    if tuple(names) != CAMEL_TOOLS:
        raise SyncError(f"camel produced the tools {names}, not {list(CAMEL_TOOLS)}")
    toolkit = dump(derived["templates"])
    try:
        parse(toolkit, TOOLKIT_SPEC, "toolkit.toml")
    except UsageError as exc:
        raise SyncError(f"camel's answers do not make the templates oc-repl needs: {exc}") from exc
    return tools, toolkit


def _compare_plain_text(probes: list[list[str]], say: Say, rich: str) -> None:
    """Blocking output reaches the model through the toolkit's plain-text conversion (rich's); oc-repl converts it
    itself, as rich's line `rich` does, and says so when the installed rich converts differently."""
    from oc_repl.protocols.camel.text import terminal_text

    differing = [text for text, plain in probes if terminal_text(text.encode("utf-8"), rich) != plain]
    if differing:
        say(f"camel: warning: the toolkit's plain-text conversion differs from oc-repl's for {differing!r}")
