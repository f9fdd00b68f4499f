"""The run settings: one table, from which every surface that takes them is made.

The table is the composition of the core's rows (the fields of `RunSettings` below) and the rows each kind declares
(a protocol kind's, a sandbox kind's, a wire's: oc_repl/rows.py), each kind's rows after the core row that chooses
among the kinds. Each row declares its type and default, its bounds or choices, its help, its environment variable and
the surfaces that take it. From the table come `oc-repl run`'s, the shell's, `bench`'s and `doctor`'s click options
(oc_repl/cli), the config file's keys and the data a child run is given (oc_repl/sources.py), Harbor's `--ak` options
(oc_repl/integrations/harbor/agent.py) and the checks of `validate`. `RunSettings` is one object for every surface: a
kind's setting is read as an attribute like the core's, and a part is built from its own kind's rows alone.

Settings are a plain dataclass checked by the few rules below (types, ranges, choices): they are validated on every
run before its first request, and building a pydantic model for them cost more start-up time than the rest of a run's
imports together.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oc_repl.apikey import KEY_ENV, read_key_file
from oc_repl.client import wires
from oc_repl.errors import UsageError
from oc_repl.protocols import kinds as protocol_kinds
from oc_repl.rows import DOCTOR, EVERYWHERE, FILE, FLAG, HARBOR, RUN, TRIAL, Option
from oc_repl.sandbox.kinds import DEFAULT as DEFAULT_SANDBOX
from oc_repl.sandbox.kinds import FORMS, IMAGE_DEFAULT
from oc_repl.sandbox.kinds import KINDS as SANDBOX_KINDS
from oc_repl.training import SAMPLING_PRESETS

if TYPE_CHECKING:
    from oc_repl.protocols.kind import ProtocolKind

__all__ = ["DOCTOR", "EVERYWHERE", "FILE", "FLAG", "HARBOR", "OPTIONS", "RUN", "TRIAL", "Option", "RunSettings"]

DEFAULT_API_BASE = "http://127.0.0.1:30000/v1"  # sglang's default port


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
    exact: Any = None,
    **bounds: float,
) -> Any:
    """One of the core's rows. `flags`: the flag's names when not `--the-name`; `path`: "file", "existing file",
    "existing dir" or "existing path" (either), as a flag checks it; `shown`: the default in words, for a None that
    means something; `secret`: kept out of reprs, and a warning when it is typed; `exact`: the value `--exact` sets;
    `bounds`: ge, gt, le."""
    rules = {"help": help, "on": frozenset(on), "env": env, "choices": choices, "flags": flags, "path": path}
    rules.update(shown=shown, secret=secret, bounds=bounds, exact=exact)
    return field(default=default, repr=not secret, metadata=rules)


@dataclass(kw_only=True)
class _Core:
    """The core's rows."""

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
    protocol: str = setting(protocol_kinds.DEFAULT, protocol_kinds.HELP, *EVERYWHERE)
    sandbox: str = setting(DEFAULT_SANDBOX, f"Where commands run: {FORMS}", FLAG, FILE, TRIAL)
    task_sandbox: str = setting(
        IMAGE_DEFAULT,
        "The kind of sandbox a task's image opens in (--task, bench): one made afresh from an image",
        FLAG,
        FILE,
    )
    workdir: str | None = setting(
        None,
        "Working directory of the commands in a container (docker sandboxes, Harbor's environment)",
        *EVERYWHERE,
        shown="/workspace, as trained",
    )
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
    max_turns: int = setting(12, "Model turns per task", *EVERYWHERE, ge=1)
    loop_limit: int = setting(3, "Identical turns in a row that stop the run; 0 off", *EVERYWHERE, ge=0, exact=0)
    sampling: str = setting(
        "default",
        "Sampling preset: default (T 0.7, top-p 0.8, 4096 tokens), training (T 1.0, top-p 1.0, 8192) or author-eval "
        "(OpenClaw-RL's eval: T 0.6, top-p 0.95, top-k 20, 8192)",
        *EVERYWHERE,
        choices=tuple(SAMPLING_PRESETS),
        exact="training",
    )
    seed: int | None = setting(
        None,
        "Sampling seed sent with every request (`seed`; sglang's /generate: `sampling_seed`); bench gives each trial "
        "its own, made from this one, the task, the arm and the attempt",
        *EVERYWHERE,
        shown="none: the server's",
        ge=0,
    )
    temperature: float | None = setting(
        None, "Overrides the preset's temperature", *EVERYWHERE, shown="the preset's", ge=0
    )
    top_p: float | None = setting(None, "Overrides the preset's top-p", *EVERYWHERE, shown="the preset's", gt=0, le=1)
    max_tokens: int | None = setting(
        None, "Overrides the preset's max new tokens", *EVERYWHERE, shown="the preset's", ge=1
    )
    wire: str = setting(
        wires.CHAT.name,
        "How prompts reach the server: chat (/v1/chat/completions, the server renders), completions (/v1/completions) "
        "or generate (sglang's /generate), both rendered by oc-repl with --tokenizer's chat template",
        *EVERYWHERE,
        DOCTOR,
        shown="chat; generate under --exact for camel",
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
    owned: dict[str, Any] = field(default_factory=dict)  # the values of the kinds' rows that differ from their defaults


def _read(spec: dataclasses.Field[Any]) -> Option:
    declared = str(spec.type)
    meta = dict(spec.metadata)
    flags = meta.pop("flags") or (f"--{spec.name.replace('_', '-')}",)
    return Option(spec.name, declared.split(" |")[0], "None" in declared, spec.default, flags=flags, **meta)


_CORE = {spec.name: _read(spec) for spec in dataclasses.fields(_Core) if spec.metadata}


def kinds(plugins: bool = False) -> dict[str, list[Any]]:
    """The kinds each choosing row chooses among (protocol kinds, sandbox kinds, wires, task formats), built-in, and
    with those installed packages register when `plugins` (oc_repl/plugins.py)."""
    from oc_repl.tasks import model as tasks

    if not plugins:
        return {
            "protocol": list(protocol_kinds.KINDS.values()),
            "sandbox": list(SANDBOX_KINDS.values()),
            "wire": list(wires.WIRES.values()),
            "task": list(tasks.FORMATS.values()),
        }
    from oc_repl.protocols import plugin_kinds
    from oc_repl.sandbox.kinds import known

    return {
        "protocol": [*protocol_kinds.KINDS.values(), *plugin_kinds().values()],
        "sandbox": list(known().values()),
        "wire": list(wires.known().values()),
        "task": list(tasks.known_formats().values()),
    }


def _compose(chosen: dict[str, list[Any]]) -> dict[str, Option]:
    """Each kind's rows after the core row that chooses among the kinds; a row several kinds share comes once."""
    table: dict[str, Option] = {}
    for name, option in _CORE.items():
        table[name] = option
        for kind in chosen.get(name, ()):
            for row in kind.options:
                if table.setdefault(row.name, row) != row:
                    raise UsageError(f"two settings named {row.name}, of different kinds")
    return table


OPTIONS: dict[str, Option] = _compose(kinds())


def with_plugins() -> dict[str, Option]:
    """The table, grown in place by the rows of the kinds installed packages register, and with those kinds named in
    the help of the rows that choose among them; done once, when first asked (oc_repl/plugins.py says when)."""
    if "plugins" in _LOADED:
        return OPTIONS
    builtin, chosen = kinds(), kinds(plugins=True)
    table = _compose(chosen)
    names = {"protocol": "kind", "sandbox": "form", "wire": "name", "task": "name"}
    for name, every in chosen.items():
        added = [getattr(kind, names[name]) for kind in every if kind not in builtin[name]]
        if added and name in table:
            table[name] = dataclasses.replace(table[name], help=f"{table[name].help}; installed: {', '.join(added)}")
    OPTIONS.clear()
    OPTIONS.update(table)
    _LOADED.add("plugins")
    return OPTIONS


_LOADED: set[str] = set()


class RunSettings(_Core):
    """Everything a run needs, checked once after flags, environment and file are merged (see `validate`). A kind's
    setting is an attribute too (`settings.history`), its default the kind's row's."""

    def __init__(self, **values: Any) -> None:
        owned = dict(values.pop("owned", {}))
        for name in [name for name in values if name not in _CORE and name in OPTIONS]:
            owned[name] = values.pop(name)
        super().__init__(**values, owned={k: v for k, v in owned.items() if v != OPTIONS[k].default})

    def __getattr__(self, name: str) -> Any:
        owned = self.__dict__.get("owned")
        if owned is None or name not in OPTIONS:
            raise AttributeError(name)
        return owned.get(name, OPTIONS[name].default)

    def own(self, rows: Iterable[Option]) -> dict[str, Any]:
        """The values of a kind's rows: what the part of that kind is built with."""
        return {row.name: self.owned.get(row.name, row.default) for row in rows}

    def replace(self, **changes: Any) -> RunSettings:
        return dataclasses.replace(self, **changes)

    def with_exact(self) -> RunSettings:
        """The settings `--exact` runs with."""
        return exact_settings(self) if self.exact else self

    def protocol_kind(self) -> ProtocolKind:
        """What the core knows of the protocol (protocols/kind.py)."""
        from oc_repl.protocols import kind_of

        return kind_of(self.protocol)

    @property
    def text_wire(self) -> bool:
        """The prompt is rendered by oc-repl (and tokenized, when the tokenizer has a tokenizer.json)."""
        return wires.wire_of(self.wire).text

    def sampling_options(self) -> dict[str, Any]:
        chosen = dict(SAMPLING_PRESETS[self.sampling])
        for key in ("temperature", "top_p", "max_tokens", "seed"):
            if getattr(self, key) is not None:
                chosen[key] = getattr(self, key)
        return chosen


def options_on(surface: str) -> list[Option]:
    """The table's rows that `surface` takes, in the table's order."""
    return [option for option in OPTIONS.values() if surface in option.on]


def validate(values: dict[str, Any]) -> RunSettings:
    problems, checked = [], {}
    if set(values) - set(OPTIONS):
        with_plugins()  # an installed package's kind may own the setting
    for name, value in values.items():
        if name not in OPTIONS:
            problems.append(f"{name}: unknown setting")
            continue
        try:
            checked[name] = OPTIONS[name].checked(value)
        except ValueError as exc:
            problems.append(f"{name}: {exc}")
    if problems:
        raise UsageError(f"invalid settings: {'; '.join(problems)}")
    settings = RunSettings(**checked, given=frozenset(checked))
    settings.protocol_kind(), wires.wire_of(settings.wire)  # a name no kind has is refused at once
    if settings.api_key_file is not None:
        settings = settings.replace(api_key=read_key_file(settings.api_key_file))
    from oc_repl.client.api_base import check_api_base

    check_api_base(settings.api_base)  # a usage error before anything starts, not a connection retried later
    from oc_repl.sandbox.kinds import image_kind, kind_of

    kind_of(settings.sandbox)  # a spec of no known kind is refused at once, not at the first task
    image_kind(settings.task_sandbox)
    if settings.verify_file is not None:
        try:
            empty = not settings.verify_file.read_bytes().strip()
        except OSError as exc:
            raise UsageError(f"cannot read the verify file {settings.verify_file}: {exc.strerror}") from exc
        if empty:
            raise UsageError(f"the verify file {settings.verify_file} is empty: it would pass whatever happened")
    return _check_wire(settings.with_exact())


# --- --exact: every documented deviation from upstream turned off ----------------------------------------------------
# Each row says what `--exact` sets it to (no observation cap, upstream's relative paths, the training sampling and
# history, upstream's sleeps, no loop detection); for camel also the wire training used (token ids on sglang's
# /generate), which needs the served model's tokenizer. A deviation the user asked for by name (a flag, the
# environment or the config file) conflicts with `--exact` and is refused rather than silently dropped or kept.
# Sampling overrides would change the preset, and training sampled unseeded, so they are refused.
EXACT_FORBIDS: dict[str, Any] = {"temperature": None, "top_p": None, "max_tokens": None, "seed": None}


def exact_settings(settings: RunSettings) -> RunSettings:
    wanted = {name: option.exact for name, option in OPTIONS.items() if option.exact is not None}
    kind = settings.protocol_kind()
    wanted.update({key: value for key, value in kind.exact.items() if key not in settings.given})
    conflicts = [
        f"{OPTIONS[key].flag} {getattr(settings, key)}"
        for key, value in {**wanted, **EXACT_FORBIDS}.items()
        if key in settings.given and getattr(settings, key) != value and getattr(settings, key) is not None
    ]
    if conflicts:
        raise UsageError(
            f"--exact runs exactly as upstream, which rules out {', '.join(conflicts)}",
            hint="drop those options, or drop --exact",
        )
    if kind.token_ids:
        wire = wanted.get("wire", settings.wire)
        if settings.replace(wire=wire).text_wire and settings.tokenizer is None:
            raise UsageError(
                f"--exact sends {settings.protocol}'s prompts as token ids on the {wire} wire, and that needs the "
                "served model's tokenizer: --tokenizer is missing",
                hint="pass --tokenizer DIR (the served model's folder, with tokenizer.json and its chat template), "
                "or --wire chat to run with the deviations the server's own rendering brings",
            )
    return settings.replace(**wanted)


def _check_wire(settings: RunSettings) -> RunSettings:
    """A text wire renders the prompt on the client: it needs the served model's chat template."""
    if settings.text_wire and settings.tokenizer is None:
        raise UsageError(
            f"--wire {settings.wire} renders the prompt on the client with the served model's chat template: "
            "--tokenizer is missing",
            hint="pass --tokenizer DIR (the served model's folder, or its chat_template.jinja)",
        )
    return settings
