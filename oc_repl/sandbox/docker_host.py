"""oc-repl's helper on the docker daemon's host (oc_repl/hostns), for one container: where the daemon runs on this
machine and this process is root, the verifier runs sealed from what the agent left running, and the container's
files and processes are read, listed and ended by the helper itself, not by anything the container holds.

Elsewhere (a daemon on another machine, or no root here) `HostAccess.find` says why not; the driver then takes what the
daemon alone can give (its diff, its archives) and runs the verifier unsealed.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any

from oc_repl.errors import SandboxError
from oc_repl.sandbox.capture import CappedBuffer, OutputReader
from oc_repl.types import Change, FileFacts, Leftover

HELPER_MARGIN = 60.0  # seconds a helper may take beyond what it was asked to wait for
KEY_FIELDS = ("mode", "size", "dev", "ino", "mtime", "ctime", "sha256", "md5", "link", "target", "error")


def _local_daemon() -> bool:
    host = os.environ.get("DOCKER_HOST", "")
    return not host or host.startswith("unix://")


class HelperServer:
    """The client's one host helper (`python -m oc_repl.hostns --serve`), started at the first request from a thread
    of its own that lives as long as the client: the helper ends with the thread that started it (its parent-death
    signal), so no request's thread may be that one. A helper that ended is started again at the next request."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._control: socket.socket | None = None

    def _started(self) -> socket.socket:
        with self._lock:
            if self._control is not None:
                return self._control
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)  # one message a request
            started: queue.Queue[BaseException | None] = queue.Queue()

            def keep() -> None:
                try:
                    proc = subprocess.Popen(
                        [sys.executable, "-m", "oc_repl.hostns", "--serve", str(theirs.fileno())],
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                        pass_fds=(theirs.fileno(),),
                        cwd="/",
                    )
                except OSError as exc:
                    started.put(exc)
                    return
                finally:
                    theirs.close()
                started.put(None)
                proc.wait()
                with self._lock:
                    if self._control is ours:
                        self._control = None
                ours.close()

            threading.Thread(target=keep, name="oc-repl-host-helper", daemon=True).start()
            failed = started.get()
            if failed is not None:
                ours.close()
                raise SandboxError(f"cannot start oc-repl's host helper: {failed}")
            self._control = ours
            return ours

    def request(self, payload: dict[str, Any], timeout: float, pass_fds: tuple[int, ...] = ()) -> dict[str, Any]:
        conn, theirs = socket.socketpair()
        try:
            try:
                for attempt in (1, 2):  # a helper that ended meanwhile is started again, once
                    control = self._started()
                    try:
                        socket.send_fds(control, [b"r"], [theirs.fileno()])
                        break
                    except OSError:
                        with self._lock:
                            if self._control is control:
                                self._control = None
                        if attempt == 2:
                            raise
            finally:
                theirs.close()
            deadline = time.monotonic() + timeout
            conn.settimeout(timeout)
            data = json.dumps(payload).encode()
            socket.send_fds(conn, [data[:1]], list(pass_fds))  # the descriptors with the first byte, then the rest
            conn.sendall(data[1:])
            conn.shutdown(socket.SHUT_WR)
            return self._answer(conn, payload["op"], deadline)
        except OSError as exc:
            raise SandboxError(f"oc-repl's host helper failed ({payload['op']}): {exc}") from exc
        finally:
            for fd in pass_fds:
                os.close(fd)
            conn.close()

    @staticmethod
    def _answer(conn: socket.socket, op: str, deadline: float) -> dict[str, Any]:
        data, pid = bytearray(), 0
        try:
            while True:
                conn.settimeout(max(0.001, deadline - time.monotonic()))
                chunk = conn.recv(1 << 20)
                if not chunk:
                    break
                data += chunk
                if not pid and b"\n" in data:  # the child's pid comes first, at once
                    head, _, rest = bytes(data).partition(b"\n")
                    pid, data = int(head), bytearray(rest)
        except TimeoutError:
            if pid:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            raise SandboxError(f"oc-repl's host helper ({op}) did not answer in time") from None
        try:
            answer = json.loads(data) if pid else {}
        except ValueError:
            answer = {}
        if not answer or "error" in answer:
            why = answer.get("error") or ("it ended without an answer" if pid else "it ended before it began")
            raise SandboxError(f"oc-repl's host helper failed ({op}): {why}")
        return answer


HELPER = HelperServer()


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
        """The helper's answer to one request; `pass_fds` go with it (and are closed here)."""
        return HELPER.request({**payload, "pid": self.pid}, timeout + HELPER_MARGIN, pass_fds)

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

    def processes(
        self, spare: list[str], keep: frozenset[int], servers: list[int], commands: list[str], started: list[str]
    ) -> list[Leftover]:
        """Every process in the container but its first one and `spare` ("pid:start"), described while all of them
        are frozen. Marked as the sandbox's own: those of `keep` and what they run under (the protocol's terminal),
        and oc-repl's channels: their `servers` and the servers' children but the launchers of the `commands` they run
        ("pid:start": a launcher becomes the agent's command), whatever any of them calls itself. The commands of
        `started` (their pid files) the daemon may still be starting are waited for."""
        found = self._request({"op": "processes", "spare": spare, "started": started}, timeout=60)["processes"]
        parents = {p["pid"]: p["parent"] for p in found}
        own = set(servers) | {
            p["pid"] for p in found if p["parent"] in servers and f"{p['pid']}:{p['start']}" not in commands
        }
        for pid in keep:
            while pid in parents and pid not in own:
                own.add(pid)
                pid = parents[pid]
        return [
            Leftover(p["pid"], p["command"], p["cwd"], p["files"], p["threads"], p["pid"] in own, p.get("program", ""))
            for p in found
        ]

    def end(self, spare: list[str], started: list[str]) -> int:
        return int(self._request({"op": "end", "spare": spare, "started": started}, timeout=60)["left"])

    def verify(self, job: dict[str, Any], limit: int) -> tuple[dict[str, Any], bytes, int]:
        """Run a sealed verifier job; its answer, its output (capped) and the bytes dropped from it."""
        read, write = os.pipe()
        buffer = CappedBuffer(limit)
        reader = OutputReader(lambda: os.read(read, 1 << 16), buffer, name="oc-repl-verifier")
        try:
            answer = self._request({**job, "op": "verify"}, job["timeout"], pass_fds=(write,))
        finally:
            reader.join(5.0)
            os.close(read)
        return answer, buffer.read(), buffer.dropped
