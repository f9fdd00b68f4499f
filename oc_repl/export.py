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

Training data must not lose episodes quietly: a line that is not an event, or a request or reply of a shape no server
sends, is a BadInput naming the file and the line. Only a last line cut by a crash is left out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from oc_repl.safejson import BadInput

FORMAT = "oc-repl/openai-chat/1"
TOKENS = "oc-repl/tokens/1"
FORMATS = ("openai-chat", "tokens")


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


def _token_ids(body: dict[str, Any], raw: dict[str, Any]) -> dict[str, list[int]]:
    """The ids of a text wire's turn, where the record has them: the prompt as posted, the reply as generated."""
    posted = body.get("json") if isinstance(body, dict) else None
    found: dict[str, list[int]] = {}
    prompt = (posted or {}).get("input_ids", (posted or {}).get("prompt"))
    if isinstance(prompt, list) and all(isinstance(i, int) for i in prompt):
        found["prompt_ids"] = prompt
    output = raw.get("output_ids")
    if isinstance(output, list) and all(isinstance(i, int) for i in output):
        found["output_ids"] = output
        logprobs = _logprobs(raw)
        if logprobs is not None and [entry[1] for entry in logprobs] == output:
            found["output_logprobs"] = [entry[0] for entry in logprobs]
    return found


def _logprobs(raw: dict[str, Any]) -> list[list[Any]] | None:
    """sglang's `[logprob, token id, text]` of each generated token: a streamed reply's as the client gathered them,
    an unstreamed one's in its meta_info."""
    found = raw.get("output_token_logprobs", (raw.get("meta_info") or {}).get("output_token_logprobs"))
    ok = isinstance(found, list) and all(isinstance(e, list) and len(e) >= 2 for e in found)
    return found if ok else None


def token_episode(episode: dict[str, Any]) -> dict[str, Any] | str:
    """An episode (the openai-chat format's) as token data; why it has none, when a turn's ids were not recorded."""
    turns = []
    for turn in episode["turns"]:
        prompt, output = turn.get("prompt_ids"), turn.get("output_ids")
        if prompt is None or output is None:
            return "no token ids (the chat wire, or a prompt sent as text)"
        mask = [0] * len(prompt) + [1] * len(output)
        logprobs = turn.get("output_logprobs")
        turns.append({"prompt_ids": prompt, "output_ids": output, "output_logprobs": logprobs, "loss_mask": mask})
    return {"format": TOKENS, "turns": turns, "reward": _reward(episode["metadata"]), "metadata": episode["metadata"]}


def _reward(metadata: dict[str, Any]) -> float | None:
    """The episode's reward: the score a task's tests wrote, else the verdict (1 verified, 0 otherwise; a tampered
    episode 0 whatever its tests said); none where no verifier ran."""
    if metadata["status"] == "tampered":
        return 0.0
    if metadata["reward"] is not None:
        return metadata["reward"]
    return float(metadata["verified"]) if metadata["verifier_ran"] else None


def _turn(request: dict[str, Any], raw: dict[str, Any], body: dict[str, Any] | None = None) -> dict[str, Any]:
    options = dict(request)
    messages, tools = options.pop("messages", []), options.pop("tools", None)
    if not isinstance(messages, list) or not isinstance(tools, list | None):
        raise ValueError("a request whose messages or tools are not lists")
    reply, finish = _reply_message(raw)
    turn = {"messages": messages, "tools": tools, "options": options, "reply": reply, "finish_reason": finish}
    return {**turn, **_token_ids(body or {}, raw)}


def _episode(started: Any, turns: list[dict[str, Any]], end: Any, verify: Any) -> dict:
    last = turns[-1]
    episode: dict[str, Any] = {
        "format": FORMAT,
        "messages": [*last["messages"], *([last["reply"]] * bool(last["reply"]))],
    }
    if last.get("tools"):
        episode["tools"] = last["tools"]
    episode["turns"] = turns
    episode["metadata"] = {
        "task_name": started.task_name,
        "task": started.task,
        "protocol": started.protocol,
        "model": started.model,
        "wire": started.wire,
        # the run's sampling and its protocol's own settings (camel: history, rich's line), as thread.started has them
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
    return episode


Skipped = Callable[[str], None]  # told why each thread or trial that holds no episode is left out


def _no_reply(end: Any, skipped: Skipped | None) -> None:
    if skipped is not None:
        status = end.status if end is not None else "cut short"
        skipped(f"no model reply ({status})")


def episodes(transcript: Path, skipped: Skipped | None = None) -> Iterator[dict[str, Any]]:
    """The episodes of one transcript; one cut short by a crash ends where the transcript does. A thread the model
    never answered is no episode: `skipped` is told so."""
    from oc_repl.transcript import numbered_events

    started: Any = None
    turns: list[dict[str, Any]] = []
    pending: dict[str, Any] | None = None
    body: dict[str, Any] = {}
    verify: Any = None
    for number, event in numbered_events(transcript):
        if isinstance(event, BadInput):
            if event.cut:  # a line cut by a crash
                break
            raise event
        kind = event.type
        if kind == "thread.started":
            if started is not None and turns:
                yield _episode(started, turns, None, verify)
            elif started is not None:
                _no_reply(None, skipped)
            started, turns, pending, verify = event, [], None, None
        elif kind == "request.sent":
            pending, body = event.request, event.body  # a retry replaces the request it repeats
        elif kind == "response.received" and pending is not None:
            try:
                turns.append(_turn(pending, event.raw, body))
            except ValueError as exc:
                raise BadInput(transcript, str(exc), number) from None
            pending = None
        elif kind == "verify.completed":
            verify = event
        elif kind == "thread.completed" and started is not None:
            if turns:
                yield _episode(started, turns, event, verify)
            else:
                _no_reply(event, skipped)
            started, turns = None, []
    if started is not None and turns:
        yield _episode(started, turns, None, verify)
    elif started is not None:
        _no_reply(None, skipped)


def export(path: Path, skipped: Skipped | None = None, fmt: str = "openai-chat") -> Iterator[dict[str, Any]]:
    """Episodes of a transcript, or of every trial of a bench directory (with the trial's record), in `fmt`;
    `skipped` is told why each thread or trial that gives none is left out."""
    if fmt != "tokens":
        yield from _export(path, skipped)
        return
    for episode in _export(path, skipped):
        tokens = token_episode(episode)
        if isinstance(tokens, str):
            if skipped is not None:
                skipped(tokens)
            continue
        yield tokens


def _export(path: Path, skipped: Skipped | None) -> Iterator[dict[str, Any]]:
    if path.is_file():
        for episode in episodes(path, skipped):
            episode["metadata"]["transcript"] = str(path)
            yield episode
        return
    from oc_repl.bench.results import load_results, transcript_of

    for result in load_results(path):
        transcript = transcript_of(path, result)
        if transcript is None:
            if skipped is not None:
                skipped(f"no transcript ({result.failure_mode})")
            continue
        for episode in episodes(transcript, skipped):
            episode["metadata"]["transcript"] = str(transcript)
            episode["metadata"]["bench"] = {
                "task": result.task,
                "protocol": result.protocol,
                "trial": result.attempt,
                "failure_mode": result.failure_mode,
                "resolved": result.resolved,
            }
            yield episode
