"""A Harbor environment seen for evidence.

Where the environment is Harbor's docker environment on a daemon this process reaches, its container is found by its
compose labels and seen as oc-repl's own containers are (sandbox/docker_look.py: the daemon's change set, read by the
host helper where it can run). Anywhere else (a cloud environment) only Harbor's exec reaches it, and the change set is
what a search with the environment's own tools finds: every path whose inode changed since the sandbox opened (`find
-newerct`; the kernel sets a change time no command can set back), their kind, digests and first bytes. Those tools
are the environment's: an agent that replaced them there could hide from the search, which the evidence's `how` says.
"""

from __future__ import annotations

import base64
import os
import re
import shlex
from typing import Any

from oc_repl.errors import SandboxError
from oc_repl.integrations.harbor import shell as sh
from oc_repl.sandbox.answers import done, token, until_done
from oc_repl.types import Change, FileFacts, Look

LIMIT = 200_000  # changed paths a search lists at most
HEAD = 2048
READ_LIMIT = 4 << 20
_PRUNED = ("/proc", "/sys", "/dev", "/run")


def compose_project(session_id: str) -> str:
    """Harbor's project name for an environment's session (its rule: lower case, a leading alphanumeric, [a-z0-9_-])."""
    name = session_id.lower()
    name = name if re.match(r"^[a-z0-9]", name) else "0" + name
    return re.sub(r"[^a-z0-9_-]", "-", name)


def container_look(environment: Any) -> Look | None:
    """The docker look of a Harbor docker environment's container, where its daemon answers here; else None."""
    session = getattr(environment, "session_id", None)
    kind = environment.type() if hasattr(environment, "type") else None
    if not session or str(getattr(kind, "value", kind)) != "docker":
        return None
    try:
        import docker

        client = docker.from_env()
        labels = [f"com.docker.compose.project={compose_project(session)}", "com.docker.compose.service=main"]
        found = client.api.containers(filters={"label": labels})
    except Exception:  # noqa: BLE001  no daemon here (a remote Harbor host): the environment's own search then
        return None
    if len(found) != 1:
        return None
    from oc_repl.sandbox.docker_host import HostAccess
    from oc_repl.sandbox.docker_look import DockerLook

    attrs = client.api.inspect_container(found[0]["Id"])
    host, _why = HostAccess.find(attrs)
    return DockerLook(_call, client.api, found[0]["Id"], host)


def _call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """An Engine API call on Harbor's container; a failure is the evidence's (said, never read as clean)."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001  the docker SDK's errors and requests' alike
        raise SandboxError(f"the docker daemon did not answer about Harbor's container: {exc}") from exc


class EnvironmentLook(Look):
    """The change set as the environment's own find, stat and digests report it, since `since` (its clock)."""

    how = (
        "a search of the environment with its own tools (find, stat, sha256sum): an agent that replaced them could hide"
    )
    tells_created = False

    def __init__(self, box: sh.Scripts, since: int) -> None:
        self.box, self.since = box, since

    def _run(self, body: str) -> list[list[str]]:
        marker = token()
        script = f'M={marker}\nb() {{ printf %s "$1" | base64 -w0; }}\n{body}\necho "@@OCR:$M:done@@"'
        text = until_done(lambda: self.box.run_script(script, user="root"), marker)
        if not done(text, marker):
            raise SandboxError(f"the environment's search did not finish: {text.strip()[-300:] or 'no output'}")
        return [line.split(":") for line in re.findall(rf"^@@OCR:{marker}:([^@\n]*)@@$", text, re.M)]

    def changes(self) -> list[Change]:
        prune = " -o ".join(f"-path {shlex.quote(p)}" for p in (*_PRUNED, sh.ROOT))
        body = (
            f"find / -xdev \\( {prune} \\) -prune -o -newerct @{max(0, self.since - 1)} -print0 2>/dev/null"
            f' | head -z -n {LIMIT + 1} | while IFS= read -r -d "" p; do echo "@@OCR:$M:c:$(b "$p")@@"; done'
        )
        paths = [_unb64(fields[1]) for fields in self._run(body) if fields[0] == "c" and len(fields) > 1]
        if len(paths) > LIMIT:
            raise SandboxError(f"more than {LIMIT} paths changed: the search cannot list them all")
        return [Change(path=p, what="changed") for p in paths if p != "/"]

    def files(self, paths: list[str], digest: bool = True) -> dict[str, FileFacts]:
        if not paths:
            return {}
        each = (
            's=$(stat -c "%f %s %d %i %Y %Z" -- "$p" 2>/dev/null) || { echo "@@OCR:$M:f:$(b "$p"):-@@"; continue; }\n'
            "l=; t=; h=; m=; d=\n"
            '[ -L "$p" ] && l=$(readlink -- "$p") && t=$(readlink -f -- "$p")\n'
        )
        if digest:
            each += (
                'if [ -f "$p" ] && [ ! -L "$p" ]; then\n'
                '  h=$(sha256sum < "$p" | cut -c1-64); m=$(md5sum < "$p" | cut -c1-32)\n'
                f'  d=$(head -c {HEAD} < "$p" | base64 -w0)\nfi\n'
            )
        each += 'echo "@@OCR:$M:f:$(b "$p"):$(b "$s"):$(b "$l"):$(b "$t"):$h:$m:$d@@"'
        listed = " ".join(shlex.quote(p) for p in paths)
        found: dict[str, FileFacts] = {}
        for fields in self._run(f"for p in {listed}; do\n{each}\ndone"):
            if fields[0] != "f" or len(fields) < 2:
                continue
            path = _unb64(fields[1])
            if len(fields) < 8:
                found[path] = FileFacts(error="not found")
                continue
            mode, size, dev, ino, mtime, ctime = (_unb64(fields[2]).split() + ["0"] * 6)[:6]
            found[path] = FileFacts(
                mode=int(mode, 16),
                size=int(size),
                dev=int(dev),
                ino=int(ino),
                mtime=int(mtime) * 10**9,
                ctime=int(ctime) * 10**9,
                link=_unb64(fields[3]),
                target=_unb64(fields[4]),
                sha256=fields[5],
                md5=fields[6],
                head=base64.b64decode(fields[7]) if len(fields) > 7 else b"",
            )
        return found

    def read(self, paths: list[str]) -> dict[str, bytes | None]:
        if not paths:
            return {}
        listed = " ".join(shlex.quote(p) for p in paths)
        body = (
            f'for p in {listed}; do [ -f "$p" ] || {{ echo "@@OCR:$M:r:$(b "$p"):-@@"; continue; }}\n'
            f'echo "@@OCR:$M:r:$(b "$p"):$(head -c {READ_LIMIT} < "$p" | base64 -w0)@@"; done'
        )
        found: dict[str, bytes | None] = dict.fromkeys(paths)
        for fields in self._run(body):
            if fields[0] == "r" and len(fields) > 2:
                found[_unb64(fields[1])] = None if fields[2] == "-" else base64.b64decode(fields[2])
        return found

    def listing(self, directories: list[str]) -> dict[str, list[str] | None]:
        raise SandboxError("listing is not offered by the environment's search")


def _unb64(text: str) -> str:
    try:
        return os.fsdecode(base64.b64decode(text))
    except ValueError:
        return ""
