"""Human renderer: progress on stderr with rich. It sees events only, like every other consumer."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.text import Text

from oc_repl.client.wires import find
from oc_repl.render.sandbox_line import isolation_line
from oc_repl.render.sanitize import fold, one_line, sanitize

if TYPE_CHECKING:  # imported where first drawn: a one-shot run's header does not wait for them
    from rich.live import Live
    from rich.spinner import Spinner

# Lines that are not a terminal's are not wrapped at an imagined 80 columns.
UNWRAPPED = 240
FINDINGS_SHOWN = 20  # tamper findings listed after a verdict; the transcript holds them all
SLOW_START = 2.0  # seconds of the server's before the first turn worth a line
# What an action that did not complete is marked with, after its name.
NOT_DONE = {"failed": "failed", "declined": "declined", "timed_out": "timed out"}


def make_console(stderr: bool = True) -> Console:
    """A rich console for a terminal; for any other stream one that writes plain lines, unwrapped."""
    from oc_repl.render.plain_console import PlainConsole

    console = PlainConsole(stderr=stderr, highlight=False, width=UNWRAPPED)
    return Console(stderr=stderr, highlight=False) if console.is_terminal else console


def wire_lines(e: Any) -> list[str]:
    """What the header says of the wire: how the prompt goes, and under --exact what is still not as trained."""
    lines = []
    if (wire := find(e.wire)) is not None and wire.text:
        template = next((a for a in e.assets if a.name == "chat_template"), None)
        rendered = f" · template {template.sha256[:12]}" if template else ""
        sent = "token ids" if e.prompt == "token ids" else "sending text: no tokenizer loaded, the server tokenizes"
        lines.append(f"wire: {e.wire} · {sent}{rendered}")
    if e.exact:
        lines.append(exact_line(e))
    return lines


def exact_line(e: Any) -> str:
    """`exact`, with the protocol's own settings `--exact` leaves to the run (camel: rich's line), and what is still
    not as trained."""
    from oc_repl.errors import UsageError
    from oc_repl.protocols import kind_of

    try:
        rows = kind_of(e.protocol).options
    except UsageError:  # a protocol no longer installed: its record still says what it ran with
        rows = ()
    chosen = [f"{row.flag} {e.options[row.name]}" for row in rows if row.exact is None and row.name in e.options]
    said = f"exact ({', '.join(chosen)})" if chosen else "exact"
    return f"{said}, except: {', '.join(e.deviations)}" if e.deviations else said


class _Waiting:
    """A spinner with the seconds spent waiting for the model's first token, redrawn by rich's Live."""

    def __init__(self) -> None:
        from rich.spinner import Spinner

        self.started = time.monotonic()
        self.spinner = Spinner("dots", style="dim")

    def __rich__(self) -> Spinner:
        self.spinner.update(text=Text(f"waiting for the model · {time.monotonic() - self.started:.0f}s", style="dim"))
        return self.spinner


class HumanRenderer:
    def __init__(self, console: Console | None = None, show_reasoning: bool = True) -> None:
        self.console = console or make_console()
        self.show_reasoning = show_reasoning
        self._streaming: str | None = None  # id of the item whose text is being streamed
        self._streamed: set[str] = set()
        self._waiting: Live | None = None

    def __call__(self, event: Any) -> None:
        handler = getattr(self, "on_" + event.type.replace(".", "_"), None)
        self._stop_waiting()
        if event.type != "item.updated":
            self._end_stream()
        if handler:
            handler(event)

    def _end_stream(self) -> None:
        if self._streaming is not None:
            self.console.print()
            self._streaming = None

    def _stop_waiting(self) -> None:
        if self._waiting is not None:
            self._waiting.stop()
            self._waiting = None

    def on_request_sent(self, e: Any) -> None:
        """A sign of life until the first token: a slow server can take many seconds."""
        self._wait_for_model()

    def _wait_for_model(self) -> None:
        if self.console.is_terminal:
            from rich.live import Live

            self._waiting = Live(_Waiting(), console=self.console, refresh_per_second=4, transient=True)
            self._waiting.start()

    def on_thread_started(self, e: Any) -> None:
        where = f" · cwd {e.workdir}" if e.workdir else ""
        # a thread that ended before it could say everything (no model asked yet) leaves out what it does not know
        header = " · ".join(part for part in ("oc-repl", e.model, e.protocol, e.sandbox) if part) + where
        self.console.print(Text(sanitize(header), style="bold"), soft_wrap=True)
        held = isolation_line(e.isolation)
        if held:
            unconfined = e.isolation.confinement == "none"
            self.console.print(Text(sanitize(held), style="bold red" if unconfined else "dim"), soft_wrap=True)
        for line in wire_lines(e):
            self.console.print(Text(sanitize(line), style="dim"), soft_wrap=True)
        waited = e.startup.get("server", 0.0)
        if waited >= SLOW_START:  # a busy server makes the start slow: say whose time it was
            said = f"the server took {waited:.0f} s to answer before the first turn (not the model's time)"
            self.console.print(Text(said, style="yellow"), soft_wrap=True)
        if e.task:
            self.console.print(Text(f"task: {sanitize(e.task)}", style="bold cyan"), soft_wrap=True)

    def on_turn_started(self, e: Any) -> None:
        self.console.rule(Text(f"turn {e.turn}/{e.max_turns}", style="dim"), style="dim")

    def on_item_updated(self, e: Any) -> None:
        if e.item.type == "reasoning" and not self.show_reasoning:
            return
        if self._streaming != e.item.id:
            self._end_stream()
            self._streaming = e.item.id
        self._streamed.add(e.item.id)
        style = "dim italic" if e.item.type == "reasoning" else ""
        self.console.print(Text(sanitize(e.delta), style=style), end="", soft_wrap=True)

    def on_item_started(self, e: Any) -> None:
        item = e.item
        if item.type == "command_execution":
            self.console.print(
                Text(f"▶ {sanitize(item.tool)}  ", style="cyan") + Text(sanitize(item.command), style="bold")
            )

    def on_item_completed(self, e: Any) -> None:
        item = e.item
        if item.id in self._streamed:
            return
        if item.type == "agent_message":
            self.console.print(Text(sanitize(item.text)))
        elif item.type == "reasoning" and self.show_reasoning:
            self.console.print(Text(sanitize(item.text), style="dim italic"))
        elif item.type == "command_execution" and item.tool == "keystrokes":
            self.console.print(Text(f"  {sanitize(item.aggregated_output)}", style="dim"))
        elif item.type == "command_execution":
            from rich.panel import Panel

            style = {"completed": "green", "timed_out": "yellow", "declined": "yellow"}.get(item.status, "red")
            body = Text(fold(sanitize(item.aggregated_output).rstrip()) or "(no output)", style="default")
            title = Text(f"{sanitize(item.tool)}: {one_line(item.command)[:100]}")
            if item.status != "completed":  # the output below is then the reason, as the model was told it
                title += Text(f" — {NOT_DONE.get(item.status, sanitize(item.status))}", style=f"bold {style}")
            self.console.print(Panel(body, title=title, title_align="left", border_style=style, expand=False))
        elif item.type == "file_change":
            self._file_change(item)
        elif item.type == "parse_error":
            self.console.print(Text(f"⚠ parse error: {sanitize(item.message)}", style="yellow"))

    def _file_change(self, item: Any) -> None:
        """✎ for a write that happened; ✗ and why for one that failed or was declined: nothing was written then."""
        for change in item.changes:
            path = f"{change.kind} {sanitize(change.path)}"
            if item.status in ("completed", "in_progress"):
                self.console.print(Text(f"✎ {path}", style="magenta"), soft_wrap=True)
                continue
            style = "yellow" if item.status == "declined" else "red"
            marked = f"{NOT_DONE.get(item.status, sanitize(item.status))}, nothing written"
            line = Text(f"✗ {path} — {marked}", style=f"bold {style}")
            self.console.print(line, soft_wrap=True)
            if item.reason.strip():
                self.console.print(Text(fold(sanitize(item.reason).rstrip(), 0, 6), style="dim"))

    def on_turn_completed(self, e: Any) -> None:
        # No request is 0 tokens long: zeros are a server that reported no usage, and are said so.
        counted = e.usage.input_tokens or e.usage.output_tokens
        parts = [f"{e.usage.input_tokens} in / {e.usage.output_tokens} out" if counted else "no token counts sent"]
        if e.ttft_s is not None:
            parts.append(f"ttft {e.ttft_s:.2f}s")
        if e.tokens_per_s:
            parts.append(f"{e.tokens_per_s:.0f} tok/s")
        if e.truncated and e.finish_reason == "length":
            parts.append("cut at the token limit (finish length)")
        elif e.truncated:  # the wire marks a native call whose arguments do not parse as not whole
            parts.append(f"a tool call that could not be read, not run (finish {sanitize(e.finish_reason)})")
        self.console.print(Text(" · ".join(parts), style="dim"))

    def on_verify_completed(self, e: Any) -> None:
        counts = f" · {e.tests_passed}/{e.tests_total} tests passed" if e.tests_total is not None else ""
        verdict = Text(
            " PASS " if e.passed else " FAIL ", style="bold white on green" if e.passed else "bold white on red"
        )
        # a Harbor task's reward decides, whatever its script exited with; otherwise the exit status does
        decided = f" · reward {e.reward:g}" if e.reward is not None else f" (exit {e.exit_code})"
        self.console.print(verdict + Text(f" {sanitize(e.command)}{counts}{decided}"))
        if not e.passed and e.output_tail:
            self.console.print(Text(fold(sanitize(e.output_tail), 0, 15), style="dim"))
        if not e.sealed:
            self.console.print(Text("  unsealed: what the agent left running could reach the verifier", style="dim"))
        if e.evidence.startswith("unavailable"):
            self.console.print(Text(f"  evidence {sanitize(e.evidence)}", style="yellow"))
        self._findings(e.findings)

    def _findings(self, findings: list[Any]) -> None:
        """What the agent tried, a line each after the verdict; those that sway tests first and marked."""
        ordered = sorted(findings, key=lambda f: not f.affects_tests)
        for f in ordered[:FINDINGS_SHOWN]:
            where = f"pid {f.pid} {f.path}" if f.pid is not None else f.path
            line = f"{f.kind} {sanitize(where)}: {sanitize(f.detail)}"
            if f.affects_tests:
                self.console.print(Text(" TAMPERED ", style="bold white on magenta") + Text(f" {line}"))
            else:
                self.console.print(Text(f"  noted: {line}", style="dim"))
        if len(ordered) > FINDINGS_SHOWN:
            self.console.print(Text(f"  … {len(ordered) - FINDINGS_SHOWN} more in the transcript", style="dim"))

    def on_thread_completed(self, e: Any) -> None:
        if e.status == "interrupted":
            self.console.print()  # the terminal echoed ^C where the cursor was: start a line of our own
        style = "green" if e.exit_code == 0 else "red"
        calls = f" · tool calls {e.tool_calls_native} native / {e.tool_calls_salvaged} salvaged"
        self.console.print(Text(f"■ {sanitize(e.status)} · exit {e.exit_code} · {e.turns} turns{calls}", style=style))
        if e.kept_container:
            self.console.print(Text(f"kept container {sanitize(e.kept_container)}", style="bold"))

    def on_error(self, e: Any) -> None:
        label = "retrying" if e.retrying else ("warning" if e.kind == "warning" else "error")
        self.console.print(Text(f"{label}: {sanitize(e.message)}", style="yellow" if e.retrying else "bold red"))
        if e.hint:
            self.console.print(Text(sanitize(e.hint), style="dim"))
        if e.retrying:  # the request goes out again: waiting for the model starts over
            self._wait_for_model()
