"""`python -m oc_repl.hostns`: one request (JSON on stdin), one answer (JSON on stdout). The verifier's output, for a
`verify` request, goes to the descriptor the request names, never through this program."""

from __future__ import annotations

import json
import os
import sys
import traceback

from oc_repl.hostns import linux, ops, seal
from oc_repl.hostns.procs import HostProc

OPERATIONS = {"inspect": ops.inspect, "processes": ops.processes, "end": ops.end, "changes": ops.changes}


def main() -> None:
    request = json.loads(sys.stdin.buffer.read())
    linux.prctl(linux.PR_SET_PDEATHSIG, 9)  # a client that dies takes this with it (its verifier ends with it)
    proc = HostProc()
    try:
        if request["op"] == "verify":
            answer = seal.verify(request, proc, request.pop("output"))
        else:
            answer = OPERATIONS[request["op"]](request, proc)
    except Exception as exc:  # noqa: BLE001  said to the client, which decides what it means
        where = traceback.extract_tb(exc.__traceback__)[-1]
        answer = {"error": f"{type(exc).__name__}: {exc} (at {os.path.basename(where.filename)}:{where.lineno})"}
    sys.stdout.write(json.dumps(answer))
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
