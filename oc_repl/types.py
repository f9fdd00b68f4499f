"""The shapes that cross the three seams: client -> protocol -> sandbox.

Kept thin on purpose: a protocol knows nothing about the server, a sandbox nothing about protocols,
and the loop (agent.py) nothing about either by name. Every capability a seam may offer is a member of its Protocol,
with the default of an implementation that lacks it: drivers and protocols inherit `Sandbox` and `AgentProtocol`,
so nothing is probed for.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field
from pathlib import Path
from typing import Any, Literal, NamedTuple, Protocol

from oc_repl.events import Isolation
from oc_repl.record import Record, record

Message = dict[str, Any]  # an OpenAI chat message exactly as it goes on the wire


@record()
class Task(Record):
    """A task as the model is given it."""

    name: str
    instruction: str


@record()
class ToolCall(Record):
    """One tool call of a reply, native or salvaged from its text."""

    id: str
    name: str
    arguments: dict[str, Any]
    source: Literal["native", "salvaged"] = "native"


@record()
class Usage(Record):
    """Token counts as the server reported them."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


@record()
class Reply(Record):
    """What the client hands the protocol, whatever shape the server used."""

    content: str = ""  # leading think block removed; "" when the server sent none
    reasoning: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    malformed_calls: list[str] = field(default_factory=list)  # <tool_call> blocks whose JSON did not parse
    # the calls (as written) whose arguments were no JSON object: a JSON string holding one, null, a list, a number
    non_object_calls: list[str] = field(default_factory=list)
    finish_reason: str = ""
    truncated: bool = False  # cut by the token cap, or call arguments that do not parse: never executed
    cut_off: bool = False  # the token cap ended it (finish_reason "length", or every allowed token spent)
    usage: Usage | None = None
    raw: dict[str, Any] = field(default_factory=dict)  # the exact response, or the accumulated stream
    raw_content: str = ""  # content exactly as received (think block included), for history modes that keep it
    ttft_s: float | None = None  # time to the first streamed token
    duration_s: float = 0.0  # the attempt that answered
    attempts_s: list[float] = field(default_factory=list)  # every attempt's seconds, failed ones first
    request_s: float = 0.0  # the whole request: every attempt and the waits between them


@record()
class Asset(Record):
    """A piece of protocol data whose exact bytes reach the model (prompt, tool list, template)."""

    name: str
    sha256: str
    source: str  # "built-in" | "upstream" | "user"
    path: str = ""


@record()
class Request(Record):
    """What a protocol asks the client to send."""

    messages: list[Message]
    options: dict[str, Any]  # tools, tool_choice, extra_body, stop ... merged into the chat call


@record()
class Step(Record):
    """The outcome of one model turn, as the protocol judged it."""

    done: bool = False  # the episode ends here (the protocol's own rule)
    final_answer: str = ""
    fingerprint: str = ""  # actions + observations of this turn; equal fingerprints feed loop detection


@record()
class ExecResult(Record):
    """What a command left: its output (capped at capture), exit status and whether it timed out."""

    output: bytes
    exit_code: int | None
    timed_out: bool = False
    dropped: int = 0  # bytes dropped from the middle of the output at capture time


@record()
class Leftover(Record):
    """A process the agent left running when its time was over (listed before the verifier, which runs beside it)."""

    pid: int  # as the sandbox sees it
    command: str  # its command line, words joined by spaces
    cwd: str = ""
    files: list[str] = field(default_factory=list)  # paths it held open
    threads: int = 1  # a process whose first thread ended while others run shows as a zombie: it is alive
    own: bool = False  # the protocol's own (terminus's terminal): listed, but no evidence of what the model did
    program: str = ""  # the start of the script an interpreter runs (`python3 x.py`): read for what it points at


@record()
class FileFacts(Record):
    """One path as the sandbox holds it, seen from outside the agent's reach."""

    mode: int = 0  # st_mode: its kind and permissions
    size: int = 0
    dev: int = 0
    ino: int = 0
    mtime: int = 0  # nanoseconds
    ctime: int = 0
    sha256: str = ""  # regular files
    md5: str = ""
    head: bytes = b""  # its first bytes
    link: str = ""  # a symbolic link's text
    target: str = ""  # where a link leads once every link is followed, inside the sandbox
    error: str = ""  # why it could not be seen ("" when it was)


@record()
class Change(Record):
    """A path the agent's time changed, against the sandbox as it opened."""

    path: str
    what: Literal["created", "changed", "removed"]


class Look(Protocol):
    """The sandbox seen from outside the agent's reach, for evidence: the complete change set since it opened, and
    what a path holds. A driver offers one where it can (`Sandbox.look`); `how` says what it is taken with."""

    how: str
    tells_created: bool = True  # its changes say "created" for a path that was not there; False: all say "changed"

    def changes(self) -> list[Change]: ...
    def files(self, paths: list[str], digest: bool = True) -> dict[str, FileFacts]: ...  # digest: sha256, md5, head
    def read(self, paths: list[str]) -> dict[str, bytes | None]: ...  # whole files (capped), None when unreadable
    def listing(self, directories: list[str]) -> dict[str, list[str] | None]: ...


@record()
class VerifierJob(Record):
    """What a verifier runs and needs, for the sandbox to run it as sealed from what the agent left as it can."""

    command: str  # run with `bash -c`
    cwd: str
    timeout: float
    user: str = "root"
    env: dict[str, str] = field(default_factory=dict)  # over the sandbox's own environment
    private: list[str] = field(default_factory=list)  # the verifier's own directories: fresh, empty, out of reach
    files: list[tuple[str, bytes, int]] = field(default_factory=list)  # (path, content, mode) put in them first
    collect: list[str] = field(default_factory=list)  # files read back from the private directories afterwards
    record: str = ""  # where pytest's record of its sessions goes (a FIFO where the driver reads it as it comes)


@record()
class VerifierRun(Record):
    """What a verifier's run left: its output and status, the files asked for, and what was seen of it."""

    output: bytes
    exit_code: int | None
    timed_out: bool = False
    dropped: int = 0
    collected: dict[str, bytes | None] = field(default_factory=dict)
    records: bytes = b""  # oc-repl's pytest records, as the verifier's pytest wrote them
    exits: dict[str, int] = field(default_factory=dict)  # "pid:start" of a recorded pytest -> its wait status
    sealed: bool = False  # its files and processes were out of reach of what the agent left running
    opened: list[tuple[int, int, str, bool]] | None = None  # (dev, inode, path, executed): None where unseen
    written: list[tuple[int, int]] | None = None  # (dev, inode) of what it wrote


class Process(Protocol):
    """A process running in a sandbox, read and written without blocking."""

    def write(self, data: bytes) -> None: ...
    def read_available(self) -> bytes: ...  # everything captured since the last call (capped)
    # `settle`: whether what the process wrote so far can be read, waiting up to `timeout` seconds for it; a driver
    # whose output reaches the client otherwise (in the answers to its own calls) says True at once
    def settle(self, timeout: float) -> bool: ...
    def alive(self) -> bool: ...
    def wait(self, timeout: float) -> bool: ...  # True once the process has ended and its output is drained
    def kill(self) -> None: ...
    @property
    def exit_code(self) -> int | None: ...
    @property
    def dropped(self) -> int: ...


class OpeningAnswer(NamedTuple):
    """A script's answer taken early: where it ran, the marker its records carry, what it printed."""

    cwd: str
    marker: str
    text: str


class Sandbox(Protocol):
    """Where commands run. Drivers inherit it: a member with a body is what a driver without that capability does."""

    spec: str
    workdir: str
    # The image's working directory, where a task's verifier (terminal-bench's, Harbor's) runs; "" when the sandbox
    # is no image's container.
    image_workdir: str = ""
    # Where a verifier's own files go (a `--verify-file` script, pytest's record): a directory the driver keeps out of
    # the agent's reach where it seals verifiers.
    verifier_home: str = "/tmp/.oc-repl/verifier"
    # Its commands run on this machine (as the user, in a directory of theirs), not in a container or elsewhere.
    on_host: bool = False

    def exec(self, command: str, timeout: float, cwd: str | None = None, user: str | None = None) -> ExecResult: ...
    # `wait`: the caller waits up to this long for the command's end next; a sandbox whose calls are costly waits in
    # the call that starts it (cheap ones ignore it)
    def spawn(
        self,
        command: str,
        tty: bool = True,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        wait: float = 0.0,
    ) -> Process: ...
    def write_file(self, path: str, data: bytes) -> None: ...
    def read_file(self, path: str) -> bytes: ...
    def put(self, src: Path, dest: str) -> None: ...

    def ready(self) -> None:
        """Waits for what the driver started in the background (and raises what the start met); the runner calls it
        before the model acts, after other work."""

    def isolation(self) -> Isolation:
        """What holds the sandbox's commands in, as in force now (empty: not known)."""
        return Isolation()

    # What the agent left running: every process the sandbox's commands started that still runs, listed (never
    # stopped: a verifier runs beside them, as the task formats' own harnesses run theirs), from outside the agent's
    # reach where the driver can. The protocol's own (`keep`, and what they run under) are marked `own`.
    def agent_processes(self, keep: frozenset[int] = frozenset()) -> list[Leftover]: ...

    def end_agent_processes(self) -> int:
        """End everything the agent left running (after the verifier); how many processes could not be ended. A
        driver whose close() ends them all anyway needs nothing more."""
        return 0

    # Run a verifier's job beside what the agent left, sealed from it where the driver can (`VerifierRun.sealed`
    # says); oc_repl/sandbox/unsealed.py runs it where a driver cannot seal it.
    def run_verifier(self, job: VerifierJob) -> VerifierRun: ...

    def left_on_host(self) -> list[str]:
        """What the agent left that acts on this machine once the run is over (a version-control directory made in a
        local sandbox's directory, whose hooks run at the next git command there), a sentence each."""
        return []

    def look(self) -> Look | None:
        """The sandbox seen from outside the agent's reach (the complete change set since it opened); None where the
        driver has no such view."""
        return None

    def kept(self) -> str:
        """The name of a container left in place on purpose (--keep) once closed; "" for none."""
        return ""

    def reattach(self) -> str:
        """The spec that reaches this very sandbox again, from another process (`oc-repl resume`)."""
        return self.spec

    def call_latency(self) -> float:
        """Seconds a trivial call into the sandbox takes. Protocols choose how to wait from it: looking from outside
        where calls are cheap, one call an action where they are costly (docs/architecture.md). 0.0: cheap."""
        return 0.0

    def run_own(self, script: str, timeout: float, cwd: str | None = None, user: str | None = None) -> bytes:
        """What a script of oc-repl's own, one that ends by itself, printed (stdout and stderr together): one `exec`
        by default; a sandbox that starts commands detached (Harbor's) runs it as it is, without that machinery."""
        return self.exec(script, timeout=timeout, cwd=cwd, user=user).output

    def opening_answer(self, name: str) -> OpeningAnswer | None:
        """What a script of oc-repl's own printed that the sandbox ran in the call that opened it, where calls are
        costly and one saved counts (`name`: which script; discovery.BASELINE is the one); None when it ran none."""
        return None

    def calls(self) -> tuple[int, float]:
        """The calls made into the sandbox so far and the seconds spent in them (oc_repl/sandbox/meter.py); (0, 0.0)
        where the driver does not count them."""
        return 0, 0.0

    def close(self) -> None: ...


Emit = Callable[[Any], None]  # receives oc_repl.events objects
# A model-chosen action (a command, keystrokes, input to a session, a file write) as the person watching allows it:
# the action itself, an edited one, or None when refused. Handed to protocols beside `emit`; only the model's actions
# go through it, never oc-repl's own plumbing.
Approve = Callable[[str], "str | None"]


def allow_all(action: str) -> str:
    return action


# Consent to run model-chosen commands on this host, asked with the question to put to the person: True for a yes.
# A hook like `emit` and `approve`: the library never reads a terminal; the command line passes one that does.
Consent = Callable[[str], bool]


def refuse(question: str) -> bool:
    return False


class AgentProtocol(Protocol):
    """What turns replies into actions and results into messages. Protocols inherit it: a member with a body is what
    a protocol without that capability does."""

    name: str
    needs_sandbox: bool = True  # plain chat (raw) runs nothing: it needs no sandbox and no consent

    # The sandbox is at hand from the start: some protocols show the model the terminal before it acts.
    def start(self, task: Task, sandbox: Sandbox | None = None) -> None: ...
    def continue_with(self, task: Task, sandbox: Sandbox | None = None) -> None: ...  # a follow-up in the conversation
    def request(self) -> Request: ...
    def step(self, reply: Reply, sandbox: Sandbox, emit: Emit, approve: Approve = allow_all) -> Step: ...
    def assets(self) -> list[Asset]: ...
    def working_directory(self, sandbox: Sandbox) -> str: ...  # where the model's commands start

    def first_message(self, task: Task, terminal_state: str) -> Message | None:
        """The first message, for a protocol whose first message shows the model the terminal's screen
        (`terminal_state`); None for one whose messages do not depend on the sandbox."""
        return None

    def own_processes(self) -> frozenset[int]:
        """The processes the protocol itself started in the sandbox (terminus's terminal shell; its tmux server runs
        it): stopped before a verifier like the rest, but no evidence of what the model did. Empty for protocols that
        start none; camel's sessions are the model's own commands."""
        return frozenset()

    def resume(self, messages: list[Message]) -> None:
        """Take up a saved conversation: `messages` are what `request()` returned when it was saved; the next task
        is a follow-up (`continue_with`). A protocol that cannot refuses with ValueError."""
        raise ValueError(f"protocol {self.name} cannot take up a saved conversation")

    def close(self) -> None: ...  # ends whatever the protocol left running in the sandbox
