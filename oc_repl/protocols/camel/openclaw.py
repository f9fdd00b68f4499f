"""The openclaw source: OpenClaw-RL's terminal-rl, from a source the user names: the system prompt rendered by its own
function, and the harness's texts (agent.toml) read out of its own code.

The harness's texts are f-strings: how a failed or unknown tool call came back (terminal-rl/remote/terminal_env.py,
`exec_tool`) and the feedback to a tool-call block whose JSON did not parse (terminal-rl/agent/camel_agent.py,
`adetect_tool_calls_parse_error`). They are read with `ast`, never run: each f-string's literal parts become the
template's text and each of its expressions a field, found by what the expression is (the exception, its type's name,
the tool's name, the first 200 characters of the block).
"""

from __future__ import annotations

import ast
import re
import sys
import tempfile
from pathlib import Path

from oc_repl.errors import UsageError
from oc_repl.protocols.sync import Fetched, Say, SyncError, manifest_sha256, run, sha256
from oc_repl.protocols.templates import dump, parse

OPENCLAW_FILE = Path("terminal-rl/agent/prompts.py")
AGENT_FILE = Path("terminal-rl/agent/camel_agent.py")
ENV_FILE = Path("terminal-rl/remote/terminal_env.py")
# With no source named, the sync fetches these three files of OpenClaw-RL at this commit, each checked against its
# sha256 before anything of it is run or read: a mirror serves the same files under its own address.
OPENCLAW_REPOSITORY = "https://raw.githubusercontent.com/Gen-Verse/OpenClaw-RL"
OPENCLAW_COMMIT = "0d034dd5e65399fc1cc7c266feb9eddbb4c8c3a5"
PINNED_SHA256 = {
    OPENCLAW_FILE: "d0e1bce0a0774bd82437cc75bb63bcc95cc236e2a285bcca482234c21de8e9ce",
    AGENT_FILE: "3f13e8f6ef4e7cf9359ce6fce0fdc470196f4c043cac848dc7932f3fdf515eb6",
    ENV_FILE: "f1c33283d931c9c125faf1dbed9aa6f8561ef3a64104111040dd676841959e85",
}
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


def raw_github_url(url: str, file: Path = OPENCLAW_FILE) -> str:
    """A repository or blob address on github.com, turned into the raw file it names (`file` of a repository)."""
    found = re.match(r"https?://github\.com/([^/]+)/([^/]+?)(?:\.git)?(?:/(?:blob|tree)/([^/]+)(/.*)?)?/?$", url)
    if not found:
        return url
    owner, repo, ref, rest = found.groups()
    rest = rest if rest and rest.endswith(".py") else f"{(rest or '').rstrip('/')}/{file}"
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


def pinned_sources(mirror: str | None = None) -> tuple[dict[Path, bytes], str]:
    """The three files at the pinned commit, from the repository host or `mirror` (an address under which
    `terminal-rl/...` is found), each refused unless its sha256 is the pinned one: nothing else is ever run."""
    base = (mirror or f"{OPENCLAW_REPOSITORY}/{OPENCLAW_COMMIT}").rstrip("/")
    files = {}
    for name, expected in PINNED_SHA256.items():
        url = f"{base}/{name}"
        data = _download(url)
        if sha256(data) != expected:
            raise SyncError(
                f"{url} is not OpenClaw-RL's file at {OPENCLAW_COMMIT[:12]}: sha256 {sha256(data)}, "
                f"expected {expected}; nothing of it was run"
            )
        files[name] = data
    return files, f"{base} (OpenClaw-RL {OPENCLAW_COMMIT[:12]}, sha256 checked)"


def openclaw_sources(spec: str | None, mirror: str | None = None) -> tuple[dict[Path, bytes], str]:
    """The files of terminal-rl the sync reads and where they came from: with no `spec` the pinned files, fetched; a
    checkout or a repository address gives all three; a file, or an address of one, gives the prompts module alone."""
    if not spec:
        return pinned_sources(mirror)
    if re.match(r"https?://", spec):
        url = raw_github_url(spec)
        files = {OPENCLAW_FILE: _download(url)}
        if url != spec and not spec.endswith(".py"):  # a repository: its other files sit beside the prompts module
            files.update({name: _download(raw_github_url(spec, name)) for name in (AGENT_FILE, ENV_FILE)})
        return files, url
    path = Path(spec).expanduser()
    if path.is_dir():
        files = {name: path / name for name in (OPENCLAW_FILE, AGENT_FILE, ENV_FILE)}
        if not files[OPENCLAW_FILE].is_file():
            raise SyncError(f"no OpenClaw-RL prompts file at {files[OPENCLAW_FILE]}")
        return {name: file.read_bytes() for name, file in files.items() if file.is_file()}, str(path.resolve())
    if not path.is_file():
        raise SyncError(f"no OpenClaw-RL prompts file at {path}")
    return {OPENCLAW_FILE: path.read_bytes()}, str(path.resolve())


def fetch_openclaw(spec: str | None, say: Say, mirror: str | None = None) -> list[Fetched]:
    from oc_repl.protocols.camel.protocol import AGENT_SPEC

    if not spec:
        say(
            f"openclaw: fetching {len(PINNED_SHA256)} files of OpenClaw-RL at {OPENCLAW_COMMIT[:12]}"
            f" from {mirror or OPENCLAW_REPOSITORY}"
        )
    files, origin = openclaw_sources(spec, mirror)
    say(f"openclaw: rendering get_developer_agent_prompt from {origin}")
    with tempfile.TemporaryDirectory(prefix="oc-repl-sync-") as temp:
        module, out = Path(temp) / "prompts.py", Path(temp) / "system.txt"
        module.write_bytes(files[OPENCLAW_FILE])
        try:
            run([sys.executable, "-I", "-c", RENDER_SCRIPT, str(module), str(out)], timeout=120, cwd=Path(temp))
        except SyncError as exc:
            raise SyncError(f"could not render the prompt from {origin}: {exc}") from exc
        data = out.read_bytes()
    expected = manifest_sha256("camel-terminal-toolkit", "system.txt")
    fetched = [Fetched("camel-terminal-toolkit", "system.txt", data, expected, f"{origin}: get_developer_agent_prompt")]
    if AGENT_FILE not in files or ENV_FILE not in files:
        say(f"openclaw: agent.toml needs a checkout holding {AGENT_FILE} and {ENV_FILE}; not derived")
        return fetched
    say(f"openclaw: reading the harness's texts from {AGENT_FILE} and {ENV_FILE}")
    agent = dump({**tool_texts(files[ENV_FILE], str(ENV_FILE)), **parse_error_text(files[AGENT_FILE], str(AGENT_FILE))})
    try:
        parse(agent, AGENT_SPEC, "agent.toml")
    except UsageError as exc:
        raise SyncError(f"the harness's texts do not make the templates oc-repl needs: {exc}") from exc
    expected = manifest_sha256("camel-terminal-toolkit", "agent.toml")
    origin = f"{origin}: f-strings of exec_tool and adetect_tool_calls_parse_error"
    return [*fetched, Fetched("camel-terminal-toolkit", "agent.toml", agent, expected, origin)]


# --- the harness's texts, read out of its f-strings --------------------------------------------------------------


def _function(source: bytes, where: str, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef:
    try:
        tree = ast.parse(source, where)
    except (SyntaxError, ValueError) as exc:
        raise SyncError(f"{where} is not Python that can be read: {exc}") from exc
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
            return node
    raise SyncError(f"{where} defines no {name}()")


def _template(joined: ast.JoinedStr, fields: dict[str, str], where: str) -> str:
    """An f-string as a template: its literal text with braces doubled, `{field}` for each expression."""
    parts = []
    for value in joined.values:
        if isinstance(value, ast.Constant):
            parts.append(str(value.value).replace("{", "{{").replace("}", "}}"))
            continue
        assert isinstance(value, ast.FormattedValue)
        expression = ast.unparse(value.value)
        if expression not in fields or value.conversion != -1 or value.format_spec is not None:
            raise SyncError(f"{where}: the f-string field {{{expression}}} is not one oc-repl knows how to fill")
        parts.append("{" + fields[expression] + "}")
    return "".join(parts)


def tool_texts(source: bytes, where: str) -> dict[str, str]:
    """unknown_tool and tool_error: the f-strings exec_tool returns, for a name it lacks and in its except clause."""
    function = _function(source, where, "exec_tool")
    tool = function.args.args[1].arg  # (self, name, arguments)
    texts = {}
    for handler in [n for n in ast.walk(function) if isinstance(n, ast.ExceptHandler) and n.name]:
        exc = handler.name
        fields = {tool: "name", f"type({exc}).__name__": "type", exc: "message", f"str({exc})": "message"}
        for node in ast.walk(handler):
            if isinstance(node, ast.Return) and isinstance(node.value, ast.JoinedStr):
                texts.setdefault("tool_error", _template(node.value, fields, where))
    inside = {id(n) for h in ast.walk(function) if isinstance(h, ast.ExceptHandler) for n in ast.walk(h)}
    for node in ast.walk(function):
        if isinstance(node, ast.Return) and isinstance(node.value, ast.JoinedStr) and id(node) not in inside:
            texts.setdefault("unknown_tool", _template(node.value, {tool: "name"}, where))
    if set(texts) != {"tool_error", "unknown_tool"}:
        raise SyncError(f"{where}: exec_tool does not return the two error texts oc-repl expects")
    return texts


def parse_error_text(source: bytes, where: str) -> dict[str, str]:
    """parse_error: the message adetect_tool_calls_parse_error builds for the first block whose JSON fails."""
    function = _function(source, where, "adetect_tool_calls_parse_error")
    for loop in [n for n in ast.walk(function) if isinstance(n, ast.For) and isinstance(n.target, ast.Name)]:
        block = loop.target.id
        for handler in [n for n in ast.walk(loop) if isinstance(n, ast.ExceptHandler) and n.name]:
            exc = handler.name
            fields = {exc: "error", f"str({exc})": "error", f"{block}[:200]": "content"}
            for node in ast.walk(handler):
                named = isinstance(node, ast.Assign) and any(
                    getattr(t, "id", "") == "error_message" for t in node.targets
                )
                if named and isinstance(node.value, ast.JoinedStr):
                    return {"parse_error": _template(node.value, fields, where)}
    raise SyncError(f"{where}: adetect_tool_calls_parse_error builds no error_message f-string")
