"""A verifier run where the sandbox cannot seal it: its directories emptied and its files written in the sandbox's
shared filesystem, its command run through `exec`, beside everything the agent left running, which can reach all of it
(VerifierRun.sealed is False). The evidence counts what the agent did to those places (tasks/evidence.py)."""

from __future__ import annotations

import shlex

from oc_repl.errors import SandboxError
from oc_repl.types import ExecResult, Sandbox, VerifierJob, VerifierRun

SETUP_TIMEOUT = 60.0


def run_unsealed(sandbox: Sandbox, job: VerifierJob) -> VerifierRun:
    q = shlex.quote
    if job.private:
        dirs = " ".join(q(d) for d in job.private)
        sandbox.exec(f"rm -rf {dirs} && mkdir -p {dirs} && chmod 0777 {dirs}", timeout=SETUP_TIMEOUT, user="root")
    for path, data, _mode in job.files:
        sandbox.write_file(path, data)
    modes = "; ".join(f"chmod {mode:o} {q(path)}" for path, _data, mode in job.files)
    if modes:
        sandbox.exec(modes, timeout=SETUP_TIMEOUT, user="root")
    env = " ".join(f"{k}={q(v)}" for k, v in job.env.items())
    command = f"export {env}; {job.command}" if env else job.command
    result: ExecResult = sandbox.exec(command, timeout=job.timeout, cwd=job.cwd or None, user=job.user or None)
    collected: dict[str, bytes | None] = {}
    for path in [*job.collect, *([job.record] if job.record else [])]:
        try:
            collected[path] = sandbox.read_file(path)
        except SandboxError:
            collected[path] = None
    return VerifierRun(
        output=result.output,
        exit_code=result.exit_code,
        timed_out=result.timed_out,
        dropped=result.dropped,
        collected=collected,
        records=collected.get(job.record) or b"" if job.record else b"",
    )
