"""What an audit found, in a shape the CLI, the run store and --json share."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Status = Literal["passed", "failed", "warned"]


@dataclass
class CheckResult:
    name: str
    check: str
    severity: str
    status: Status
    observed: Any
    failing_rows: int
    threshold: str = ""
    columns: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class AuditReport:
    rows: int
    checks: list[CheckResult]

    @property
    def passed(self) -> bool:
        return not any(c.status == "failed" for c in self.checks)

    @property
    def failed(self) -> list[CheckResult]:
        return [c for c in self.checks if c.status == "failed"]

    @property
    def warned(self) -> list[CheckResult]:
        return [c for c in self.checks if c.status == "warned"]
