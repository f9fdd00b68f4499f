"""`python -m oc_repl.hostns --serve FD`: the host helper, started once by a client and serving it until it ends.

Starting Python and its modules costs tens of milliseconds and a verdict asks many times, so the helper starts once and
forks a child for each request: the client sends one end of a fresh socket pair over the control socket `FD`; the
child says its pid (the client kills it if it outlasts its time), reads the request (JSON, with the descriptor a
`verify` writes the verifier's output to, never passed through this program), and answers with JSON. The child does
all the request's work, entering namespaces included, so the server stays as it started. The server ends with the
client (the control socket closes, or the parent-death signal), each child with the server.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import traceback

from oc_repl.hostns import linux, ops, seal
from oc_repl.hostns.procs import HostProc

OPERATIONS = {"inspect": ops.inspect, "processes": ops.processes, "end": ops.end, "changes": ops.changes}
MAX_FDS = 4


def answer(request: dict, fds: list[int]) -> dict:
    try:
        if request["op"] == "verify":
            return seal.verify(request, HostProc(), fds[0])
        return OPERATIONS[request["op"]](request, HostProc())
    except Exception as exc:  # noqa: BLE001  said to the client, which decides what it means
        where = traceback.extract_tb(exc.__traceback__)[-1]
        return {"error": f"{type(exc).__name__}: {exc} (at {os.path.basename(where.filename)}:{where.lineno})"}


def one(conn: socket.socket, server: int) -> None:
    """A child's request, from its socket to its answer."""
    linux.prctl(linux.PR_SET_PDEATHSIG, 9)
    if os.getppid() != server:  # the server ended before the signal was set
        os._exit(1)
    conn.sendall(f"{os.getpid()}\n".encode())
    try:
        data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 20, MAX_FDS)
        chunks = [data]
        while chunk := conn.recv(1 << 20):
            chunks.append(chunk)
        reply = answer(json.loads(b"".join(chunks)), fds)
    except BaseException as exc:  # noqa: BLE001  whatever ends a request is said, not lost with the child
        reply = {"error": f"{type(exc).__name__}: {exc} ({traceback.format_exc(limit=-2).strip()[-600:]})"}
    conn.sendall(json.dumps(reply).encode())
    conn.shutdown(socket.SHUT_WR)


def serve(control: socket.socket) -> None:
    linux.prctl(linux.PR_SET_PDEATHSIG, 9)  # a client that dies takes this with it (and its children, their verifiers)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    server = os.getpid()
    while True:
        try:
            data, fds, _flags, _addr = socket.recv_fds(control, 16, 1)
        except InterruptedError:
            continue
        if not data:
            os._exit(0)
        if not fds:
            continue
        if os.fork() == 0:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # a verify waits for its verifier's status
            try:
                control.close()
                one(socket.socket(fileno=fds[0]), server)
            finally:
                os._exit(0)
        os.close(fds[0])


def main() -> None:
    if sys.argv[1:2] != ["--serve"] or len(sys.argv) != 3:
        sys.exit("usage: python -m oc_repl.hostns --serve FD (started by oc-repl)")
    serve(socket.socket(fileno=int(sys.argv[2])))


if __name__ == "__main__":
    main()
