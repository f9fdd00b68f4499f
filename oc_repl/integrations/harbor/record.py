"""What Harbor is told about a run: token and turn counts for its agent context (oc_repl/atif.py's RunRecord, kept
as the events pass on their way to the transcript), and its ATIF trajectory, validated by Harbor's own models."""

from __future__ import annotations

from typing import Any

from oc_repl import atif
from oc_repl.atif import RunRecord

__all__ = ["CHECKPOINTS", "RunRecord", "trajectory"]

# Where a stop asked for from outside can be raised in the worker: events of the loop itself, never its cleanup.
CHECKPOINTS = frozenset({"turn.started", "request.sent", "item.updated"})


def trajectory(record: RunRecord, session_id: str, version: str) -> Any:
    """The run as Harbor's `Trajectory` (a ValidationError when it does not fit), or None when no request was sent."""
    from harbor.models.trajectories import Trajectory

    found = atif.trajectory(record, session_id, version)
    return None if found is None else Trajectory.model_validate(found)
