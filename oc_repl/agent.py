"""The turn-capped loop. It knows the seams (client, protocol, sandbox), never a protocol or sandbox by name."""

from __future__ import annotations

import time
import traceback
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from oc_repl import events as ev
from oc_repl.errors import Deadline, LoopDetected, OcReplError, TurnCapReached, status_of
from oc_repl.outcome import Status
from oc_repl.types import AgentProtocol, Approve, Emit, Reply, Sandbox, Task, allow_all


@dataclass
class Outcome:
    status: Status = Status.INTERNAL_ERROR
    final_answer: str = ""
    turns: int = 0
    server_wait_s: float = 0.0  # time the model server kept the agent waiting (see Agent._waited)


def error_event(exc: BaseException) -> ev.Error | None:
    """The `error` event a run stopped by `exc` records: oc-repl's own errors as they are, a bug with its
    traceback; none for a stop that is no error (the turn cap, the agent's time, an interruption)."""
    if isinstance(exc, OcReplError):
        return ev.Error(kind=exc.kind, message=exc.message, hint=exc.hint)
    if isinstance(exc, Exception) and not isinstance(exc, TurnCapReached):
        return ev.Error(kind="internal", message=f"internal error: {exc!r}", hint=traceback.format_exc())
    return None


def _why_the_turn_failed(exc: BaseException) -> str:
    if isinstance(exc, OcReplError):
        return exc.message
    if isinstance(exc, Deadline):
        return "the agent's time ran out"
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    return f"internal error: {exc!r}"


@dataclass
class Agent:
    client: Any  # oc_repl.client.chat.ChatClient; typed loosely so importing this module stays cheap
    protocol: AgentProtocol
    sandbox: Sandbox
    emit: Emit
    max_turns: int = 12
    loop_limit: int = 3  # identical turns in a row that count as a loop; 0 disables loop detection
    sampling: dict[str, Any] = field(default_factory=dict)
    approve: Approve = allow_all  # asked before each model action runs (the shell's approval); plumbing never is
    _open_turn: int = 0  # a turn that started and has not completed yet
    _asked: float | None = None  # when the request in flight was sent
    _first: float | None = None  # when its first token came
    _waited: float = 0.0  # the server's share of the time so far: before first tokens, failed attempts, retry waits
    # Events of the time between two requests (a turn's end, the next one's start and request), emitted once the
    # request is on its way: writing them then overlaps the server's work instead of delaying the request.
    _held: list[Any] = field(default_factory=list)

    def run(self, task: Task, follow_up: bool = False) -> Outcome:
        outcome = Outcome()
        try:
            (self.protocol.continue_with if follow_up else self.protocol.start)(task, self.sandbox)
            self._loop(outcome)
        except (Exception, KeyboardInterrupt) as exc:  # a bug too: the turns so far and its traceback are recorded
            self._release()
            if self._asked is not None:  # stopped while the server had the request: its wait so far is the server's
                self._waited += (self._first or time.monotonic()) - self._asked
            outcome.status = status_of(exc)
            error = error_event(exc)
            if error is not None:
                self.emit(error)
            if not isinstance(exc, TurnCapReached):
                self._turn_failed(_why_the_turn_failed(exc))
        outcome.server_wait_s, self._waited, self._asked = self._waited, 0.0, None
        return outcome

    def _loop(self, outcome: Outcome) -> None:
        recent: deque[str] = deque(maxlen=max(4, self.loop_limit))
        for turn in range(1, self.max_turns + 1):
            outcome.turns = self._open_turn = turn
            self._held.append(ev.TurnStarted(turn=turn, max_turns=self.max_turns))
            reply = self._ask(turn)
            step = self.protocol.step(reply, self.sandbox, self.emit, self.approve)
            self._turn_completed(turn, reply)
            if step.done:
                self._release()
                outcome.status, outcome.final_answer = Status.DONE, step.final_answer
                return
            # a turn that only waits on something still running (polling a background job, an empty wait on a busy
            # terminal) has no fingerprint: waiting is not looping
            if step.fingerprint:
                recent.append(step.fingerprint)
                self._check_loop(list(recent))
        raise TurnCapReached

    def _turn_failed(self, message: str) -> None:
        if self._open_turn:
            self.emit(ev.TurnFailed(turn=self._open_turn, error=ev.ErrorInfo(message=message)))
            self._open_turn = 0

    def _ask(self, turn: int) -> Reply:
        request = self.protocol.request()
        options = {**self.sampling, **request.options}
        prepared = self.client.prepare(request.messages, options)
        self._held.append(
            ev.RequestSent(turn=turn, request={"messages": request.messages, **options}, body=prepared.record())
        )
        text_id, think_id = ev.new_id(), ev.new_id()

        streamed: set[str] = set()

        def on_delta(kind: str, text: str) -> None:
            self._release()
            self._first = self._first or time.monotonic()
            item_id, item_type = (think_id, "reasoning") if kind == "reasoning" else (text_id, "agent_message")
            streamed.add(item_id)
            self.emit(ev.ItemUpdated(item=ev.ItemRef(id=item_id, type=item_type), delta=text))

        self._asked, self._first = time.monotonic(), None
        # the client calls on_sent once the request is on its way, and at the latest as it returns or raises
        reply = self.client.complete(
            request.messages, options, on_delta=on_delta, prepared=prepared, on_sent=self._release
        )
        self._asked = None
        # the attempts that failed and the waits between them, and the wait for the first token (the whole answer
        # when none was streamed: queueing and generation cannot be told apart then, and it counts as the model's)
        before = reply.request_s - reply.duration_s if reply.request_s else 0.0
        self._waited += max(0.0, before) + (reply.ttft_s or 0.0)
        self.emit(ev.ResponseReceived(turn=turn, raw=reply.raw))
        if reply.reasoning:
            self.emit(ev.ItemCompleted(item=ev.Reasoning(id=think_id, text=reply.reasoning)))
        # a streamed item is always completed, also when all its text turned out to be tool-call markup
        if reply.content or text_id in streamed:
            self.emit(ev.ItemCompleted(item=ev.AgentMessage(id=text_id, text=reply.content)))
        return reply

    def _release(self) -> None:
        held, self._held = self._held, []
        for event in held:
            self.emit(event)

    def _turn_completed(self, turn: int, reply: Reply) -> None:
        self._open_turn = 0
        usage = reply.usage
        out_tokens = usage.completion_tokens if usage else 0
        gen_time = reply.duration_s - (reply.ttft_s or 0.0)
        self._held.append(
            ev.TurnCompleted(
                turn=turn,
                usage=ev.UsageInfo(input_tokens=usage.prompt_tokens if usage else 0, output_tokens=out_tokens),
                finish_reason=reply.finish_reason,
                truncated=reply.truncated,
                ttft_s=reply.ttft_s,
                tokens_per_s=round(out_tokens / gen_time, 1) if out_tokens and gen_time > 0 else None,
                duration_s=round(reply.duration_s, 3),
                request_s=reply.request_s or round(reply.duration_s, 3),
                attempts_s=reply.attempts_s,
            )
        )

    def _check_loop(self, recent: list[str]) -> None:
        k = self.loop_limit
        if k and len(recent) >= k and len(set(recent[-k:])) == 1:
            raise LoopDetected(f"the same actions produced the same results {k} turns in a row")
        if k and len(recent) >= 4 and recent[-1] == recent[-3] and recent[-2] == recent[-4] != recent[-1]:
            raise LoopDetected("the model alternates between the same two actions (A-B-A-B)")
