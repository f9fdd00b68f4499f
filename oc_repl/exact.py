"""What `--exact` does to the run settings: every documented deviation from upstream turned off, and for camel the
wire training used (token ids on sglang's /generate), which needs the served model's tokenizer.

A deviation the user asked for by name (a flag, the environment or the config file) conflicts with `--exact` and is
refused rather than silently dropped or silently kept.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from oc_repl.errors import UsageError

if TYPE_CHECKING:
    from oc_repl.config import RunSettings

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


def exact_settings(settings: RunSettings, flag: Callable[[str], str]) -> RunSettings:
    """`flag`: a setting's flag, by its name."""
    wanted = dict(EXACT)
    kind = settings.protocol_kind()
    wanted.update({key: value for key, value in kind.exact.items() if key not in settings.given})
    conflicts = [
        f"{flag(key)} {getattr(settings, key)}"
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


def check_wire(settings: RunSettings) -> RunSettings:
    """A text wire renders the prompt on the client: it needs the served model's chat template."""
    if settings.text_wire and settings.tokenizer is None:
        raise UsageError(
            f"--wire {settings.wire} renders the prompt on the client with the served model's chat template: "
            "--tokenizer is missing",
            hint="pass --tokenizer DIR (the served model's folder, or its chat_template.jinja)",
        )
    return settings
