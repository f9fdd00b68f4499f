"""camel-terminal-toolkit: which tool calls of a reply run, and what the model is told about the ones that cannot.

Two rule sets: the project's (every unreadable block is named, with what was wrong with it; a cut reply gets a notice)
and, where those deviations are off (`--exact`), the training harness's (sglang's parser ran the complete blocks of
known tools; the harness reported only the first block whose JSON did not parse, and only when no call was parsed).
"""

from __future__ import annotations

import json
import re
from typing import Any

from oc_repl.calls import parse_arguments, salvage_calls
from oc_repl.protocols.camel.tools import SIGNATURES
from oc_repl.protocols.templates import Templates
from oc_repl.types import Reply, ToolCall

# The training harness's tool-call block, exactly: its parse-error check matched only this framing.
_TRAINING_BLOCK = re.compile(r"<tool_call>\n(.*?)\n</tool_call>", re.S)


def calls_and_feedback(reply: Reply, agent: Templates, notices: Templates) -> tuple[list[ToolCall], list[str]]:
    """The calls to run and what the model is told about the ones that cannot run (the project's rules)."""
    if reply.cut_off:
        return [], [notices.render("cut_off")]
    reasons = [unreadable(block, agent, notices) for block in reply.malformed_calls]
    broken = any(reason is not None for reason in reasons)
    feedback = []
    for block, reason in zip(reply.malformed_calls, reasons, strict=True):
        if reason is not None:
            feedback.append(reason)
        elif broken:  # readable, but a sibling in the same reply was not, and none of the reply's calls ran
            feedback.append(notices.render("held_back", name=_call_name(block)))
    return list(reply.tool_calls), feedback


def unreadable(block: str, agent: Templates, notices: Templates) -> str | None:
    """Why a <tool_call> block cannot run, as the model is told it; None when it is a readable call."""
    body = block.strip().removeprefix("<tool_call>")
    if not body.rstrip().endswith("</tool_call>"):
        return _not_a_call(notices, "unterminated", block)
    body = body.rstrip().removesuffix("</tool_call>").strip()
    try:
        parsed = json.loads(body)
    except json.JSONDecodeError as exc:
        return agent.render("parse_error", error=exc, content=body[:200])
    except RecursionError:
        return _not_a_call(notices, "not_object", block)
    if not isinstance(parsed, dict):
        return _not_a_call(notices, "not_object", block)
    if not isinstance(parsed.get("name"), str) or not parsed["name"]:
        return _not_a_call(notices, "no_name", block)
    arguments = parsed["arguments"] if "arguments" in parsed else parsed.get("parameters", {})
    if arguments is not None and parse_arguments(arguments) is None:
        return _not_a_call(notices, "arguments_not_object", block, tool=parsed["name"], got=_json_kind(arguments))
    return None


def _not_a_call(notices: Templates, why: str, block: str, **fields: str) -> str:
    reason = notices.render(why, **fields)
    return notices.render("not_a_call", reason=reason, content=block[:200])


def training_calls(reply: Reply) -> tuple[list[ToolCall], tuple[str, str] | None]:
    """The calls as training ran them, or the error and text of the block its harness reported.

    sglang's qwen25 parser ran every complete block whose name is a tool (unknown names were dropped), also in
    a reply cut by the token limit; the harness looked for an unreadable block only when no call was parsed,
    reported the first one, and a reply with neither ended the episode. A server's native call whose arguments do not
    parse (empty ones included: camel-ai 0.2.90 never takes "" for {}) counts as the block it stands for.
    """
    calls = list(reply.tool_calls)
    if reply.truncated:  # the client holds back a cut reply's calls; training ran the complete ones
        calls += salvage_calls("\n".join(reply.malformed_calls))[0]
    calls = [call for call in calls if call.name in SIGNATURES]
    if calls:
        return calls, None
    text = reply.raw_content
    if reply.truncated and not reply.cut_off:  # native calls whose arguments did not parse, as their blocks would be
        text = "\n".join([text, *reply.malformed_calls])
    for match in _TRAINING_BLOCK.finditer(text):
        try:
            json.loads(match.group(1).strip())
        except (json.JSONDecodeError, RecursionError) as exc:
            return [], (str(exc), match.group(1))
    return [], None


def _call_name(block: str) -> str:
    try:
        return str(json.loads(block.strip().removeprefix("<tool_call>").removesuffix("</tool_call>"))["name"])
    except (ValueError, KeyError, TypeError, RecursionError):
        return "tool call"


def _json_kind(value: Any) -> str:
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else f"{type(value).__name__}"
