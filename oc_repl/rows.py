"""What the core and each kind declare: rows of the settings table (`Option`, where a setting is taken) and rows of
the deviations table (`Deviation`, a way oc-repl departs from upstream), and the deviations in force as a part reads
them. The tables are the compositions of the core's rows and the kinds' (`config.OPTIONS`, `deviations.rows`). Plain
data, imported by every kind's descriptor: it imports nothing of oc-repl's but the training facts."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from oc_repl.training import SAMPLING_PRESETS

# Where a setting is taken.
FLAG = "flag"  # `oc-repl run`, the shell (and before a subcommand), `bench`
RUN = "run"  # `oc-repl run` alone
FILE = "file"  # the config file, at top level and in its profiles
HARBOR = "harbor"  # the Harbor agent's `--ak key=value`
TRIAL = "trial"  # set by `bench` for each trial: refused on its command line, left out of the config file's values
DOCTOR = "doctor"  # `oc-repl doctor`
EVERYWHERE = (FLAG, FILE, HARBOR)

_TYPES: dict[str, type] = {"str": str, "bool": bool, "int": int, "float": float}


@dataclass(frozen=True)
class Option:
    """A row: what the surfaces are generated from."""

    name: str
    kind: str  # str, int, float, bool or Path
    optional: bool  # None is a value of it
    default: Any
    help: str
    on: frozenset[str]
    env: str | None = None
    choices: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()
    path: str | None = None
    shown: str | None = None
    secret: bool = False
    bounds: dict[str, float] = field(default_factory=dict)
    exact: Any = None  # the value `--exact` sets it to (None: left as it is)

    @property
    def flag(self) -> str:
        return self.flags[0]

    @property
    def negation(self) -> str | None:
        """`--no-x` for a switch that is on by default: the only way to turn it off."""
        return f"--no-{self.flag[2:]}" if self.kind == "bool" and self.default is True else None

    def described(self, shown: str | None = None) -> str:
        """The help, with the default as the table holds it (or in the words a surface has for it: `shown`)."""
        if shown or self.shown:
            default = shown or self.shown
        elif self.kind == "bool":
            default = "on" if self.default else ""
        elif self.default is None:
            default = ""
        else:
            default = f"{self.default:g}" if isinstance(self.default, float) else str(self.default)
        if default and self.env:
            default = f"${self.env}, else {default}"
        return f"{self.help} (default: {default})." if default else f"{self.help}."

    def checked(self, value: Any) -> Any:
        """A value of the row's type (ints pass for floats, strings for paths), within its range and choices."""
        from pathlib import Path

        if value is None and self.optional:
            return None
        kind = self.kind
        if kind == "Path" and isinstance(value, str | Path):
            value = Path(value)
        elif kind == "float" and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        expected = _TYPES.get(kind, Path)
        if not isinstance(value, expected) or (kind == "int" and isinstance(value, bool)):
            raise ValueError(f"expected {kind}, got {value!r}")
        if self.choices and value not in self.choices:
            raise ValueError(f"expected one of {', '.join(self.choices)}, got {value!r}")
        signs = {"ge": (">=", lambda v, b: v >= b), "gt": (">", lambda v, b: v > b), "le": ("<=", lambda v, b: v <= b)}
        for rule, bound in self.bounds.items():
            sign, holds = signs[rule]
            if not holds(value, bound):
                raise ValueError(f"must be {sign} {bound}, got {value!r}")
        return value


def row(name: str, kind: str, default: Any, help: str, *on: str, optional: bool = False, **rules: Any) -> Option:
    """A kind's row. `rules`: env, choices, flags (when not `--the-name`), path ("file", "existing file", "existing
    dir" or "existing path"), shown (the default in words, for a None that means something), secret, exact (the value
    `--exact` sets), and the bounds ge, gt, le."""
    bounds = {key: rules.pop(key) for key in ("ge", "gt", "le") if key in rules}
    flags = rules.pop("flags", ()) or (f"--{name.replace('_', '-')}",)
    return Option(
        name, kind, optional or default is None, default, help, frozenset(on), flags=flags, bounds=bounds, **rules
    )


@dataclass(frozen=True)
class Deviation:
    """A row of the README's "Training-exact runs" table: oc-repl's behaviour as its first column words it (`name`
    says what oc-repl does differently), whether oc-repl does it by default and, for a row an option turns off, the
    settings that name it and the test of a run's settings that keeps it on."""

    name: str
    text: str
    options: tuple[str, ...] = ()
    kept: Callable[[Any], bool] | None = None  # (a run's settings) -> on
    default: bool = True


class Deviations:
    """The deviations in force among some rows: an attribute per row, True where oc-repl does what the row's name
    says, False where it does as upstream. A part reads the rows it knows; naming another is an error."""

    def __init__(self, rows: Iterable[Deviation], on: Iterable[str] | None = None) -> None:
        self.rows = {r.name: r for r in rows}
        chosen = {n for n, r in self.rows.items() if r.default} if on is None else set(on)
        if unknown := chosen - set(self.rows):
            raise ValueError(f"no such deviation: {', '.join(sorted(unknown))}")
        self.on = frozenset(chosen)

    def __getattr__(self, name: str) -> bool:
        rows = self.__dict__.get("rows", {})
        if name not in rows:
            raise AttributeError(name)
        return name in self.on

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Deviations) and (self.rows.keys(), self.on) == (other.rows.keys(), other.on)

    def __hash__(self) -> int:
        return hash(self.on)

    def __repr__(self) -> str:
        return f"Deviations({', '.join(self.names())})"

    def names(self) -> list[str]:
        """The names of the deviations in force, in the rows' order."""
        return [name for name in self.rows if name in self.on]

    def replace(self, **changes: bool) -> Deviations:
        if unknown := set(changes) - set(self.rows):
            raise ValueError(f"no such deviation: {', '.join(sorted(unknown))}")
        on = {n for n in self.rows if changes.get(n, n in self.on)}
        return Deviations(self.rows.values(), on)


def _own_sampling(s: Any) -> bool:
    return s.sampling_options() != SAMPLING_PRESETS["training"]


# The core's rows: the run's own loop and client concern every protocol; what a person at the shell does concerns
# the protocols that tell the model of it (their kinds list the row).
INTERRUPTION_TOLD = Deviation("interruption_told", "a turn a person interrupts is said to be interrupted")
EVERY_PROTOCOL = (
    Deviation(
        "own_sampling",
        "sampling T 0.7, top-p 0.8, 4096 tokens",
        ("sampling", "temperature", "top_p", "max_tokens", "seed"),
        _own_sampling,
    ),
    Deviation("loop_detection", "loop detection", ("loop_limit",), lambda s: s.loop_limit != 0),
)
