"""Settings: flags > environment > config file (with profiles) > defaults.

click resolves flags and their environment variables (an option left unset stays None); the file's values fill
in under whatever click found, the defaults under those, and `validate` checks the merged result once.

Settings are a plain dataclass checked by the few rules below (types, ranges, choices): they are validated on every
run before its first request, and building a pydantic model for them cost more start-up time than the rest of a run's
imports together.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from oc_repl import paths, tomlfile
from oc_repl.errors import UsageError

DEFAULT_API_BASE = "http://127.0.0.1:30000/v1"  # sglang's default port

# The checkpoint was sampled with these during RL; `--sampling training` brings them back in one flag.
SAMPLING_PRESETS: dict[str, dict[str, float | int]] = {
    "default": {"temperature": 0.7, "top_p": 0.8, "max_tokens": 4096},
    "training": {"temperature": 1.0, "top_p": 1.0, "max_tokens": 8192},
}


def _choice(default: str, *choices: str) -> Any:
    return field(default=default, metadata={"choices": (default, *choices)})


def _number(default: float | None, **bounds: float) -> Any:
    return field(default=default, metadata=bounds)


@dataclass(kw_only=True)
class RunSettings:
    """Everything a run needs, checked once after click merged flags, env and file (see `validate`)."""

    api_base: str = DEFAULT_API_BASE
    api_key: str = field(default="EMPTY", repr=False)
    api_key_file: Path | None = None  # where the key is read from, when given (oc_repl/apikey.py)
    model: str | None = None
    protocol: str = "camel-terminal-toolkit"
    history: str = _choice("training", "camel-0.2.85", "full")
    sandbox: str = "local:."
    confine: bool = True  # local: bubblewrap around every command (host read-only, no network)
    network: bool = False  # local: the network for a confined sandbox
    writable_vcs: bool = False  # local: .git, .hg and .svn of the sandbox directory writable when confined
    workdir: str | None = None
    docker_network: str | None = None
    keep: bool = False
    # every sandbox oc-repl makes: a local: one (a cgroup, else rlimits) and each container it creates
    max_processes: int = _number(4096, ge=16, le=4194304)
    memory_mb: int = _number(4096, ge=64, le=1 << 24)  # swap included
    task: Path | None = None
    image: str | None = None
    observation_limit: int | None = _number(None, ge=0)
    wait: str = _choice("detect", "exact")
    relative_paths: str = _choice("workdir", "root")
    system: str | None = None
    max_turns: int = _number(12, ge=1)
    loop_limit: int = _number(3, ge=0)
    sampling: str = _choice("default", "training")
    temperature: float | None = _number(None, ge=0)
    top_p: float | None = _number(None, gt=0, le=1)
    max_tokens: int | None = _number(None, ge=1)
    stream: bool = True
    retries: int = _number(3, ge=0)
    idle_timeout: float = _number(120.0, gt=0)
    request_timeout: float = _number(600.0, gt=0)  # an unstreamed reply, whole, per attempt
    verify: str | None = None
    verify_file: Path | None = None
    verify_timeout: float = _number(600.0, gt=0)
    timeout: float | None = _number(None, ge=0)  # seconds for the agent (the verifier has its own)
    task_name: str | None = None
    transcript: Path | None = None
    json_output: bool = False
    yes: bool = False
    exact: bool = False
    # the names given by a flag, the environment or a file (not defaults): --exact refuses the conflicting ones
    given: frozenset[str] = field(default=frozenset(), repr=False, compare=False)

    def replace(self, **changes: Any) -> RunSettings:
        return dataclasses.replace(self, **changes)

    def with_exact(self) -> RunSettings:
        """The settings `--exact` runs with: every documented deviation from upstream turned off.

        A deviation the user asked for by name (a flag, the environment or the config file) conflicts with `--exact`
        and is refused rather than silently dropped or silently kept.
        """
        if not self.exact:
            return self
        wanted = dict(EXACT)
        if self.protocol_kind() == "camel" and "max_turns" not in self.given:
            wanted["max_turns"] = CAMEL_TRAINING_TURNS
        conflicts = [
            f"--{key.replace('_', '-')} {getattr(self, key)}"
            for key, value in {**wanted, **EXACT_FORBIDS}.items()
            if key in self.given and getattr(self, key) != value and getattr(self, key) is not None
        ]
        if conflicts:
            raise UsageError(
                f"--exact runs exactly as upstream, which rules out {', '.join(conflicts)}",
                hint="drop those options, or drop --exact",
            )
        return self.replace(**wanted)

    def protocol_kind(self) -> str:
        from oc_repl.protocols import manifests

        manifest = manifests().get(self.protocol)
        return manifest.kind if manifest else ""

    def sampling_options(self) -> dict[str, Any]:
        chosen = dict(SAMPLING_PRESETS[self.sampling])
        for key in ("temperature", "top_p", "max_tokens"):
            if getattr(self, key) is not None:
                chosen[key] = getattr(self, key)
        return chosen


# What `--exact` sets: no observation cap, upstream's relative paths, the training sampling and history, upstream's
# sleeps, no loop detection (upstream has none). Sampling overrides would change the preset, so they are refused.
EXACT: dict[str, Any] = {
    "observation_limit": 0,
    "relative_paths": "root",
    "sampling": "training",
    "history": "training",
    "wait": "exact",
    "loop_limit": 0,
}
EXACT_FORBIDS: dict[str, Any] = {"temperature": None, "top_p": None, "max_tokens": None}
CAMEL_TRAINING_TURNS = 10  # the episode length the checkpoint was trained with

SANDBOX_SCHEMES = ("local", "docker", "docker-image")


def check_sandbox_spec(spec: str) -> None:
    """A sandbox is named scheme:target; anything else is refused at once, not at the first task."""
    scheme, sep, target = spec.partition(":")
    if not sep or not target or scheme not in SANDBOX_SCHEMES:
        raise UsageError(
            f"sandbox {spec!r} is not of the form scheme:target",
            hint="use local:<dir>, docker:<container> or docker-image:<image>",
        )


FIELDS = {f.name: f for f in dataclasses.fields(RunSettings) if f.name != "given"}
FILE_KEYS = set(FIELDS) - {"json_output", "yes", "transcript", "task", "image", "keep"}


def config_path() -> Path:
    return paths.config_dir() / "config.toml"


def load_file(path: Path | None, profile: str | None) -> dict[str, Any]:
    """Top-level keys of the file, overlaid by `[profiles.NAME]` when a profile is chosen."""
    if path is not None and not path.is_file():
        raise UsageError(f"no config file at {path}")
    path = path or config_path()
    if not path.exists():
        if profile:
            raise UsageError(f"profile {profile!r} asked for, but there is no config file at {path}")
        return {}
    data = tomlfile.read(path, "config file ")
    profiles = data.pop("profiles", {})
    values = {k.replace("-", "_"): v for k, v in data.items()}
    if profile:
        if profile not in profiles:
            raise UsageError(f"no profile {profile!r} in {path}; profiles there: {', '.join(profiles) or 'none'}")
        values.update({k.replace("-", "_"): v for k, v in profiles[profile].items()})
    unknown = set(values) - FILE_KEYS
    if unknown:
        raise UsageError(f"unknown keys in {path}: {', '.join(sorted(unknown))}")
    return values


def _checked(name: str, value: Any) -> Any:
    """A value of the field's type (ints pass for floats, strings for paths), within its range and choices."""
    declared = str(RunSettings.__dataclass_fields__[name].type)
    rules = FIELDS[name].metadata
    if value is None and ("None" in declared):
        return None
    kind = declared.split(" |")[0]
    if kind == "Path" and isinstance(value, str | Path):
        value = Path(value)
    elif kind == "float" and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    expected = {"str": str, "bool": bool, "int": int, "float": float, "Path": Path}[kind]
    if not isinstance(value, expected) or (kind == "int" and isinstance(value, bool)):
        raise ValueError(f"expected {kind}, got {value!r}")
    if "choices" in rules and value not in rules["choices"]:
        raise ValueError(f"expected one of {', '.join(rules['choices'])}, got {value!r}")
    bounds = {"ge": (">=", lambda v, b: v >= b), "gt": (">", lambda v, b: v > b), "le": ("<=", lambda v, b: v <= b)}
    for rule, (sign, holds) in bounds.items():
        if rule in rules and not holds(value, rules[rule]):
            raise ValueError(f"must be {sign} {rules[rule]}, got {value!r}")
    return value


def validate(values: dict[str, Any]) -> RunSettings:
    problems, checked = [], {}
    for name, value in values.items():
        if name not in FIELDS:
            problems.append(f"{name}: unknown setting")
            continue
        try:
            checked[name] = _checked(name, value)
        except ValueError as exc:
            problems.append(f"{name}: {exc}")
    if problems:
        raise UsageError(f"invalid settings: {'; '.join(problems)}")
    settings = RunSettings(**checked, given=frozenset(checked))
    if settings.api_key_file is not None:
        from oc_repl.apikey import read_key_file

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
    return settings.with_exact()
