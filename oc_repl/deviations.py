"""Every way oc-repl departs from upstream (camel's training harness, terminal-bench's Terminus-2), each by name.

`Deviations` holds one field per row of the README's "Training-exact runs" table (a test holds the two together):
the field's name says what oc-repl does differently, its default is what oc-repl does with default settings, and its
`Row` carries the row's text, whether it concerns every protocol (else the protocol kinds that list it do:
protocols/kinds.py) and, when an option turns it off, the option and the test of the settings that keeps it on. A run
derives the object from its settings (`from_settings`): a row with an option
follows the option's value, a row without one is on unless `--exact`, and `--exact`'s settings turn every row off
(`none()`; an explicit `--max-turns`, the run's budget, aside). Code branches on the field a behaviour is about,
never on `--exact` itself; `thread.started` lists the names in force.

A new deviation is a field here, a row in the table, and its name in the kinds it concerns.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from oc_repl.training import CAMEL_TRAINING_TURNS, SAMPLING_PRESETS

if TYPE_CHECKING:
    from oc_repl.config import RunSettings


@dataclass(frozen=True)
class Row:
    """A row of the table: oc-repl's behaviour as its first column words it, whether it concerns every protocol (the
    run's own loop and client; the others concern the protocol kinds that list them, protocols/kinds.py), and for a
    row with an option, the settings that name it and the test that keeps it on."""

    text: str
    options: tuple[str, ...] = ()
    kept: Callable[[RunSettings], bool] | None = None
    every: bool = False


def _row(
    text: str,
    options: tuple[str, ...] = (),
    kept: Callable[[RunSettings], bool] | None = None,
    default: bool = True,
    every: bool = False,
) -> Any:
    return field(default=default, metadata={"row": Row(text, options, kept, every)})


def _chat_wire(s: RunSettings) -> bool:
    return not s.text_wire


def _own_sampling(s: RunSettings) -> bool:
    return s.sampling_options() != SAMPLING_PRESETS["training"]


@dataclass(frozen=True)
class Deviations:
    """The deviations in force: True where oc-repl does what the field names, False where it does as upstream."""

    results_cut: bool = _row(
        "camel results cut to 16 384 characters (head and tail)",
        ("observation_limit",),
        lambda s: s.observation_limit != 0,
    )
    relative_paths_in_workdir: bool = _row(
        "relative `file_path` taken against the workdir",
        ("relative_paths",),
        lambda s: s.relative_paths != "root",
    )
    own_sampling: bool = _row(
        "sampling T 0.7, top-p 0.8, 4096 tokens",
        ("sampling", "temperature", "top_p", "max_tokens"),
        _own_sampling,
        every=True,
    )
    history_reshaped: bool = _row(
        "camel history as chosen", ("history",), lambda s: s.history != "training", default=False
    )
    own_turn_cap: bool = _row("12 turns for camel", ("max_turns",), lambda s: s.max_turns != CAMEL_TRAINING_TURNS)
    loop_detection: bool = _row("loop detection", ("loop_limit",), lambda s: s.loop_limit != 0, every=True)
    returns_when_idle: bool = _row(
        "terminus returns once the shell is provably idle", ("wait",), lambda s: s.wait != "exact"
    )
    think_block_stripped: bool = _row("a leading think block is stripped before terminus parsing")
    only_parse_errors_stop: bool = _row("terminus stops a reply only on a real parse error")
    salvage_by_warning_name: bool = _row("terminus-xml tells a cut reply's several-blocks warnings by their names")
    all_keys_typed: bool = _row("terminus types keys starting with `-` and keys of any length")
    declined_keys_told: bool = _row("terminus: keystrokes a person declines are named ahead of the screen")
    interruption_told: bool = _row("a turn a person interrupts is said to be interrupted")
    argument_types_checked: bool = _row("camel checks argument types and words its own errors")
    null_timeout_bounded: bool = _row("camel: a `null` timeout means 20 s")
    timed_out_input_refused: bool = _row(
        "camel: a blocking command past its timeout counts as running while it runs; input to it is refused at once",
    )
    no_wall_limit: bool = _row("camel: calls other than `shell_exec` run to their end")
    ended_session_answered_at_once: bool = _row("camel: input to a session that ends is answered at once")
    unreadable_calls_named: bool = _row("camel: every unreadable `<tool_call>` block is named")
    cut_reply_noticed: bool = _row("camel: a reply cut by the token limit gets a notice")
    # What the chat wire cannot give: the server, not oc-repl, renders the prompt and decodes the calls.
    server_renders_tools: bool = _row(
        "camel on the chat wire: the server renders the prompt, and sglang rewrites the tools (their `function` "
        "wrapper dropped, keys reordered)",
        kept=_chat_wire,
    )
    calls_may_be_constrained: bool = _row(
        "camel on the chat wire: a server with a tool-call parser may constrain how calls are decoded",
        kept=_chat_wire,
    )  # fmt: skip
    prompt_not_cut: bool = _row(
        "camel: a prompt over 8192 tokens is refused by the server as an overflow, not cut in the middle",
        kept=lambda s: not s.text_wire or s.tokenizer is None,
    )
    results_not_token_cut: bool = _row(
        "camel without a tokenizer: a tool result over 16 384 tokens is sent whole",
        kept=lambda s: s.tokenizer is None and s.observation_limit == 0,
        default=False,
    )

    @classmethod
    def rows(cls) -> dict[str, Row]:
        return {f.name: f.metadata["row"] for f in dataclasses.fields(cls)}

    @classmethod
    def none(cls) -> Deviations:
        """Upstream's behaviour throughout: what `--exact` runs."""
        return cls(**dict.fromkeys(cls.rows(), False))

    @classmethod
    def concerning(cls, listed: frozenset[str]) -> set[str]:
        """The rows that concern a protocol whose kind lists `listed`: those, and those of every protocol."""
        return {name for name, row in cls.rows().items() if row.every or name in listed}

    @classmethod
    def from_settings(cls, settings: RunSettings) -> Deviations:
        """The deviations a run's settings leave on, among those that concern its protocol."""
        concern = cls.concerning(settings.protocol_kind().deviations)
        on = {
            name: name in concern and (row.kept(settings) if row.kept else not settings.exact)
            for name, row in cls.rows().items()
        }
        return cls(**on)

    def names(self) -> list[str]:
        """The names of the deviations in force, in the table's order."""
        return [name for name in self.rows() if getattr(self, name)]


DEFAULTS = Deviations()  # oc-repl's own behaviour, for a protocol built without a run's settings
# What a wire (or a missing tokenizer) cannot give: none of them puts oc-repl's own words in a prompt.
WIRE_ROWS = frozenset({"server_renders_tools", "calls_may_be_constrained", "prompt_not_cut", "results_not_token_cut"})
