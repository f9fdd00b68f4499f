"""What `doctor` finds: each probe's Check (ok / warn / fail, a finding, a concrete fix) and the report of them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Status = Literal["ok", "warn", "fail"]


@dataclass
class Check:
    name: str
    status: Status
    finding: str
    fix: str = ""
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class Report:
    api_base: str
    model: str | None = None
    checks: list[Check] = field(default_factory=list)
    blocking: bool = False  # the default protocol cannot work against this server

    @property
    def exit_code(self) -> int:
        return 1 if self.blocking else 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "api_base": self.api_base,
            "model": self.model,
            "exit_code": self.exit_code,
            "checks": [asdict(c) for c in self.checks],
        }
