"""What an audit found, in a shape the CLI, the run store and --json share."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from wapflow.audit.checktype import Evidence
from wapflow.vocabulary import CheckStatus

Status = CheckStatus  # passed | failed | warned | quarantined (wapflow.vocabulary)


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
    source: Evidence = "scan"  # where the verdict came from (audit.spec explains each)
    sql: str | None = None  # reproduces the failing rows against the kept branch
    samples: list[dict[str, Any]] = field(default_factory=list)  # up to 20 failing rows

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class AuditReport:
    rows: int
    checks: list[CheckResult]
    quarantined_rows: int = 0
    schema_changes: list[str] = field(default_factory=list)
    # Batch metrics the checks computed beyond their verdicts ({metric, column, value}), for the metric history.
    metrics: list[dict[str, Any]] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not any(c.status == "failed" for c in self.checks)

    @property
    def failed(self) -> list[CheckResult]:
        return [c for c in self.checks if c.status == "failed"]

    @property
    def warned(self) -> list[CheckResult]:
        return [c for c in self.checks if c.status == "warned"]
