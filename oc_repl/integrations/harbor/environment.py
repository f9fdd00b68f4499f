"""A Harbor environment (docker, daytona, modal, e2b, ...) as an oc-repl sandbox.

oc-repl's loop is synchronous and runs on a worker thread; the environment's methods are coroutines of the asyncio loop
Harbor runs every trial on. `LoopBridge` (bridge.py) hands each call to that loop and waits for it on the worker,
so the loop never blocks. How a command runs detached and is looked at later is in shell.py: its own session and
process group, a timeout that kills the group, output capped when read, the exit status, background children left alone,
and a pty (util-linux `script`) for processes that need a terminal.

No Harbor import here: any object with Harbor's `exec`/`upload_file`/`upload_dir` coroutines will do.
"""

from __future__ import annotations

import base64
import contextlib
import math
import os
import posixpath
import re
import shlex
import tempfile
import time
from pathlib import Path
from typing import Any

from oc_repl.errors import Deadline, SandboxError, SandboxLost
from oc_repl.events import Isolation
from oc_repl.integrations.harbor import shell as sh
from oc_repl.integrations.harbor.bridge import LoopBridge
from oc_repl.integrations.harbor.process import WINDOW, HarborProcess
from oc_repl.sandbox import leftovers
from oc_repl.sandbox.answers import token, until_done
from oc_repl.sandbox.docker import DEFAULT_WORKDIR
from oc_repl.sandbox.docker_exec import kill_recorded
from oc_repl.sandbox.meter import CallMeter
from oc_repl.tasks import discovery
from oc_repl.types import ExecResult, Leftover, Look, OpeningAnswer, Sandbox, VerifierJob, VerifierRun

EXEC_MARGIN = 60  # Harbor's own exec timeout, a backstop over what a script itself waits
TERMINAL_ENV = {"TERM": "xterm", "PYTHONUNBUFFERED": "1"}  # as docker: gives its terminal processes


def _text(result: Any) -> str:
    return (result.stdout or "") + (result.stderr or "")


class HarborSandbox(Sandbox):
    """The Sandbox seam over a Harbor environment; its methods are called from a worker thread only."""

    def __init__(
        self,
        environment: Any,
        bridge: LoopBridge,
        *,
        directory: str,
        workdir: str,
        image_workdir: str,
        terminal: bool,
        output_limit: int = 1 << 20,
        baseline: list[str] | None = None,
        meter: CallMeter | None = None,
    ) -> None:
        self.env, self.bridge = environment, bridge
        self.meter = meter or CallMeter()  # every environment call: the setup's in `open` is the first
        self.early: OpeningAnswer | None = None  # the discovery's answer (tasks/discovery.py), when `open` took it
        self.opened_at = 0  # the environment's clock when the sandbox opened (seconds), for the evidence's search
        self.baseline = baseline or []  # "pid:starttime" of the processes that ran when the sandbox opened
        self.directory = directory
        self.workdir = workdir
        self.image_workdir = image_workdir  # where Harbor's own exec starts: the task's workdir or the image's
        self.terminal = terminal  # `script` is there to give processes a pty
        self.half = max(1, output_limit // 2)
        kind = environment.type() if hasattr(environment, "type") else type(environment).__name__
        self.spec = f"harbor:{getattr(kind, 'value', kind)}"

    @classmethod
    async def open(
        cls, environment: Any, bridge: LoopBridge, workdir: str | None = None, output_limit: int = 1 << 20
    ) -> HarborSandbox:
        """Check the environment has what the sandbox runs on and make its directory (on the loop, awaited)."""
        marker, directory, workdir = token(), f"{sh.ROOT}/{token()}", workdir or DEFAULT_WORKDIR
        # what runs now, and, where the call runs as root, the tamper probe's baseline (in the image's working
        # directory, where the verifier runs), timed inside: the call the probe would make saved
        probed, timed = discovery.script(marker + "t", None), f"@@OCR:{marker}d:$s:$EPOCHREALTIME@@"
        script = (
            f'{sh.setup(directory, workdir, marker)}\necho "@@OCR:{marker}n:$(date +%s)@@"\n'
            f"{leftovers.baseline_script(marker + 'b')}\n"
            f'if [ "$(id -u)" = 0 ]; then s=$EPOCHREALTIME; (\n{probed}\n); echo "{timed}"; fi'
        )
        meter = CallMeter()
        with meter.timed():
            answer = _text(await environment.exec(script, timeout_sec=EXEC_MARGIN + discovery.TIMEOUT))
        # what a trivial call costs, all the environment's own costs: the call, less the probe's time inside
        meter.known_latency(max(0.0, meter.seconds - sh.elapsed(answer, marker + "d")))
        fields = sh.status(answer, marker)
        if fields is None:
            raise SandboxError(f"the environment did not run oc-repl's setup: {answer.strip()[-300:]}")
        missing, pwd = fields[0].split(), ":".join(fields[1:])
        if workdir in missing:  # the agent's user may not create it (/workspace under /): root makes it theirs
            owner = getattr(environment, "default_user", None)
            make = f"mkdir -p {shlex.quote(workdir)}"
            if owner is not None:
                make += f" && chown {shlex.quote(str(owner))} {shlex.quote(workdir)}"
            with meter.timed():
                made = await environment.exec(make, user="root", timeout_sec=EXEC_MARGIN)
            if made.return_code == 0:
                missing.remove(workdir)
        needed = [name for name in missing if name != "script"]
        if needed:
            raise SandboxError(
                f"the environment lacks {', '.join(needed)}, which oc-repl's Harbor sandbox runs commands with",
                hint="use an image with bash, coreutils and util-linux (any Debian or Ubuntu image has them)",
            )
        opened = cls(
            environment,
            bridge,
            directory=directory,
            workdir=workdir,
            image_workdir=pwd or "/",
            terminal="script" not in missing,
            output_limit=output_limit,
            baseline=leftovers.parse_baseline(answer, marker + "b"),
            meter=meter,
        )
        if f"@@OCR:{marker}t:" in answer:
            opened.early = OpeningAnswer(opened.image_workdir, marker + "t", answer)
        clock = re.search(rf"@@OCR:{marker}n:(\d+)@@", answer)
        opened.opened_at = int(clock.group(1)) if clock else 0
        return opened

    def isolation(self) -> Isolation:
        """Harbor's environment holds the commands in, with the task's network policy and limits."""
        policy = getattr(self.env, "network_policy", None)  # Harbor's object: older versions have none
        mode = str(getattr(getattr(policy, "network_mode", None), "value", ""))
        return Isolation(confinement="harbor", network="none" if mode == "no-network" else mode, limits="harbor")

    def look(self) -> Look | None:
        """Harbor's docker environment's container through its daemon, where this process reaches it; else a search
        of the environment with its own tools (integrations/harbor/look.py)."""
        from oc_repl.integrations.harbor.look import EnvironmentLook, container_look

        return container_look(self.env) or EnvironmentLook(self, self.opened_at)

    def opening_answer(self, name: str) -> OpeningAnswer | None:
        found, self.early = (self.early, None) if name == discovery.BASELINE else (None, self.early)
        return found  # once: a later baseline (another attempt) is taken anew

    def call_latency(self) -> float:
        return self.meter.latency(lambda: self.run_script(":"))  # known from the setup exec

    def calls(self) -> tuple[int, float]:
        return self.meter.totals()

    # --- plumbing ----------------------------------------------------------------------------------------------

    def _call(self, make: Any) -> Any:
        """One environment call, counted."""
        with self.meter.timed():
            return self.bridge.call(make)

    def run_script(self, script: str, wait: float = 0.0, user: str | None = None) -> str:
        """One exec of one of our scripts; what it printed. A failed exec is a SandboxError."""
        timeout = math.ceil(wait) + EXEC_MARGIN
        try:
            result = self._call(lambda: self.env.exec(script, timeout_sec=timeout, user=user))
        except (SandboxError, Deadline):
            raise
        except Exception as exc:  # whatever the environment raises: Harbor's exec timeout, a lost connection
            raise SandboxError(f"the environment's exec failed: {exc}") from exc
        return _text(result)

    def run_own(self, script: str, timeout: float, cwd: str | None = None, user: str | None = None) -> bytes:
        # one exec, without the detached runner a command gets: each process it spawns costs on a loaded machine;
        # in the sandbox's workdir, or / once the model removed it (a script given a directory needs that one)
        where = f"cd -- {shlex.quote(cwd)} || exit 1" if cwd else f"cd -- {shlex.quote(self.workdir)} || cd /"
        text = self.run_script(f"exec 2>&1\nexport TERM=dumb\n{where}\n{script}", timeout, user)
        return text.encode("utf-8", "surrogatepass")

    def report(self, script: str, marker: str, wait: float = 0.0, user: str | None = None) -> sh.Report:
        text = self.run_script(script, wait, user)
        found = sh.parse(text, marker)
        if found is None:
            raise SandboxLost(f"the environment did not run the command: {text.strip()[-300:] or 'no output'}")
        if found.state == "nocwd":
            raise SandboxError("the working directory does not exist in the environment")
        return found

    def _abs(self, path: str) -> str:
        return path if posixpath.isabs(path) else posixpath.join(self.workdir, path)

    def _upload(self, data: bytes, target: str) -> None:
        with tempfile.NamedTemporaryFile(prefix="oc-repl-", delete=False) as tmp:
            tmp.write(data)
        try:
            os.chmod(tmp.name, 0o644)  # readable by whichever user the environment runs commands as
            self._call(lambda: self.env.upload_file(tmp.name, target))
        except (SandboxError, Deadline):
            raise
        except Exception as exc:
            raise SandboxError(f"cannot copy into the environment: {exc}") from exc
        finally:
            os.unlink(tmp.name)

    # --- the Sandbox seam --------------------------------------------------------------------------------------

    def spawn(
        self,
        command: str,
        tty: bool = True,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
        wait: float = 0.0,
    ) -> HarborProcess:
        if "\0" in command:  # no process takes one in an argument; the script's decoding would drop it and run the rest
            raise SandboxError(f"cannot start a command in {cwd or self.workdir}: embedded null byte")
        if tty and not self.terminal:
            raise SandboxError(
                "the environment has no `script` (util-linux) to give the process a terminal",
                hint="install util-linux (bsdutils) in the image, or use blocking commands",
            )
        path, marker, wait = f"{self.directory}/{token()}", token(), min(max(wait, 0.0), WINDOW)
        data = command.encode("utf-8", "surrogateescape" if sh.escapable(command) else "surrogatepass")
        inline = len(data) <= sh.INLINE_COMMAND
        if not inline:
            self.run_script(f"mkdir -p {self.directory}")
            self._upload(data, f"{path}.cmd")
        base = TERMINAL_ENV if tty else {"TERM": "dumb"}
        script = sh.start(
            path,
            marker,
            command=data if inline else None,
            cwd=cwd or self.workdir,
            env={**base, **(env or {})},
            tty=tty,
            wait=wait,
            half=self.half,
        )
        try:
            return HarborProcess(self, path, tty, self.report(script, marker, wait, user))
        except KeyboardInterrupt:  # the agent was stopped while its start waited for the end: the command stops too
            with contextlib.suppress(SandboxError):
                HarborProcess(self, path, tty, sh.Report("running", None, 0)).kill()
            raise

    def exec(self, command: str, timeout: float, cwd: str | None = None, user: str | None = None) -> ExecResult:
        started = time.monotonic()
        proc = self.spawn(command, tty=False, cwd=cwd, user=user, wait=max(timeout, 0.0))
        timed_out = not proc.wait(timeout - (time.monotonic() - started))
        if timed_out:
            proc.kill()
        output = proc.read_available()
        return ExecResult(output, None if timed_out else proc.exit_code, timed_out, proc.dropped)

    def write_file(self, path: str, data: bytes) -> None:
        target, marker = self._abs(path), token()
        q = shlex.quote
        if len(data) <= sh.INLINE_COMMAND:
            fill = f"echo {base64.b64encode(data).decode()} | base64 -d > {q(target)}"
        else:
            staged = f"{self.directory}/{token()}.data"
            self.run_script(f"mkdir -p {self.directory}")
            self._upload(data, staged)
            fill = f"cat {q(staged)} > {q(target)} && rm -f {q(staged)}"
        # run as the agent's user, so the file is theirs, as one a command of theirs wrote
        script = f"M={marker}; {{ mkdir -p -- {q(posixpath.dirname(target))} && {fill}; }} 2>&1 && echo @@OCR:$M:ok@@"
        text = self.run_script(script)
        if sh.status(text, marker) != ["ok"]:
            raise SandboxError(f"cannot write {path}: {text.strip()[-300:] or 'failed'}")

    def read_file(self, path: str) -> bytes:
        marker = token()
        script = f"M={marker}; base64 < {shlex.quote(self._abs(path))} 2>&1 && echo @@OCR:$M:ok@@"
        text = self.run_script(script)
        if sh.status(text, marker) != ["ok"]:
            raise SandboxError(f"cannot read {path}: {text.strip()[-300:]}")
        return base64.b64decode("".join(text[: text.rindex("@@OCR:")].split()))

    def put(self, src: Path, dest: str) -> None:
        target = self._abs(dest)
        upload = self.env.upload_dir if src.is_dir() else self.env.upload_file
        try:
            self._call(lambda: upload(src, target))
        except (SandboxError, Deadline):
            raise
        except Exception as exc:
            raise SandboxError(f"cannot copy {src} into the environment: {exc}") from exc

    def agent_processes(self, keep: frozenset[int] = frozenset()) -> list[Leftover]:
        """What runs in the environment but what ran when the sandbox opened (pid 1 and the environment's own
        machinery) and this sandbox's own runners, listed in one exec and left running (Harbor's verifier runs beside
        them, as it does for its own agents)."""
        marker = token()
        script = leftovers.script(marker, stop=False, keep=keep, baseline=self.baseline)
        found = leftovers.parse(until_done(lambda: self.run_script(script, user="root"), marker), marker)
        return [left for left in found if not sh.runs_a_command(left.command, self.directory)]

    def run_verifier(self, job: VerifierJob) -> VerifierRun:
        """Only Harbor's own verifier judges its environment; one of oc-repl's there shares it with everything."""
        from oc_repl.sandbox.unsealed import run_unsealed

        return run_unsealed(self, job)

    def stop_script(self, marker: str) -> str:
        return leftovers.script(marker, stop=True, baseline=self.baseline)

    def close(self) -> None:
        """Kill whatever every command of this sandbox left running, then remove its directory: for a run whose
        sandbox is not handed to Harbor's verifier (a run of its own, a test); the agent leaves it running for that."""
        with contextlib.suppress(SandboxError):
            self.run_script(self.close_script())

    def close_script(self) -> str:
        return sh.close(self.directory, kill_recorded('"$p"'))

    async def aclose(self) -> None:
        """`close` from the loop itself, for when the worker could not be waited for, which never returned: every
        process it started is stopped too (a stuck run's processes are no solution Harbor's verifier should see)."""
        with contextlib.suppress(Exception):
            script = f"{self.stop_script(token())}\n{self.close_script()}"
            await self.env.exec(script, user="root", timeout_sec=EXEC_MARGIN)
