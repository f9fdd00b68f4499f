"""Transcripts as training data: each episode (one thread, `thread.started` to `thread.completed`) as one JSON object
holding exactly what the model saw and what it answered, taken from `request.sent` / `response.received`.

Format `openai-chat` (one JSON line per episode):
    {"format": "oc-repl/openai-chat/1",
     "messages": [...the last request's messages..., the model's last reply],   # the usual SFT shape
     "tools": [...the tools of the last request...],                            # absent when there were none
     "turns": [{"messages": [...], "tools": [...], "options": {sampling, tool_choice, ...},
                "reply": {assistant message as received}, "finish_reason": "stop",
                "prompt_ids": [...], "output_ids": [...],           # the ids: text wires, where recorded
                "output_logprobs": [...]}, ...],                     # and each output id's logprob (/generate)
     "metadata": {"task_name", "task", "protocol", "model", "wire", "options", "thread_id", "attempt", "status",
                  "verified", "verifier_ran", "reward", "tests_passed", "tests_total", "transcript",
                  and for a bench trial "bench": {...}}}
`turns` is the exact record of every request; in camel's `training` history, which drops the model's earlier replies
from later requests, only `turns` holds them all.

Format `tokens` (one JSON line per episode), what an RL trainer's sample holds, in the order the model saw them:
    {"format": "oc-repl/tokens/1",
     "turns": [{"prompt_ids": [...], "output_ids": [...], "output_logprobs": [...] | null,
                "loss_mask": [0 for each prompt id..., 1 for each output id...]}, ...],
     "reward": 1.0 | null, "metadata": {...as above}}      # the tests' score, else the verdict; null: no verifier
An episode with a turn whose ids were not recorded (the chat wire; a prompt sent as text) has none: it is skipped,
said why.

Format `atif` (one JSON line per episode): Harbor's ATIF trajectory (oc_repl/atif.py, the version Harbor 0.25
writes), one agent step per model call, each with its prompt and completion token ids and logprobs where the wire had
them; the episode's metadata (as above) under `extra.metadata`.

Training data must not lose episodes quietly: a line that is not an event, or a request or reply of a shape no server
sends, is a BadInput naming the file and the line. Only a last line cut by a crash is left out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from oc_repl import __version__
from oc_repl.event_json import json_text
from oc_repl.safejson import BadInput
from oc_repl.turn_ids import token_ids

FORMAT = "oc-repl/openai-chat/1"
TOKENS = "oc-repl/tokens/1"
FORMATS = ("openai-chat", "tokens", "atif")


def _reply_message(raw: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The assistant message as the server sent it (streamed replies: as accumulated), and its finish reason; a
    ValueError for a reply of another shape. A text wire's reply is the generated text, as the model wrote it."""
    text = _generated_text(raw)
    if text is not None:
        finish = raw.get("finish_reason") or (raw.get("meta_info") or {}).get("finish_reason") or ""
        if isinstance(finish, dict):
            finish = finish.get("type") or ""
        return {"role": "assistant", "content": text}, str(finish)
    if "message" in raw:
        message, finish = raw.get("message") or {}, raw.get("finish_reason") or ""
    else:
        choices = raw.get("choices") or [{}]
        choice = choices[0] if isinstance(choices, list) and choices else None
        if not isinstance(choice, dict):
            raise ValueError("a reply whose choices are not a list of objects")
        message, finish = choice.get("message") or {}, choice.get("finish_reason") or ""
    if not isinstance(message, dict):
        raise ValueError("a reply whose message is not an object")
    return dict(message), str(finish)


def _generated_text(raw: dict[str, Any]) -> str | None:
    """The text of a completions or generate reply (unstreamed, or as the client folded its stream); None for a chat
    reply."""
    if isinstance(raw.get("text"), str) and "message" not in raw:
        return raw["text"]
    choices = raw.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict) and "text" in choices[0]:
        return str(choices[0]["text"] or "")
    return None


def _turn(request: dict[str, Any], raw: dict[str, Any], body: dict[str, Any] | None = None) -> dict[str, Any]:
    options = dict(request)
    messages, tools = options.pop("messages", []), options.pop("tools", None)
    if not isinstance(messages, list) or not isinstance(tools, list | None):
        raise ValueError("a request whose messages or tools are not lists")
    reply, finish = _reply_message(raw)
    turn = {"messages": messages, "tools": tools, "options": options, "reply": reply, "finish_reason": finish}
    return {**turn, **token_ids(body or {}, raw)}


def _token_turn(turn: dict[str, Any]) -> dict[str, Any]:
    prompt, output = turn["prompt_ids"], turn["output_ids"]
    mask = [0] * len(prompt) + [1] * len(output)
    return {
        "prompt_ids": prompt,
        "output_ids": output,
        "output_logprobs": turn.get("output_logprobs"),
        "loss_mask": mask,
    }


def _reward(metadata: dict[str, Any]) -> float | None:
    """The episode's reward: the score a task's tests wrote, else the verdict (1 verified, 0 otherwise; a tampered
    episode 0 whatever its tests said); none where no verifier ran."""
    if metadata["status"] == "tampered":
        return 0.0
    if metadata["reward"] is not None:
        return metadata["reward"]
    return float(metadata["verified"]) if metadata["verifier_ran"] else None


@dataclass
class Thread:
    """What a first reading of one thread of a transcript keeps: not its turns, which are read again as they are
    written, one at a time (a long episode's line holds every request whole)."""

    start: int  # the line of its thread.started
    started: Any
    turns: int = 0
    with_ids: int = 0  # turns whose prompt and output ids were recorded
    last: dict[str, Any] = field(default_factory=dict)  # its last turn
    end: Any = None
    verify: Any = None

    def metadata(self) -> dict[str, Any]:
        started, end, verify = self.started, self.end, self.verify
        return {
            "task_name": started.task_name,
            "task": started.task,
            "protocol": started.protocol,
            "model": started.model,
            "wire": started.wire,
            # the run's sampling and its protocol's own settings (camel: history, rich's line), as thread.started has
            "options": started.options,
            "thread_id": started.thread_id,
            "attempt": started.attempt,
            "status": end.status if end else "",
            "verified": bool(end and end.status == "verified"),
            "verifier_ran": verify is not None,
            "reward": verify.reward if verify else None,
            "tests_passed": verify.tests_passed if verify else None,
            "tests_total": verify.tests_total if verify else None,
        }


@dataclass
class Episode:
    """One line of the export: the keys before its turns, its turns (read from the transcript when written), the keys
    after them."""

    before: dict[str, Any]
    turns: Callable[[], Iterator[dict[str, Any]]]
    after: dict[str, Any]
    key: str = "turns"  # the turns' key (ATIF's: steps)

    def write(self, out: IO[str], redact: Callable[[Any], Any] = lambda data: data) -> None:
        """As `json_text` writes the whole object, a turn at a time: in UTF-8, or, when any text cannot be written in
        it (a lone surrogate), the whole line in JSON's escapes."""
        try:
            out.write("".join(self._pieces(redact, escape=False)))
        except UnicodeEncodeError:
            out.write("".join(self._pieces(redact, escape=True)))

    def _pieces(self, redact: Callable[[Any], Any], escape: bool) -> Iterator[str]:
        yield json_text(redact(self.before), escape)[:-1] + f',"{self.key}":['
        for n, turn in enumerate(self.turns()):
            yield ("," if n else "") + json_text(redact(turn), escape)
        yield "]," + json_text(redact(self.after), escape)[1:] + "\n"


Skipped = Callable[[str], None]  # told why each thread or trial that holds no episode is left out


def _no_reply(end: Any, skipped: Skipped | None) -> None:
    if skipped is not None:
        status = end.status if end is not None else "cut short"
        skipped(f"no model reply ({status})")


def _turns(transcript: Path, start: int = 0) -> Iterator[tuple[int, str, Any]]:
    """(line, what, value) of the transcript from line `start`: ("started", thread.started), ("turn", its dict),
    ("verify", verify.completed), ("end", thread.completed); a bad line raises BadInput, a cut last one ends it."""
    from oc_repl.transcript import numbered_events

    pending: dict[str, Any] | None = None
    body: dict[str, Any] = {}
    for number, event in numbered_events(transcript, start):
        if isinstance(event, BadInput):
            if event.cut:  # a line cut by a crash
                return
            raise event
        kind = event.type
        if kind == "thread.started":
            pending = None
            yield number, "started", event
        elif kind == "request.sent":
            pending, body = event.request, event.body  # a retry replaces the request it repeats
        elif kind == "response.received" and pending is not None:
            try:
                yield number, "turn", _turn(pending, event.raw, body)
            except ValueError as exc:
                raise BadInput(transcript, str(exc), number) from None
            pending = None
        elif kind == "verify.completed":
            yield number, "verify", event
        elif kind == "thread.completed":
            yield number, "end", event


def threads(transcript: Path, skipped: Skipped | None = None) -> Iterator[Thread]:
    """The threads of one transcript the model answered, read once; one cut short by a crash ends where the transcript
    does. A thread the model never answered is no episode: `skipped` is told so."""
    thread: Thread | None = None
    for number, what, value in _turns(transcript):
        if what == "started":
            if thread is not None:
                yield from _answered(thread, skipped)
            thread = Thread(number, value)
        elif thread is None:
            continue
        elif what == "turn":
            thread.turns += 1
            thread.with_ids += "prompt_ids" in value and "output_ids" in value
            thread.last = value
        elif what == "verify":
            thread.verify = value
        else:
            thread.end = value
            yield from _answered(thread, skipped)
            thread = None
    if thread is not None:
        yield from _answered(thread, skipped)


def _answered(thread: Thread, skipped: Skipped | None) -> Iterator[Thread]:
    if thread.turns:
        yield thread
    else:
        _no_reply(thread.end, skipped)


def _thread_turns(transcript: Path, thread: Thread) -> Iterator[dict[str, Any]]:
    """The thread's turns, read again from its start."""
    for number, what, value in _turns(transcript, thread.start):
        if what == "turn":
            yield value
        elif what in ("started", "end") and number != thread.start:
            return


def episode(transcript: Path, thread: Thread, fmt: str, extra: dict[str, Any]) -> Episode | str:
    """The thread as a line of `fmt`; why it gives none, for a tokens line of a turn whose ids were not recorded."""
    metadata = {**thread.metadata(), **extra}
    last = thread.last
    if fmt == "atif":
        return _trajectory(transcript, thread, metadata)
    if fmt == "tokens":
        if thread.with_ids < thread.turns:
            return "no token ids (the chat wire, or a prompt sent as text)"
        turns = lambda: (_token_turn(t) for t in _thread_turns(transcript, thread))  # noqa: E731
        return Episode({"format": TOKENS}, turns, {"reward": _reward(metadata), "metadata": metadata})
    before: dict[str, Any] = {
        "format": FORMAT,
        "messages": [*last["messages"], *([last["reply"]] * bool(last["reply"]))],
    }
    if last.get("tools"):
        before["tools"] = last["tools"]
    return Episode(before, lambda: _thread_turns(transcript, thread), {"metadata": metadata})


def _trajectory(transcript: Path, thread: Thread, metadata: dict[str, Any]) -> Episode:
    """The thread as an ATIF trajectory (oc_repl/atif.py), the episode's metadata under its `extra`."""
    from oc_repl.atif import RunRecord, trajectory
    from oc_repl.transcript import numbered_events

    record = RunRecord()
    for number, event in numbered_events(transcript, thread.start):
        if isinstance(event, BadInput) or (event.type == "thread.started" and number != thread.start):
            break  # a cut last line, or the next thread
        record(event)
        if event.type == "thread.completed":
            break
    made = trajectory(record, thread.started.thread_id, __version__)
    assert made is not None  # an answered thread sent a request
    steps = made.pop("steps")
    final = {"final_metrics": made.pop("final_metrics"), "extra": {"metadata": metadata}}
    return Episode(made, lambda: iter(steps), final, key="steps")


def export(path: Path, skipped: Skipped | None = None, fmt: str = "openai-chat") -> Iterator[Episode]:
    """The episodes of a transcript, or of every trial of a bench directory (with the trial's record), in `fmt`;
    `skipped` is told why each thread or trial that gives none is left out."""
    for transcript, extra in _transcripts(path, skipped):
        for thread in threads(transcript, skipped):
            made = episode(transcript, thread, fmt, extra)
            if isinstance(made, str):
                if skipped is not None:
                    skipped(made)
                continue
            yield made


def _transcripts(path: Path, skipped: Skipped | None) -> Iterator[tuple[Path, dict[str, Any]]]:
    if path.is_file():
        yield path, {"transcript": str(path)}
        return
    from oc_repl.bench.read import read_bench
    from oc_repl.bench.results import transcript_of

    for result in read_bench(path)[0]:
        transcript = transcript_of(path, result)
        if transcript is None:
            if skipped is not None:
                skipped(f"no transcript ({result.failure_mode})")
            continue
        bench = {
            "task": result.task,
            "protocol": result.protocol,
            "trial": result.attempt,
            "failure_mode": result.failure_mode,
            "resolved": result.resolved,
        }
        yield transcript, {"transcript": str(transcript), "bench": bench}
