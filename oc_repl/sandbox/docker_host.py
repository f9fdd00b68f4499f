"""oc-repl's helper on the docker daemon's host (oc_repl/hostns), for one container: where the daemon runs on this
machine and this process is root, the verifier runs sealed from what the agent left running, and the container's
files and processes are read, listed and ended by the helper itself, not by anything the container holds.

Elsewhere (a daemon on another machine, or no root here) `HostAccess.find` says why not; the driver then takes what the
daemon alone can give (its diff, its archives) and runs the verifier unsealed.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from typing import Any

from oc_repl.errors import SandboxError
from oc_repl.sandbox.capture import CappedBuffer, OutputReader
from oc_repl.types import Change, FileFacts, Leftover

HELPER_MARGIN = 60.0  # seconds a helper may take beyond what it was asked to wait for
KEY_FIELDS = ("mode", "size", "dev", "ino", "mtime", "ctime", "sha256", "md5", "link", "target", "error")


_LAUNCHER = re.compile(r"^(?:\S*/setsid )?bash --posix -c IFS= read .* oc-repl-launch( |$)", re.S)


def _channel_part(command: str) -> bool:
    """A channel's relay, or its launcher still waiting for a command (docker_channel_sh.py), on its way through setsid
    or not."""
    return command == "cat" or bool(_LAUNCHER.match(command))


def _local_daemon() -> bool:
    host = os.environ.get("DOCKER_HOST", "")
    return not host or host.startswith("unix://")


class HostAccess:
    """The helper for the container whose first process is `pid` on this host."""

    def __init__(self, pid: int, container_id: str) -> None:
        self.pid, self.container_id = pid, container_id

    @classmethod
    def find(cls, attrs: dict[str, Any]) -> tuple[HostAccess | None, str]:
        """The helper for a running container, or None and why it cannot run here."""
        if os.geteuid() != 0:
            return None, "oc-repl does not run as root, so it cannot enter the container's namespaces itself"
        if not _local_daemon():
            return None, "the docker daemon is on another machine"
        pid = int((attrs.get("State") or {}).get("Pid") or 0)
        container_id = attrs.get("Id", "")
        try:
            with open(f"/proc/{pid}/cgroup") as f:
                mine = container_id and container_id in f.read()
        except OSError:
            mine = False
        if pid <= 0 or not mine:
            return None, "the container's processes are not this machine's (the daemon runs elsewhere)"
        return cls(pid, container_id), ""

    def _request(self, payload: dict[str, Any], timeout: float, pass_fds: tuple[int, ...] = ()) -> dict[str, Any]:
        payload = {**payload, "pid": self.pid}
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "oc_repl.hostns"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=pass_fds,
                cwd="/",
            )
        except OSError as exc:
            raise SandboxError(f"cannot start oc-repl's host helper: {exc}") from exc
        for fd in pass_fds:
            os.close(fd)
        try:
            out, err = proc.communicate(json.dumps(payload).encode(), timeout=timeout + HELPER_MARGIN)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise SandboxError(f"oc-repl's host helper did not answer within {timeout + HELPER_MARGIN:.0f} s") from None
        try:
            answer = json.loads(out or b"{}")
        except ValueError:
            answer = {}
        if not answer or "error" in answer:
            why = answer.get("error") or err.decode("utf-8", "replace").strip()[-300:] or f"exit {proc.returncode}"
            raise SandboxError(f"oc-repl's host helper failed ({payload['op']}): {why}")
        return answer

    def files(self, paths: list[str], digest: bool = True) -> dict[str, FileFacts]:
        answer = self._request({"op": "inspect", "paths": paths, "digest": digest}, timeout=120)
        found = {}
        for path, facts in answer["files"].items():
            head = base64.b64decode(facts.get("head") or "")
            found[path] = FileFacts(head=head, **{k: facts[k] for k in KEY_FIELDS if k in facts})
        return found

    def changes(self, graph: dict[str, Any]) -> list[Change] | None:
        """The change set from the container's overlay layers (None where its storage is not overlay2)."""
        data = graph.get("Data") or {}
        if graph.get("Name") != "overlay2" or not data.get("UpperDir"):
            return None
        lowers = [d for d in (data.get("LowerDir") or "").split(":") if d]
        found = self._request({"op": "changes", "upper": data["UpperDir"], "lowers": lowers}, timeout=120)
        return [Change(path=path, what=what) for path, what in found["changes"]]

    def read(self, paths: list[str]) -> dict[str, bytes | None]:
        answer = self._request({"op": "inspect", "read": paths}, timeout=120)
        return {p: (base64.b64decode(v) if v is not None else None) for p, v in answer["contents"].items()}

    def processes(self, spare: list[str], keep: frozenset[int], idle: list[int], busy: list[int]) -> list[Leftover]:
        """Every process in the container but its first one and `spare` ("pid:start"), described while all of them
        are frozen. Marked as the sandbox's own: those of `keep` and what they run under (the protocol's terminal),
        and oc-repl's channels (their servers, `idle` and `busy`) with their relay, and an idle one's launcher. A
        busy channel's launcher is the agent's command, even before it has become it."""
        found = self._request({"op": "processes", "spare": spare}, timeout=60)["processes"]
        parents = {p["pid"]: p["parent"] for p in found}
        own = {*idle, *busy} | {
            p["pid"]
            for p in found
            if (p["parent"] in idle and _channel_part(p["command"])) or (p["parent"] in busy and p["command"] == "cat")
        }
        for pid in keep:
            while pid in parents and pid not in own:
                own.add(pid)
                pid = parents[pid]
        return [
            Leftover(p["pid"], p["command"], p["cwd"], p["files"], p["threads"], p["pid"] in own, p.get("program", ""))
            for p in found
        ]

    def end(self, spare: list[str]) -> int:
        return int(self._request({"op": "end", "spare": spare}, timeout=60)["left"])

    def verify(self, job: dict[str, Any], limit: int) -> tuple[dict[str, Any], bytes, int]:
        """Run a sealed verifier job; its answer, its output (capped) and the bytes dropped from it."""
        read, write = os.pipe()
        buffer = CappedBuffer(limit)
        reader = OutputReader(lambda: os.read(read, 1 << 16), buffer, name="oc-repl-verifier")
        try:
            answer = self._request({**job, "op": "verify", "output": write}, job["timeout"], pass_fds=(write,))
        finally:
            reader.join(5.0)
            os.close(read)
        return answer, buffer.read(), buffer.dropped
