"""`harbor run --agent oc_repl.harbor:OcRepl ...`: oc-repl as a Harbor agent (oc_repl/integrations/harbor/agent.py);
`-e oc_repl.harbor:ComposeV1Environment` (or `OfflineComposeV1Environment`): Harbor's docker environment on Compose v1.

Harbor (and Python >= 3.12) are needed only once the agent is used: `pip install 'oc-repl[harbor]'`. Importing this
module imports neither.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from oc_repl.integrations.harbor.agent import OcRepl, OcReplOptions
    from oc_repl.integrations.harbor.compose_v1 import ComposeV1Environment, OfflineComposeV1Environment

# what each name is made in (its module imports Harbor)
_MODULES = {
    "OcRepl": "agent",
    "OcReplOptions": "agent",
    "ComposeV1Environment": "compose_v1",
    "OfflineComposeV1Environment": "compose_v1",
}
__all__ = ["OcRepl", "OcReplOptions", "ComposeV1Environment", "OfflineComposeV1Environment"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        try:
            from importlib import import_module

            module = import_module(f"oc_repl.integrations.harbor.{_MODULES[name]}")
        except ModuleNotFoundError as exc:
            if exc.name != "harbor" and not (exc.name or "").startswith("harbor."):
                raise
            raise ImportError(
                "oc_repl.harbor needs Harbor: pip install 'oc-repl[harbor]' (Python 3.12 or later)"
            ) from exc
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
