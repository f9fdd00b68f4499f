"""The run settings: one table, from which every surface that takes them is made.

Each field of `RunSettings` declares, in one place, its type and default, its bounds or choices, its help, its
environment variable and the surfaces that take it (below). From the table come `oc-repl run`'s, the shell's,
`bench`'s and `doctor`'s click options (oc_repl/cli), the config file's keys and the data a child run is given
(oc_repl/sources.py), Harbor's `--ak` options (oc_repl/integrations/harbor/agent.py) and the checks of `validate`.

Settings are a plain dataclass checked by the few rules below (types, ranges, choices): they are validated on every
run before its first request, and building a pydantic model for them cost more start-up time than the rest of a run's
imports together.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oc_repl.apikey import KEY_ENV, read_key_file
from oc_repl.client.wires import CHAT, TEXT_WIRES, WIRES
from oc_repl.errors import UsageError
from oc_repl.training import SAMPLING_PRESETS

if TYPE_CHECKING:
    from oc_repl.protocols.kinds import ProtocolKind

DEFAULT_API_BASE = "http://127.0.0.1:30000/v1"  # sglang's default port

# Where a setting is taken.
FLAG = "flag"  # `oc-repl run`, the shell (and before a subcommand), `bench`
RUN = "run"  # `oc-repl run` alone
FILE = "file"  # the config file, at top level and in its profiles
HARBOR = "harbor"  # the Harbor agent's `--ak key=value`
TRIAL = "trial"  # set by `bench` for each trial: refused on its command line, left out of the config file's values
DOCTOR = "doctor"  # `oc-repl doctor`
EVERYWHERE = (FLAG, FILE, HARBOR)


def setting(
    default: Any,
    help: str,
    *on: str,
    env: str | None = None,
    choices: tuple[str, ...] = (),
    flags: tuple[str, ...] = (),
    path: str | None = None,
    shown: str | None = None,
    secret: bool = False,
    **bounds: float,
) -> Any:
    """One row of the table. `flags`: the flag's names when not `--the-name`; `path`: "file", "existing file",
    "existing dir" or "existing path" (either), as a flag checks it; `shown`: the default in words, for a None that
    means something; `secret`: kept out of reprs, and a warning when it is typed; `bounds`: ge, gt, le."""
    rules = {"help": help, "on": frozenset(on), "env": env, "choices": choices, "flags": flags, "path": path}
    rules.update(shown=shown, secret=secret, bounds=bounds)
    return field(default=default, repr=not secret, metadata=rules)


@dataclass(kw_only=True)
class RunSettings:
    """Everything a run needs, checked once after flags, environment and file are merged (see `validate`)."""

    api_base: str = setting(DEFAULT_API_BASE, "OpenAI-compatible base URL", *EVERYWHERE, DOCTOR, env="OPENAI_BASE_URL")
    api_key: str = setting(
        "EMPTY",
        "API key; never written to records; visible to other users until the options are parsed (a warning)",
        FLAG,
        FILE,
        DOCTOR,
        env=KEY_ENV,
        secret=True,
    )
    api_key_file: Path | None = setting(  # where the key is read from, when given (oc_repl/apikey.py)
        None, "File holding the API key on one line (config key api_key_file)", FLAG, FILE, DOCTOR, path="file"
    )
    model: str | None = setting(None, "Model id", *EVERYWHERE, DOCTOR, shown="the first id the server lists")
    protocol: str = setting(
        "camel-terminal-toolkit", "camel-terminal-toolkit, terminus-json, terminus-xml or raw", *EVERYWHERE
    )
    history: str = setting(
        "training",
        "camel history mode: what the model saw in training, camel<=0.2.85, or standard",
        *EVERYWHERE,
        choices=("training", "camel-0.2.85", "full"),
    )
    system: str | None = setting(None, "raw: a system message, as TEXT or @FILE", FLAG, FILE)
    relative_paths: str = setting(
        "workdir",
        "camel: relative file_path of shell_write_content_to_file against the workdir, or / as upstream",
        *EVERYWHERE,
        choices=("workdir", "root"),
    )
    wait: str = setting(
        "detect",
        "terminus: detect, return once the shell is provably idle; exact, sleep every duration",
        *EVERYWHERE,
        choices=("detect", "exact"),
    )
    sandbox: str = setting(
        "local:.", "Where commands run: local:<dir>, docker:<container>, docker-image:<image>", FLAG, FILE, TRIAL
    )
    confine: bool = setting(
        True,
        "local: run the model's commands in bubblewrap: the host read-only, the sandbox directory and a private /tmp "
        "writable, no network",
        FLAG,
        FILE,
    )
    network: bool = setting(False, "local: let confined commands use the network", FLAG, FILE)
    writable_vcs: bool = setting(
        False,
        "local: let confined commands write the sandbox directory's .git, .hg and .svn",
        FLAG,
        FILE,
        shown="read-only",
    )
    workdir: str | None = setting(
        None,
        "Working directory of the commands in a container (docker sandboxes, Harbor's environment)",
        *EVERYWHERE,
        shown="/workspace, as trained",
    )
    docker_network: str | None = setting(None, "Network of a created container", FLAG, FILE, shown="none; a task's own")
    keep: bool = setting(False, "Keep a created container and print its name", FLAG, TRIAL)
    # every sandbox oc-repl makes: a local: one (a cgroup, else rlimits) and each container it creates
    max_processes: int = setting(
        4096,
        "Processes the sandbox may run at once: local: and every container oc-repl creates",
        FLAG,
        FILE,
        ge=16,
        le=4194304,
    )
    memory_mb: int = setting(  # swap included
        4096,
        "Memory (swap included) of the sandbox, in MB: local: and every container oc-repl creates; a task's own "
        "memory_mb wins for its container",
        FLAG,
        FILE,
        ge=64,
        le=1 << 24,
    )
    observation_limit: int | None = setting(
        None,
        "camel: characters of a tool result the model sees, head and tail kept; 0 = no limit",
        *EVERYWHERE,
        shown="camel's own",
        ge=0,
    )
    max_turns: int = setting(12, "Model turns per task", *EVERYWHERE, ge=1)
    loop_limit: int = setting(3, "Identical turns in a row that stop the run; 0 off", *EVERYWHERE, ge=0)
    sampling: str = setting(
        "default",
        "Sampling preset: default (T 0.7, top-p 0.8, 4096 tokens) or training (T 1.0, top-p 1.0, 8192)",
        *EVERYWHERE,
        choices=("default", "training"),
    )
    temperature: float | None = setting(
        None, "Overrides the preset's temperature", *EVERYWHERE, shown="the preset's", ge=0
    )
    top_p: float | None = setting(None, "Overrides the preset's top-p", *EVERYWHERE, shown="the preset's", gt=0, le=1)
    max_tokens: int | None = setting(
        None, "Overrides the preset's max new tokens", *EVERYWHERE, shown="the preset's", ge=1
    )
    wire: str = setting(
        CHAT.name,
        "How prompts reach the server: chat (/v1/chat/completions, the server renders), completions (/v1/completions) "
        "or generate (sglang's /generate), both rendered by oc-repl with --tokenizer's chat template",
        *EVERYWHERE,
        DOCTOR,
        choices=tuple(WIRES),
        shown="chat; generate under --exact for camel",
    )
    tokenizer: Path | None = setting(
        None,
        "The served model's folder (or its tokenizer.json, tokenizer_config.json or chat_template.jinja): its chat "
        "template and tokenizer, for the completions and generate wires",
        *EVERYWHERE,
        DOCTOR,
        path="existing path",
        shown="none",
    )
    stream: bool = setting(True, "Stream replies", *EVERYWHERE)
    retries: int = setting(3, "Retries for server faults", *EVERYWHERE, ge=0)
    idle_timeout: float = setting(120.0, "Seconds a stream may stall before it is retried", *EVERYWHERE, gt=0)
    request_timeout: float = setting(
        600.0, "Seconds an unstreamed reply may take, whole, before it is retried", *EVERYWHERE, gt=0
    )
    verify: str | None = setting(
        None, "Command run in the sandbox after the agent; exit 0 = success", FLAG, FILE, TRIAL
    )
    verify_file: Path | None = setting(
        None,
        "Script copied into the sandbox and run with bash after the agent",
        FLAG,
        FILE,
        TRIAL,
        path="existing file",
    )
    verify_timeout: float = setting(600.0, "Seconds the verifier may take", FLAG, FILE, TRIAL, gt=0)
    timeout: float | None = setting(  # seconds for the agent (the verifier has its own)
        None,
        "Seconds the agent may take in all (model and commands; 0 = no limit); a task's own agent timeout applies "
        "too. The verifier still runs after it (exit 7 unless it passes)",
        FLAG,
        FILE,
        shown="no limit",
        ge=0,
    )
    transcript: Path | None = setting(
        None, "JSONL transcript path", FLAG, TRIAL, path="file", shown="under ~/.local/state/oc-repl/sessions/"
    )
    yes: bool = setting(False, "Consent to run model-chosen commands on this host", FLAG, flags=("--yes", "-y"))
    exact: bool = setting(
        False,
        "Run exactly as the checkpoint was trained (camel) or evaluated (terminus): synced upstream assets only, "
        "every deviation off (see `oc-repl protocols sync`)",
        *EVERYWHERE,
    )
    json_output: bool = setting(False, "JSONL events on stdout instead of the answer", RUN, flags=("--json",))
    task_name: str | None = setting(
        None, "Task name shown to the model", RUN, FILE, HARBOR, TRIAL, shown="derived from the instruction"
    )
    task: Path | None = setting(
        None, "A terminal-bench task directory: its image, instruction and tests", RUN, TRIAL, path="existing dir"
    )
    image: str | None = setting(
        None, "With --task: use this image instead of building the task's Dockerfile", RUN, TRIAL
    )
    # the names given by a flag, the environment or a file (not defaults): --exact refuses the conflicting ones
    given: frozenset[str] = field(default=frozenset(), repr=False, compare=False)
    # the config file named with --config, which a local: sandbox hides as it does the default one
    config_file: Path | None = field(default=None, repr=False, compare=False)

    def replace(self, **changes: Any) -> RunSettings:
        return dataclasses.replace(self, **changes)

    def with_exact(self) -> RunSettings:
        """The settings `--exact` runs with (oc_repl/exact.py)."""
        from oc_repl.exact import exact_settings

        return exact_settings(self, lambda name: OPTIONS[name].flag) if self.exact else self

    def protocol_kind(self) -> ProtocolKind:
        """What the core knows of the protocol (protocols/kinds.py)."""
        from oc_repl.protocols import kind_of

        return kind_of(self.protocol)

    @property
    def text_wire(self) -> bool:
        """The prompt is rendered by oc-repl (and tokenized, when the tokenizer has a tokenizer.json)."""
        return self.wire in TEXT_WIRES

    def sampling_options(self) -> dict[str, Any]:
        chosen = dict(SAMPLING_PRESETS[self.sampling])
        for key in ("temperature", "top_p", "max_tokens"):
            if getattr(self, key) is not None:
                chosen[key] = getattr(self, key)
        return chosen


@dataclass(frozen=True)
class Option:
    """A row of the table, read: what the surfaces are generated from."""

    name: str
    kind: str  # str, int, float, bool or Path
    optional: bool  # None is a value of it
    default: Any
    help: str
    on: frozenset[str]
    env: str | None
    choices: tuple[str, ...]
    flags: tuple[str, ...]
    path: str | None
    shown: str | None
    secret: bool
    bounds: dict[str, float]

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


def _read(spec: dataclasses.Field[Any]) -> Option:
    declared = str(spec.type)
    meta = dict(spec.metadata)
    flags = meta.pop("flags") or (f"--{spec.name.replace('_', '-')}",)
    return Option(spec.name, declared.split(" |")[0], "None" in declared, spec.default, flags=flags, **meta)


OPTIONS: dict[str, Option] = {spec.name: _read(spec) for spec in dataclasses.fields(RunSettings) if spec.metadata}


def options_on(surface: str) -> list[Option]:
    """The table's rows that `surface` takes, in the table's order."""
    return [option for option in OPTIONS.values() if surface in option.on]


def check_sandbox_spec(spec: str) -> None:
    """A sandbox is named scheme:target of a known kind; anything else is refused at once, not at the first task."""
    from oc_repl.sandbox.kinds import kind_of

    kind_of(spec)


def _checked(option: Option, value: Any) -> Any:
    """A value of the field's type (ints pass for floats, strings for paths), within its range and choices."""
    if value is None and option.optional:
        return None
    kind = option.kind
    if kind == "Path" and isinstance(value, str | Path):
        value = Path(value)
    elif kind == "float" and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    expected = {"str": str, "bool": bool, "int": int, "float": float, "Path": Path}[kind]
    if not isinstance(value, expected) or (kind == "int" and isinstance(value, bool)):
        raise ValueError(f"expected {kind}, got {value!r}")
    if option.choices and value not in option.choices:
        raise ValueError(f"expected one of {', '.join(option.choices)}, got {value!r}")
    signs = {"ge": (">=", lambda v, b: v >= b), "gt": (">", lambda v, b: v > b), "le": ("<=", lambda v, b: v <= b)}
    for rule, bound in option.bounds.items():
        sign, holds = signs[rule]
        if not holds(value, bound):
            raise ValueError(f"must be {sign} {bound}, got {value!r}")
    return value


def validate(values: dict[str, Any]) -> RunSettings:
    problems, checked = [], {}
    for name, value in values.items():
        if name not in OPTIONS:
            problems.append(f"{name}: unknown setting")
            continue
        try:
            checked[name] = _checked(OPTIONS[name], value)
        except ValueError as exc:
            problems.append(f"{name}: {exc}")
    if problems:
        raise UsageError(f"invalid settings: {'; '.join(problems)}")
    settings = RunSettings(**checked, given=frozenset(checked))
    if settings.api_key_file is not None:
        settings = settings.replace(api_key=read_key_file(settings.api_key_file))
    from oc_repl.client.api_base import check_api_base

    check_api_base(settings.api_base)  # a usage error before anything starts, not a connection retried later
    check_sandbox_spec(settings.sandbox)
    if settings.verify_file is not None:
        try:
            empty = not settings.verify_file.read_bytes().strip()
        except OSError as exc:
            raise UsageError(f"cannot read the verify file {settings.verify_file}: {exc.strerror}") from exc
        if empty:
            raise UsageError(f"the verify file {settings.verify_file} is empty: it would pass whatever happened")
    from oc_repl.exact import check_wire

    return check_wire(settings.with_exact())
