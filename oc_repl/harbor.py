"""`harbor run --agent oc_repl.harbor:OcRepl ...`: oc-repl as a Harbor agent (oc_repl/integrations/harbor/agent.py).

Harbor (and Python >= 3.12) are needed only once the agent is used: `pip install 'oc-repl[harbor]'`. Importing this
module imports neither.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from oc_repl.integrations.harbor.agent import OcRepl, OcReplOptions

__all__ = ["OcRepl", "OcReplOptions"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        try:
            from oc_repl.integrations.harbor import agent as harbor_agent
        except ModuleNotFoundError as exc:
            if exc.name != "harbor" and not (exc.name or "").startswith("harbor."):
                raise
            raise ImportError(
                "oc_repl.harbor needs Harbor: pip install 'oc-repl[harbor]' (Python 3.12 or later)"
            ) from exc
        return getattr(harbor_agent, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
