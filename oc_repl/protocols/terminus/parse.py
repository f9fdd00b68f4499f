"""terminus (terminal-bench Terminus-2) replies and feedback: pure functions over text, no I/O.

The model answers in JSON or XML; `parse_json` / `parse_xml` turn a reply into keystroke commands, a completion
flag, an error (nothing runs) and warnings, following terminal-bench 0.2.18's parsers rule for rule. Every sentence
the model reads comes from the protocol's templates (`messages.toml`, see `JSON_SPEC` / `XML_SPEC`): the built-in
wording is the project's own, and with the synced upstream templates the output is upstream's byte for byte.

Observation flow, as terminal-bench sends it (so a protocol driving these helpers reproduces it exactly):
- the executor's output is `limit_output(capture)`;
- the completion question uses it as is, while the warnings prompt and the plain observation pass it through
  `limit_output` a second time. The marker added by the first pass makes a cut text longer than the limit, so the
  second pass cuts it again and the count it reports is the size of the first marker, not of the omitted output.
  That is what the evaluated models saw, so it is kept.
"""

from __future__ import annotations

from typing import Literal

from oc_repl.protocols.templates import Templates
from oc_repl.protocols.terminus import json_replies, xml_replies
from oc_repl.protocols.terminus.reply import Command, Findings, Parsed, bullets

__all__ = ["Command", "Findings", "Parsed", "bullets"]

Format = Literal["json", "xml"]
LIMIT = 10000  # bytes of an observation, head and tail halves kept

# The templates every terminus file holds, and the fields each may use.
COMMON_SPEC: dict[str, tuple[str, ...]] = {
    "observation.new": ("content",),
    "observation.screen": ("screen",),
    "output.limit_marker": ("max_bytes", "omitted_bytes"),
    "feedback.error": ("error",),
    "feedback.error_and_warnings": ("error", "warning"),
    "feedback.warnings": ("warning",),
    "prompt.parse_error": ("feedback",),
    "prompt.warnings": ("feedback", "observation"),
    "prompt.confirm": ("terminal_output",),
    "overflow.error": (),
    "overflow.warnings_suffix": ("warning",),
}
JSON_SPEC: dict[str, tuple[str, ...]] = {
    **COMMON_SPEC,
    "feedback.autocorrected": ("fix",),
    "json.error.no_json": (),
    "json.error.invalid_json": ("exc", "content"),
    "json.error.invalid_json_preview": ("exc", "preview"),
    "json.error.not_object": (),
    "json.error.missing_fields": ("fields",),
    "json.error.commands_not_array": (),
    "json.error.command_not_object": ("i",),
    "json.error.command_missing_keystrokes": ("i",),
    "json.error.command_keystrokes_not_string": ("i",),
    "json.warn.no_json_object": (),
    "json.warn.extra_before": (),
    "json.warn.extra_after": (),
    "json.warn.field_not_string": ("field",),
    "json.warn.task_complete_type": (),
    "json.warn.wrong_order": ("found", "expected"),
    "json.warn.command_missing_duration": ("i",),
    "json.warn.command_invalid_duration": ("i",),
    "json.warn.command_unknown_fields": ("i", "fields"),
    "json.warn.command_concatenation": ("i",),
    "json.autofix.close_braces": (),
    "json.autofix.extract_object": (),
}
XML_SPEC: dict[str, tuple[str, ...]] = {
    **COMMON_SPEC,
    "xml.error.no_response": (),
    "xml.error.missing_commands": (),
    "xml.warn.extra_before": (),
    "xml.warn.extra_after": (),
    "xml.warn.multiple_responses": ("count",),
    "xml.warn.missing_section": ("section",),
    "xml.warn.unknown_tag": ("name",),
    "xml.warn.multiple_commands": ("count",),
    "xml.warn.multiple_section": ("section",),
    "xml.warn.wrong_order": ("found", "expected"),
    "xml.warn.empty_commands": (),
    "xml.warn.command_missing_duration": ("i",),
    "xml.warn.command_invalid_duration": ("i", "value"),
    "xml.warn.command_concatenation": ("i",),
    "xml.warn.entity": ("entity", "char"),
    "xml.warn.crlf": (),
    "xml.warn.attribute_unquoted": ("i", "name", "value"),
    "xml.warn.attribute_single_quotes": ("i", "name", "value"),
    "xml.warn.attribute_unknown": ("i", "name"),
}
SPECS: dict[Format, dict[str, tuple[str, ...]]] = {"json": JSON_SPEC, "xml": XML_SPEC}


def parse_json(response: str, m: Templates) -> Parsed:
    """Parse a terminus JSON reply."""
    return json_replies.parse(response, m)


def parse_xml(response: str, m: Templates) -> Parsed:
    """Parse a terminus XML reply."""
    return xml_replies.parse(response, m)


def strip_think(text: str) -> str:
    """Drop a leading `<think>…</think>` block before parsing.

    terminal-bench does not do this (the deviation think_block_stripped, off under `--exact`). Qwen3 writes an empty
    think block even in no-think mode, and the parsers would report it as extra text before the JSON object (or a
    stray tag before `<response>`), turning every well-formed reply into a warning the model never deserved.
    """
    from oc_repl.calls import split_think

    thought, rest = split_think(text)
    # an unclosed block may still hold the reply: the parsers then see everything, as upstream's would
    return text if thought is None or "</think>" not in text else rest


def limit_output(text: str, m: Templates, limit: int = LIMIT) -> str:
    """Keep the first and last `limit // 2` UTF-8 bytes of a long observation, with the marker between them.

    A character cut at either edge is dropped whole and counted as omitted, as terminal-bench does.
    """
    # A lone surrogate (undecodable bytes kept by the sandbox) must not crash the loop; it counts as one byte.
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return text
    half = limit // 2
    head = data[:half].decode("utf-8", "ignore")
    tail = data[-half:].decode("utf-8", "ignore")
    omitted = len(data) - len(head.encode("utf-8")) - len(tail.encode("utf-8"))
    return head + m.render("output.limit_marker", max_bytes=limit, omitted_bytes=omitted) + tail


def feedback(parsed: Parsed, m: Templates) -> str:
    """The parser's verdict as upstream words it: `ERROR: …` with or without `WARNINGS: …`, or the warnings alone."""
    if parsed.error and parsed.warning:
        return m.render("feedback.error_and_warnings", error=parsed.error, warning=parsed.warning)
    if parsed.error:
        return m.render("feedback.error", error=parsed.error)
    return m.render("feedback.warnings", warning=parsed.warning) if parsed.warning else ""


def prompt_observation(obs: str, m: Templates) -> str:
    """The next user message when the reply had no warnings: the observation, limited (again)."""
    return limit_output(obs, m)


def prompt_warnings(parsed: Parsed, obs: str, m: Templates) -> str:
    """The next user message when the reply ran but had warnings."""
    return m.render("prompt.warnings", feedback=feedback(parsed, m), observation=limit_output(obs, m))


def prompt_parse_error(parsed: Parsed, m: Templates) -> str:
    """The next user message when the reply could not be parsed and nothing ran."""
    return m.render("prompt.parse_error", feedback=feedback(parsed, m))


def prompt_confirm(obs: str, m: Templates) -> str:
    """Asked after the first reply that claims completion; a second claim in a row ends the run."""
    return m.render("prompt.confirm", terminal_output=obs)


def prompt_length_overflow(warning: str, m: Templates) -> str:
    """The next user message when the reply hit the output token limit; none of its actions ran.

    `warning` is what the parser found in the cut reply; terminal-bench appends it when there is any. Its message
    names 4096 tokens whatever the real limit is: the figure is part of what the model is told, so it stays.
    """
    suffix = m.render("overflow.warnings_suffix", warning=warning) if warning else ""
    return m.render("overflow.error") + suffix


def salvage_xml(truncated: str, m: Templates, by_text: bool = False) -> str | None:
    """The complete first `<response>` of an XML reply cut by the token limit, if it parses cleanly.

    terminal-bench runs such a salvaged reply instead of reporting the overflow (XML only). It refuses one that
    warns about several blocks, which it tells from its own English warning text; `by_text` does exactly that (without
    the deviation salvage_by_warning_name), otherwise the warnings are told apart by name, whatever their wording.
    """
    commands_end = truncated.find("</commands>")
    if commands_end == -1:
        return None
    end = truncated.find("</response>", commands_end)
    if end == -1:
        return None
    clean = truncated[: end + len("</response>")]
    parsed = parse_xml(clean, m)
    if by_text:
        lowered = parsed.warning.lower()
        several_blocks = "only issue one" in lowered and "block at a time" in lowered
    else:
        several_blocks = bool({"xml.warn.multiple_responses", "xml.warn.multiple_commands"} & set(parsed.warned))
    return None if parsed.error or several_blocks else clean
