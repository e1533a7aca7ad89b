"""What a run returns to its caller (CLI, API, durable workflow): outcome, rows, checks, exit code."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from wapflow.errors import EXIT_BLOCKED, EXIT_PUBLISHED, EXIT_REVIEW, EXIT_RUNTIME, EXIT_TRANSIENT
from wapflow.vocabulary import FAILED_WITH


def exit_code_for(status: str, failure_codes: list[int]) -> int:
    """0 published, 1 blocked, 6 awaiting review, else the most serious failure's code (3 when none is known).

    Transient (5) only when every failure is transient: a retry cannot fix a bad file beside it.
    """
    if status == "published":
        return EXIT_PUBLISHED
    if status == "blocked":
        return EXIT_BLOCKED
    if status == "awaiting_review":
        return EXIT_REVIEW
    terminal = [c for c in failure_codes if c != EXIT_TRANSIENT]
    if terminal:
        return max(terminal)
    return EXIT_TRANSIENT if failure_codes else EXIT_RUNTIME


@dataclass
class RunResult:
    run_id: str
    table: str
    status: str  # published | blocked | failed | awaiting_review
    branch: str | None
    rows_written: int | None = None
    snapshot_id: int | None = None
    base_snapshot_id: int | None = None
    checks: list[dict[str, Any]] = field(default_factory=list)
    error: dict[str, Any] | None = None
    files: list[str] = field(default_factory=list)
    branch_kept: bool = False
    published_via: str | None = None
    message: str = ""
    timings: dict[str, float] = field(default_factory=dict)
    quarantined_rows: int | None = None
    schema_changes: list[str] = field(default_factory=list)
    staging_table: str | None = None
    skipped: list[dict[str, str]] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return exit_code_for(self.status, [int((self.error or {}).get("exit_code", EXIT_RUNTIME))])

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunResult:
        """The result `to_dict` gave (a durable step's recorded output)."""
        return cls(**{k: v for k, v in d.items() if k != "exit_code"})

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "table": self.table,
            "status": self.status,
            "branch": self.branch,
            "rows_written": self.rows_written,
            "snapshot_id": self.snapshot_id,
            "base_snapshot_id": self.base_snapshot_id,
            "checks": self.checks,
            "error": self.error,
            "files": self.files,
            "branch_kept": self.branch_kept,
            "published_via": self.published_via,
            "message": self.message,
            "timings": self.timings,
            "quarantined_rows": self.quarantined_rows,
            "schema_changes": self.schema_changes,
            "staging_table": self.staging_table,
            "skipped": self.skipped,
            "exit_code": self.exit_code,
        }


@dataclass
class MultiRunResult:
    """One run over several tables: every table published by one atomic commit, or none."""

    run_id: str
    branch: str
    status: str  # published | blocked | failed
    tables: list[RunResult]
    message: str = ""

    @property
    def exit_code(self) -> int:
        return exit_code_for(self.status, [r.exit_code for r in self.tables if r.status == "failed"])

    def for_table(self, table: str) -> RunResult:
        """`table`'s own result as the whole run decided it: the run's status and message, and, when another
        table failed the run, that table's error (what to fix, and whether trying again may help)."""
        own = next(r for r in self.tables if r.table == table)
        error = own.error
        if self.status == "failed":
            cause = next((r.error for r in self.tables if r.error and FAILED_WITH not in r.error), None)
            error = cause or error
        return replace(own, status=self.status, error=error, message=self.message)

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "branch": self.branch,
            "status": self.status,
            "message": self.message,
            "tables": [r.to_dict() for r in self.tables],
            "exit_code": self.exit_code,
        }
