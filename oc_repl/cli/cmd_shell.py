"""The interactive shell: prompt_toolkit for input, the same Session, events and renderer as `oc-repl run`."""

from __future__ import annotations

import shlex
import shutil
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prompt_toolkit import PromptSession
from prompt_toolkit.completion import Completer, Completion
from prompt_toolkit.history import FileHistory
from prompt_toolkit.key_binding import KeyBindings
from rich.console import Console
from rich.text import Text

from oc_repl import events as ev
from oc_repl import paths, signals
from oc_repl.cli.notices import SyncNotice
from oc_repl.config import RunSettings
from oc_repl.conversation import Conversation
from oc_repl.errors import OcReplError, Terminated, UsageError
from oc_repl.outcome import Status
from oc_repl.plan import plan
from oc_repl.private import open_private, touch_private
from oc_repl.render.human import HumanRenderer
from oc_repl.render.sanitize import sanitize
from oc_repl.session import Fanout
from oc_repl.transcript import TranscriptWriter, default_path

COMMANDS: dict[str, str] = {
    "/help": "this list",
    "/protocol": "NAME  switch protocol (starts a new conversation)",
    "/model": "NAME  switch model",
    "/api-base": "URL  switch server (the conversation goes on)",
    "/sandbox": "SPEC  switch sandbox: local:<dir>, docker:<container>, docker-image:<image>",
    "/turns": "N  model turns per task",
    "/verify": "[CMD]  run the verifier now (CMD sets it first); prints PASS or FAIL and what the agent tried",
    "/new": "start a new conversation in the same sandbox",
    "/history": "the messages of the current conversation",
    "/transcript": "path of this session's transcript",
    "/save": "PATH  copy the transcript to PATH",
    "/approval": "ask|auto  confirm each command before it runs, or run them",
    "/think": "show|hide  the model's reasoning",
    "/exit": "leave (Ctrl-D works too)",
}


BAR_SANDBOX_WIDTH = 48  # characters of the sandbox spec on the bottom bar; the header shows it whole


def history_path() -> Path:
    return paths.state_dir() / "history"


def elide(text: str, width: int = BAR_SANDBOX_WIDTH) -> str:
    """The middle of a long text left out: a deep sandbox path must not push the turn counter off the bar."""
    if len(text) <= width:
        return text
    keep = width - 1
    return text[: keep // 3] + "…" + text[len(text) - (keep - keep // 3) :]


def ask(session: PromptSession, message: str, **options: Any) -> str:
    """session.prompt, ended by SIGTERM or SIGHUP (the terminal closed) with Terminated, as the rest of the shell is.

    The signal asks the running prompt to end rather than raising inside its event loop: an exception from there
    leaves asyncio cancelling prompt_toolkit's tasks, and one of them can wait for ever on a terminal that is gone.
    """

    def stop(signum: int, frame: Any) -> None:
        stopped = Terminated(signal.Signals(signum).name)
        app = session.app
        if not app.is_running or app.future is None or app.future.done():
            raise stopped
        app.loop.call_soon_threadsafe(lambda: app.future.done() or app.exit(exception=stopped))

    with signals.handled(signals.STOPS, stop):
        return session.prompt(message, **options)


class _SlashCompleter(Completer):
    def get_completions(self, document: Any, complete_event: Any) -> Any:
        text = document.text_before_cursor
        if text.startswith("/") and " " not in text:
            for name, help_text in COMMANDS.items():
                if name.startswith(text):
                    yield Completion(name, start_position=-len(text), display_meta=help_text)


@dataclass
class _Status:
    """What the bottom toolbar shows, kept up to date from events."""

    turn: int = 0
    max_turns: int = 0
    tokens: str = "-"
    verify: str = "-"

    def reset(self) -> None:
        """A new conversation: nothing of the old one's counts stays on the bar."""
        self.turn, self.max_turns, self.tokens, self.verify = 0, 0, "-", "-"

    def __call__(self, event: Any) -> None:
        if event.type == "turn.started":
            self.turn, self.max_turns = event.turn, event.max_turns
        elif event.type == "turn.completed":
            counted = event.usage.input_tokens or event.usage.output_tokens  # zeros: the server sent no usage
            self.tokens = f"{event.usage.input_tokens}/{event.usage.output_tokens}" if counted else "not sent"
        elif event.type == "verify.completed":
            counts = f" {event.tests_passed}/{event.tests_total}" if event.tests_total is not None else ""
            verdict = "PASS" if event.passed else "FAIL"
            self.verify = ("TAMPERED" if any(f.affects_tests for f in event.findings) else verdict) + counts


class Shell:
    def __init__(self, settings: RunSettings, first_task: str = "", resumed: Any = None) -> None:
        self.console = Console(highlight=False)
        self.renderer = HumanRenderer(self.console)
        self.status = _Status()
        self.transcript = TranscriptWriter(settings.transcript or default_path("shell"), secrets=(settings.api_key,))
        # Without --yes a local sandbox asks before every command; consent is then given one command at a time.
        self.consented = settings.yes
        self.approval = self._default_approval(settings.sandbox)
        emit = Fanout(self.transcript, self.renderer, self.status, SyncNotice())
        self.session = Conversation(plan(settings.replace(yes=True)), emit, approve=self._approve)
        self.prompt = self._prompt_session()
        self.asker: PromptSession = PromptSession()  # approval answers stay out of the input history
        self.first_task, self.resumed = first_task, resumed
        if resumed is not None:
            self.session.resume(resumed)

    def _default_approval(self, sandbox: str) -> str:
        from oc_repl.sandbox.kinds import kind_of

        return "auto" if self.consented or not kind_of(sandbox).on_host else "ask"

    @property
    def settings(self) -> RunSettings:
        return self.session.settings

    def _prompt_session(self) -> PromptSession:
        keys = KeyBindings()

        @keys.add("escape", "enter")  # Alt-Enter: a newline inside the message
        def _newline(event: Any) -> None:
            event.current_buffer.insert_text("\n")

        return PromptSession(
            history=FileHistory(str(touch_private(history_path()))),  # what was typed is nobody else's
            completer=_SlashCompleter(),
            key_bindings=keys,
            bottom_toolbar=self._toolbar,
            complete_while_typing=True,
        )

    def _toolbar(self) -> str:
        s = self.settings
        return (
            f" {self.session.client.model or s.model or '(model: server default)'} · {s.protocol} · {elide(s.sandbox)}"
            f" · turn {self.status.turn}/{self.status.max_turns or s.max_turns} · tokens {self.status.tokens}"
            f" · verify {self.status.verify} · approval {self.approval}"
        )

    def _approve(self, what: str) -> str | None:
        """The approval hook: in `ask` mode each model action waits for yes / no / edit / always. Ctrl-D refuses
        (the model is told it was declined); Ctrl-C stops the turn like anywhere else."""
        if self.approval != "ask":
            return what
        from oc_repl.cli.approval import ShowHidden, question

        self.console.print(question(what))
        try:
            answer = ask(self.asker, "[y]es / [n]o / [e]dit / [a]lways › ").strip().lower()
        except EOFError:
            return None
        if answer in ("y", "yes", ""):
            return what
        if answer in ("a", "always"):
            self.approval = "auto"
            return what
        if answer in ("e", "edit"):
            try:
                return ask(self.asker, "edit › ", default=what, input_processors=[ShowHidden()]) or None
            except EOFError:
                return None
        return None

    # --- the loop ----------------------------------------------------------------------------------------------

    def loop(self) -> int:
        self.console.print(
            Text("oc-repl — type a task; /help for commands; Alt-Enter for a newline; Ctrl-D leaves", style="dim")
        )
        self._greet()
        code = 0
        try:
            with signals.stoppable():  # SIGTERM and SIGHUP (the terminal closed) leave the shell, cleaning up
                if self.first_task:
                    self._act(self.first_task)
                while not self.session.terminated and self._one_line():
                    pass
        except Terminated:
            code = Status.INTERRUPTED.exit_code
        finally:  # whatever happens, a created container is removed and the transcript closed, to the end
            with signals.deferred():
                self.session.close()
                self.transcript.close()
        if self.session.terminated:
            code = Status.INTERRUPTED.exit_code
        self.console.print(Text(f"transcript: {self.transcript.path}", style="dim"), soft_wrap=True)
        return code

    def _greet(self) -> None:
        """What the person should know before typing: a conversation taken up, a server that does not answer."""
        if self.resumed is not None:
            where = f" in {self.resumed.sandbox}" if self.resumed.sandbox else ""
            told = f"resumed a conversation of {self.resumed.tasks} task(s), {len(self.resumed.messages)} messages"
            self._say(f"{told}{where}; /history shows it")
        problem = server_problem(self.settings.api_base, self.settings.api_key)
        if problem:
            self.console.print(Text(f"warning: {problem}", style="bold yellow"), soft_wrap=True)
            self._say("start a server (oc-repl doctor says how), or /api-base URL to use another")

    def _say(self, text: str) -> None:
        self.console.print(Text(sanitize(text), style="dim"), soft_wrap=True)

    def _one_line(self) -> bool:
        """Read and act on one line; False when the shell should end."""
        try:
            line = ask(self.prompt, "› ").strip()
        except Terminated:
            raise
        except KeyboardInterrupt:
            return True  # Ctrl-C at the prompt clears the line
        except EOFError:
            return False
        return self._act(line)

    def _act(self, line: str) -> bool:
        try:
            if line.startswith("/"):
                return self._slash(line) != "exit"
            if line:
                self._task(line)
        except OcReplError as exc:
            self.renderer(ev.Error(kind=exc.kind, message=exc.message, hint=exc.hint))
        except Terminated:
            raise
        except KeyboardInterrupt:
            self.console.print(Text("\ninterrupted", style="yellow"))
        except Exception as exc:  # a bad command must not take the session down with it
            self.renderer(ev.Error(kind="internal", message=f"{type(exc).__name__}: {exc}"))
        return True

    def _task(self, text: str) -> None:
        self.status.turn = 0
        result = self.session.run(text)
        if self.session.tasks_run:  # where the conversation stands, for `oc-repl resume`
            self.transcript(self.session.saved())
        if result.status == "interrupted":
            self.console.print(Text("interrupted — the conversation is kept; your next message steers", style="yellow"))

    def _slash(self, line: str) -> str | None:
        name, _, arg = line.partition(" ")
        arg = arg.strip()
        handler = getattr(self, "cmd_" + name[1:].replace("-", "_"), None)
        if name not in COMMANDS or handler is None:
            raise UsageError(f"unknown command {name}", hint="/help lists the commands")
        return handler(arg)

    # --- slash commands ----------------------------------------------------------------------------------------

    def cmd_help(self, arg: str) -> None:
        for name, help_text in COMMANDS.items():
            self.console.print(Text(f"{name:12s}", style="bold") + Text(help_text))

    def cmd_exit(self, arg: str) -> str:
        return "exit"

    def cmd_new(self, arg: str) -> None:
        self.session.new_conversation()
        self.status.reset()
        self._say("new conversation")

    def cmd_protocol(self, arg: str) -> None:
        from oc_repl import protocols

        if arg not in protocols.names():
            raise UsageError(f"unknown protocol {arg!r}; known: {', '.join(protocols.names())}")
        self.session.set_protocol(arg)
        self._switched(f"protocol {arg}")

    def cmd_model(self, arg: str) -> None:
        if not arg:
            raise UsageError("/model needs a name")
        self.session.set_model(arg)
        self._say(f"model {arg}; the conversation goes on")

    def cmd_api_base(self, arg: str) -> None:
        if not arg.startswith(("http://", "https://")):
            raise UsageError("/api-base needs a URL, e.g. http://127.0.0.1:30000/v1")
        self.session.set_api_base(arg)
        problem = server_problem(arg, self.settings.api_key)
        self._say(f"server {arg}; the conversation goes on" + (f" — but {problem}" if problem else ""))

    def cmd_sandbox(self, arg: str) -> None:
        from oc_repl.sandbox.kinds import kind_of

        kind_of(arg)  # a spec of no known kind is refused before the working sandbox is let go
        self.session.switch_sandbox(arg)  # when it fails (or is refused), the working sandbox stays
        self.approval = self._default_approval(arg)  # a move onto this host asks again, whatever came before
        self._switched(f"sandbox {self.session.sandbox.spec if self.session.sandbox else arg}")

    def _switched(self, what: str) -> None:
        """Said after a switch that starts a new conversation; the verifier stays, and is named so."""
        self.status.reset()
        self._say(f"{what}: a new conversation")
        if self.session.plan.verifier is not None:
            verifier = self.session.plan.verifier.describe()
            self._say(f"the verifier stays: {verifier} (/verify CMD sets another)")

    def cmd_turns(self, arg: str) -> None:
        if not arg.isdecimal() or int(arg) < 1:
            raise UsageError("/turns needs a positive number")
        self.session.set_max_turns(int(arg))
        self.status.max_turns = 0  # the toolbar shows the new cap at once
        self._say(f"at most {int(arg)} model turns per task from the next task on")

    def cmd_verify(self, arg: str) -> None:
        if arg:
            self.session.set_verifier(arg)
        self.session.verify_now()

    def cmd_history(self, arg: str) -> None:
        messages = self.session.history()
        if not messages:
            self.console.print(Text("no conversation yet", style="dim"))
            return
        for message in messages:
            content = message.get("content") or ""
            first = content.strip().splitlines()[0] if content.strip() else "(tool calls)"
            self.console.print(Text(f"{message['role']:>9}: ", style="bold") + Text(sanitize(first)[:110]))

    def cmd_transcript(self, arg: str) -> None:
        self.console.print(str(self.transcript.path))

    def cmd_save(self, arg: str) -> None:
        if not arg:
            raise UsageError("/save needs a path")
        try:
            target = Path(shlex.split(arg)[0]).expanduser()
            with self.transcript.path.open("rb") as source, open_private(target, "wb") as copy:
                shutil.copyfileobj(source, copy)
        except (ValueError, OSError) as exc:
            raise UsageError(f"cannot save the transcript to {arg}: {exc}") from exc
        self.console.print(Text(f"saved to {target}", style="dim"))

    def cmd_approval(self, arg: str) -> None:
        if arg not in ("ask", "auto"):
            raise UsageError("/approval takes ask or auto")
        self.approval = arg
        self._say("each command is asked about before it runs" if arg == "ask" else "commands run without asking")

    def cmd_think(self, arg: str) -> None:
        if arg not in ("show", "hide"):
            raise UsageError("/think takes show or hide")
        self.renderer.show_reasoning = arg == "show"
        self._say("the model's reasoning is shown" if arg == "show" else "the model's reasoning is hidden")


def server_problem(api_base: str, api_key: str) -> str:
    """Why the server at `api_base` cannot serve (no answer, an error to GET /models); "" when it answers."""
    import httpx

    url = f"{api_base.rstrip('/')}/models"
    try:
        response = httpx.get(url, headers={"Authorization": f"Bearer {api_key or 'EMPTY'}"}, timeout=3.0)
    except httpx.HTTPError as exc:
        return f"no model server answers at {api_base} ({type(exc).__name__})"
    if response.status_code != 200:
        return f"GET {url} answered HTTP {response.status_code}"
    return ""


def run_shell(settings: RunSettings, first_task: str = "", resumed: Any = None) -> int:
    return Shell(settings, first_task, resumed).loop()
