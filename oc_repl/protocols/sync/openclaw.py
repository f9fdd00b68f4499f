"""The openclaw source: OpenClaw-RL's terminal-rl, rendered with its own functions, from a source the user names."""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

from oc_repl.protocols.sync import Fetched, Say, SyncError, manifest_sha256, run

OPENCLAW_FILE = Path("terminal-rl/agent/prompts.py")
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
            run([sys.executable, "-I", "-c", RENDER_SCRIPT, str(module), str(out)], timeout=120, cwd=Path(temp))
        except SyncError as exc:
            raise SyncError(f"could not render the prompt from {origin}: {exc}") from exc
        data = out.read_bytes()
    expected = manifest_sha256("camel-terminal-toolkit", "system.txt")
    return [Fetched("camel-terminal-toolkit", "system.txt", data, expected, f"{origin}: get_developer_agent_prompt")]
