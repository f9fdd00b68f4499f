"""The end of an agent's turn at a task, judged: what it left running is listed (never stopped: the verifier runs
beside it, as the task formats' own harnesses run theirs), the evidence is taken before the verifier and after it,
and when the run is over everything the agent left ends (after the verifier, not before).

One judge per sandbox: its evidence's base is taken when the sandbox opens, before the agent's first command.
"""

from __future__ import annotations

from oc_repl.errors import SandboxError, SandboxLost
from oc_repl.events import Error, Finding, VerifyCompleted
from oc_repl.tasks.evidence import Evidence, Snapshot, process_findings
from oc_repl.tasks.verify import Verifier
from oc_repl.types import Emit, Sandbox


class Judge:
    def __init__(self, sandbox: Sandbox, evidence: Evidence, emit: Emit) -> None:
        self.sandbox, self.evidence, self.emit = sandbox, evidence, emit

    @classmethod
    def opened(cls, sandbox: Sandbox, cwd: str, emit: Emit) -> Judge:
        """`cwd`: where the verifier will run (the tests' working directory); the sandbox's own working directory is
        the agent's workspace."""
        return cls(sandbox, Evidence.opened(sandbox, cwd, sandbox.workdir, emit), emit)

    def _snapshot(self) -> Snapshot | None:
        try:
            return self.evidence.snapshot()
        except SandboxLost:
            raise
        except SandboxError as exc:
            self.emit(Error(kind="tamper_probe", message=f"the evidence could not be taken: {exc.message}"))
            return None

    def _files(self, before: Snapshot | None, after: Snapshot | None, run: object) -> tuple[list[Finding], str]:
        if before is None or self.evidence.look is None:
            return [], self.evidence.how if self.evidence.look is None else "unavailable: the look failed"
        return self.evidence.findings(before, after, run), self.evidence.how  # type: ignore[arg-type]

    def verify(self, verifier: Verifier, keep: frozenset[int], final: bool) -> VerifyCompleted:
        """The verifier's verdict with the evidence. In the `final` verdict of a sandbox everything the agent left ends
        after the verifier; mid-conversation (the shell) it goes on running, and the sandbox as the verdict leaves it
        becomes the base of the next one."""
        left = self.sandbox.agent_processes(keep)
        before = self._snapshot()
        result, run = verifier.run(self.sandbox)
        after = None
        if final:
            survivors = self.sandbox.end_agent_processes()
            if survivors:
                message = f"{survivors} processes the agent left could not be ended after the verifier"
                self.emit(Error(kind="sandbox", message=message))
            after = self._snapshot() if before is not None else None
        files, how = self._files(before, after, run)
        result.findings = [*process_findings(left, final), *files, *result.findings]
        result.evidence = how
        if not final:
            try:
                self.evidence.rebase()
            except SandboxError as exc:
                self.emit(Error(kind="tamper_probe", message=f"the evidence's next base could not be taken: {exc}"))
        return result

    def for_harness(self, keep: frozenset[int]) -> list[Finding]:
        """The evidence where a harness's own verifier judges next (Harbor's): what the agent left (it goes on running
        into that verifier) and what it changed, seen now."""
        left = self.sandbox.agent_processes(keep)
        files, _how = self._files(self._snapshot(), None, None)
        return [*process_findings(left, True), *files]
