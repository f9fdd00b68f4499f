"""`oc-repl protocols sync`: fetch the exact upstream assets from their public sources, check them, store them.

Three sources, each independent of the others (one failing never stops the rest):
- terminus: the prompt templates inside terminal-bench 0.2.18's wheel on PyPI;
- camel: the four TerminalToolkit tool schemas as camel-ai 0.2.90 itself generates them, in a cached virtualenv;
- openclaw: the system prompt rendered by OpenClaw-RL's `terminal-rl/agent/prompts.py` (a checkout, file or URL).

Every asset is checked against a known sha256 (the manifests' `upstream_sha256`, else the hash a first sync
recorded) and refused on a mismatch unless forced; files are written atomically; `sync.json` records each store.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from oc_repl import paths

SOURCES = ("terminus", "camel", "openclaw")
TERMINAL_BENCH = "terminal-bench==0.2.18"
CAMEL_REQUIREMENTS = ("camel-ai==0.2.90", "mcp<2")
CAMEL_VENV = "camel-ai-0.2.90"
OPENCLAW_FILE = Path("terminal-rl/agent/prompts.py")
RECORD = "sync.json"

# (protocol folder, file name, member of the wheel, protocol whose manifest holds the expected hash)
TERMINUS_FILES = (
    ("terminus-json", "prompt.txt", "terminus-json-plain.txt", "terminus-json"),
    ("terminus-xml", "prompt.txt", "terminus-xml-plain.txt", "terminus-xml"),
    ("terminus-json", "timeout.txt", "timeout.txt", "terminus-json"),
    ("terminus-xml", "timeout.txt", "timeout.txt", "terminus-json"),
)
TEMPLATE_DIR = "terminal_bench/agents/prompt-templates/"
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

# Runs in a fresh interpreter. The prompt module may import the whole training harness; statements that fail
# here (those imports, classes built on them) do not matter to the prompt function, so they are skipped.
RENDER_SCRIPT = """
import __future__, ast, datetime, inspect, sys
path, out = sys.argv[1], sys.argv[2]
tree = ast.parse(open(path, encoding="utf-8").read(), path)
flags, namespace = 0, {"__name__": "openclaw_prompts", "__file__": path}
for node in tree.body:
    if isinstance(node, ast.ImportFrom) and node.module == "__future__":
        flags |= __future__.annotations.compiler_flag
        continue
    try:
        exec(compile(ast.Module(body=[node], type_ignores=[]), path, "exec", flags=flags, dont_inherit=True), namespace)
    except Exception:
        pass
render = namespace.get("get_developer_agent_prompt")
if render is None:
    sys.exit("get_developer_agent_prompt is not defined in " + path)
options = dict(current_date=str(datetime.date.today()), system="Linux (in Docker)", machine="x86_64",
               is_workforce=False)
if "non_think_mode" in inspect.signature(render).parameters:
    options["non_think_mode"] = True
with open(out, "wb") as handle:
    handle.write(render(**options).encode("utf-8"))
"""

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


def read_record() -> dict:
    try:
        record = json.loads((paths.upstream_dir() / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"assets": {}}
    return record if isinstance(record.get("assets"), dict) else {"assets": {}}


def recorded_sha256(protocol: str, filename: str) -> str:
    """The hash a previous sync stored for an asset that has no published hash (the camel tool schemas)."""
    entry = read_record()["assets"].get(f"{protocol}/{filename}") or {}
    return entry.get("sha256", "") if entry.get("recorded") else ""


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


def _run(command: list[str], timeout: float, cwd: Path | None = None, say: Say | None = None) -> None:
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


def _manifest_sha256(protocol: str, filename: str) -> str:
    from oc_repl.protocols import manifests

    manifest = manifests().get(protocol)
    return manifest.upstream_sha256(filename) if manifest else ""


# --- terminus: terminal-bench's wheel -------------------------------------------------------------------------------


def fetch_terminus(say: Say) -> list[Fetched]:
    say(f"terminus: downloading {TERMINAL_BENCH} from the package index")
    with tempfile.TemporaryDirectory(prefix="oc-repl-sync-") as temp:
        # The wheel declares Python >= 3.12; only data files are read from it, so any interpreter will do.
        command = [sys.executable, "-m", "pip", "download", TERMINAL_BENCH, "--no-deps", "--ignore-requires-python"]
        try:
            _run([*command, "--only-binary=:all:", "-d", temp], timeout=600)
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
        Fetched(protocol, filename, members[member], _manifest_sha256(owner, filename), origin + member)
        for protocol, filename, member, owner in TERMINUS_FILES
    ]


# --- camel: the tool schemas from camel itself ----------------------------------------------------------------------


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
    _run([sys.executable, "-m", "venv", str(venv)], timeout=600)
    say(f"camel: installing {' '.join(CAMEL_REQUIREMENTS)}")
    _run([str(_venv_python(venv)), "-m", "pip", "install", *CAMEL_REQUIREMENTS], timeout=1800, say=say)
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
        _run([str(python), "-I", "-c", CAMEL_SCRIPT, str(out), *CAMEL_TOOLS], timeout=300, cwd=Path(temp))
        data = out.read_bytes()
    try:
        names = [tool["function"]["name"] for tool in load_tools(data)]
    except Exception as exc:  # whatever camel printed, it is not a tool list we can send
        raise SyncError(f"camel produced an unusable tool list: {exc}") from exc
    if tuple(names) != CAMEL_TOOLS:
        raise SyncError(f"camel produced the tools {names}, not {list(CAMEL_TOOLS)}")
    published = _manifest_sha256("camel-terminal-toolkit", "tools.json")
    expected = published or recorded_sha256("camel-terminal-toolkit", "tools.json")
    origin = f"{' '.join(CAMEL_REQUIREMENTS)}: FunctionTool(TerminalToolkit.<name>).get_openai_tool_schema()"
    return [Fetched("camel-terminal-toolkit", "tools.json", data, expected, origin, published=bool(published))]


# --- openclaw: the system prompt rendered by OpenClaw-RL's own function ---------------------------------------------


def raw_github_url(url: str) -> str:
    """A repository or blob address on github.com, turned into the raw file it names."""
    found = re.match(r"https?://github\.com/([^/]+)/([^/]+?)(?:\.git)?(?:/(?:blob|tree)/([^/]+)(/.*)?)?/?$", url)
    if not found:
        return url
    owner, repo, ref, rest = found.groups()
    rest = rest if rest and rest.endswith(".py") else f"{(rest or '').rstrip('/')}/{OPENCLAW_FILE}"
    return f"https://raw.githubusercontent.com/{owner}/{repo}/{ref or 'main'}{rest}"


def _download(url: str) -> bytes:
    import httpx

    try:
        response = httpx.get(url, follow_redirects=True, timeout=30)
    except httpx.HTTPError as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SyncError(f"cannot download {url}: {reason}") from exc
    if response.status_code != 200:
        raise SyncError(f"cannot download {url}: HTTP {response.status_code} {response.reason_phrase}")
    return response.content


def openclaw_source(spec: str | None) -> tuple[bytes, str]:
    """The prompts module's bytes and where they came from: a URL, a checkout, or the file itself."""
    if not spec:
        raise SyncError("the OpenClaw-RL prompt needs --openclaw-rl PATH|URL (a checkout or its prompts.py)")
    if re.match(r"https?://", spec):
        url = raw_github_url(spec)
        return _download(url), url
    path = Path(spec).expanduser()
    if path.is_dir():
        path = path / OPENCLAW_FILE
    if not path.is_file():
        raise SyncError(f"no OpenClaw-RL prompts file at {path}")
    return path.read_bytes(), str(path.resolve())


def fetch_openclaw(spec: str | None, say: Say) -> list[Fetched]:
    source, origin = openclaw_source(spec)
    say(f"openclaw: rendering get_developer_agent_prompt from {origin}")
    with tempfile.TemporaryDirectory(prefix="oc-repl-sync-") as temp:
        module, out = Path(temp) / "prompts.py", Path(temp) / "system.txt"
        module.write_bytes(source)
        try:
            _run([sys.executable, "-I", "-c", RENDER_SCRIPT, str(module), str(out)], timeout=120, cwd=Path(temp))
        except SyncError as exc:
            raise SyncError(f"could not render the prompt from {origin}: {exc}") from exc
        data = out.read_bytes()
    expected = _manifest_sha256("camel-terminal-toolkit", "system.txt")
    return [Fetched("camel-terminal-toolkit", "system.txt", data, expected, f"{origin}: get_developer_agent_prompt")]


# --- all of it ------------------------------------------------------------------------------------------------------

# What each source would store, so that a source that cannot be fetched still reports on each of its assets.
ASSETS = {
    "terminus": [f"{protocol}/{filename}" for protocol, filename, _, _ in TERMINUS_FILES],
    "camel": ["camel-terminal-toolkit/tools.json"],
    "openclaw": ["camel-terminal-toolkit/system.txt"],
}


def _fetchers(openclaw: str | None) -> Iterator[tuple[str, Callable[[Say], list[Fetched]]]]:
    yield "terminus", fetch_terminus
    yield "camel", fetch_camel
    yield "openclaw", lambda say: fetch_openclaw(openclaw, say)


def sync(only: tuple[str, ...], openclaw: str | None, force: bool, say: Say) -> Iterator[Outcome]:
    """Each source in turn; outcomes come as soon as their source is done, failures included."""
    for source, fetch in _fetchers(openclaw):
        if only and source not in only:
            continue
        if source == "openclaw" and not openclaw and not only:
            # It is Python that gets run to render the prompt: only ever from a source the user named.
            say("openclaw: skipped; give --openclaw-rl PATH|URL to render the prompt from that file")
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
