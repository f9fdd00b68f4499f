"""The camel kind as the core sees it: its settings, its deviations from the training harness, and what `--exact`
sets for it (protocols/kind.py)."""

from __future__ import annotations

from typing import Any

from oc_repl.protocols.kind import ProtocolKind
from oc_repl.rows import EVERYWHERE, INTERRUPTION_TOLD, Deviation, row
from oc_repl.training import CAMEL_TRAINING_TURNS

OPTIONS = (
    row(
        "camel_rich",
        "str",
        "14",
        "camel: the release line of rich whose plain-text conversion blocking output goes through, as the toolkit "
        "ran it: 14 (up to 14.3.4, what iter215's training most likely had) or 15 (from April 2026)",
        *EVERYWHERE,
        choices=("14", "15"),
    ),
    row(
        "history",
        "str",
        "training",
        "camel history mode: what the model saw in training, camel<=0.2.85, or standard",
        *EVERYWHERE,
        choices=("training", "camel-0.2.85", "full"),
        exact="training",
    ),
    row(
        "relative_paths",
        "str",
        "workdir",
        "camel: relative file_path of shell_write_content_to_file against the workdir, or / as upstream",
        *EVERYWHERE,
        choices=("workdir", "root"),
        exact="root",
    ),
    row(
        "observation_limit",
        "int",
        None,
        "camel: characters of a tool result the model sees, head and tail kept; 0 = no limit",
        *EVERYWHERE,
        shown="camel's own",
        ge=0,
        exact=0,
    ),
)


def _chat_wire(s: Any) -> bool:
    return not s.text_wire


# What a wire (or a missing tokenizer) cannot give: none of them puts oc-repl's own words in a prompt.
WIRE_ROWS = (
    Deviation(
        "server_renders_tools",
        "camel on the chat wire: the server renders the prompt, and sglang (0.5.23) renders each tool with "
        '`"defer_loading": null` appended',
        kept=_chat_wire,
    ),
    Deviation(
        "calls_may_be_constrained",
        "camel on the chat wire: a server with a tool-call parser may constrain how calls are decoded",
        kept=_chat_wire,
    ),
    Deviation(
        "prompt_not_cut",
        "camel: a prompt over 8192 tokens is refused by the server as an overflow, not cut in the middle",
        kept=lambda s: not s.text_wire or s.tokenizer is None,
    ),
    Deviation(
        "results_not_token_cut",
        "camel without a tokenizer: a tool result over 16 384 tokens is sent whole",
        kept=lambda s: s.tokenizer is None and s.observation_limit == 0,
        default=False,
    ),
)
DEVIATIONS = (
    Deviation(
        "results_cut",
        "camel results cut to 16 384 characters (head and tail)",
        ("observation_limit",),
        lambda s: s.observation_limit != 0,
    ),
    Deviation(
        "relative_paths_in_workdir",
        "relative `file_path` taken against the workdir",
        ("relative_paths",),
        lambda s: s.relative_paths != "root",
    ),
    Deviation(
        "copy_errors_worded",
        "camel: a write upstream's procedure cannot copy (no directory where the file would go) is refused in "
        "oc-repl's words",
    ),
    Deviation(
        "history_reshaped", "camel history as chosen", ("history",), lambda s: s.history != "training", default=False
    ),
    Deviation("own_turn_cap", "12 turns for camel", ("max_turns",), lambda s: s.max_turns != CAMEL_TRAINING_TURNS),
    INTERRUPTION_TOLD,
    Deviation("argument_types_checked", "camel checks argument types and words its own errors"),
    Deviation("null_timeout_bounded", "camel: a `null` timeout means 20 s"),
    Deviation(
        "timed_out_input_refused",
        "camel: a blocking command past its timeout counts as running while it runs; input to it is refused at once",
    ),
    Deviation("no_wall_limit", "camel: calls other than `shell_exec` run to their end"),
    Deviation("ended_session_answered_at_once", "camel: input to a session that ends is answered at once"),
    Deviation("unreadable_calls_named", "camel: every unreadable `<tool_call>` block is named"),
    Deviation("cut_reply_noticed", "camel: a reply cut by the token limit gets a notice"),
    Deviation(
        "arguments_read_as_objects",
        "camel: call arguments written as a JSON string of an object are read as that object, null as none, and the "
        "episode goes on",
    ),
    *WIRE_ROWS,
)

CAMEL = ProtocolKind(
    "camel",
    "oc_repl.protocols.camel.protocol:CamelProtocol",
    exact={"max_turns": CAMEL_TRAINING_TURNS, "wire": "generate"},
    token_ids=True,
    middle_cut=True,
    says_sync=True,
    options=OPTIONS,
    deviations=DEVIATIONS,
)
