"""What an orchestrator needs of a wapflow run, whatever ran it: one shape for Airflow and Dagster (no orchestrator
imported here).

A run of one table, a group (`run-tables`, models, an SDP pipeline) and an ingest pass each end as an Outcome: the
run id (a group's id, or the ingest pass's runs), the status and exit code, whether a retry can help, the command
that shows the report, the tables written and read, each table's checks and published snapshot, and the runs held
for review. The orchestrator then maps it onto its own idioms (a failed task without retry, a retried one, a
deferral; a failed blocking check) without parsing an exit code or a message.

Also here: one lakehouse per wap.toml and process (its Spark session is reused by every task of a worker process),
and the one seam to `wap pipelines run`.
"""

from __future__ import annotations

import os
import shlex
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from wapflow.errors import EXIT_BLOCKED, EXIT_PUBLISHED, EXIT_REVIEW, EXIT_TRANSIENT
from wapflow.vocabulary import AWAITING_REVIEW, PUBLISHED

if TYPE_CHECKING:
    from wapflow.lakehouse.lakehouse import Lakehouse
    from wapflow.outer.ingest import IngestResult
    from wapflow.pipeline.result import MultiRunResult, RunResult


@dataclass
class Outcome:
    """A finished (or held) wapflow run as an orchestrator acts on it."""

    kind: str  # run | run-tables | models | pipeline | ingest
    run_id: str  # the run's id; a group's id; for an ingest pass, its last run's id ("" when nothing ran)
    status: str  # published | blocked | failed | awaiting_review; ingest: also "nothing new", "unsettled"
    exit_code: int
    retryable: bool  # a retry of the same task may help (exit 5: every failure transient)
    message: str
    config: str | None  # the wap.toml it ran with (what `wap report --config` needs)
    tables: list[str] = field(default_factory=list)  # written (or held, or blocked)
    files: list[str] = field(default_factory=list)  # read from the landing place
    upstream: list[str] = field(default_factory=list)  # tables read (models, pipelines)
    checks: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # table -> its audit's verdicts
    snapshots: dict[str, int | None] = field(default_factory=dict)  # table -> snapshot published on main
    run_ids: dict[str, str] = field(default_factory=dict)  # table -> the run id that wrote it
    held: list[str] = field(default_factory=list)  # run (or group) ids awaiting review
    error: dict[str, Any] | None = None

    @property
    def published(self) -> bool:
        return self.exit_code == EXIT_PUBLISHED

    @property
    def blocked(self) -> bool:
        return self.exit_code == EXIT_BLOCKED

    @property
    def awaiting_review(self) -> bool:
        return self.exit_code == EXIT_REVIEW

    def report_command(self, run_id: str | None = None) -> str:
        """The command that shows the run's report (checks, samples, the SQL that finds the failing rows)."""
        rid = run_id or self.run_id
        if not rid:
            return ""
        parts = ["wap", "report", rid]
        if self.config:
            parts += ["--config", self.config]
        return shlex.join(parts)

    def summary(self) -> dict[str, Any]:
        """The plain data a task hands downstream (an XCom, asset metadata): JSON, no Spark, no secrets."""
        return {
            "kind": self.kind,
            "run_id": self.run_id,
            "status": self.status,
            "exit_code": self.exit_code,
            "retryable": self.retryable,
            "message": self.message,
            "report_command": self.report_command(),
            "tables": self.tables,
            "snapshots": dict(self.snapshots),
            "run_ids": self.run_ids,
            "held": self.held,
            "failed_checks": {t: failed for t in self.tables if (failed := self.failed_checks(t))},
        }

    def failed_checks(self, table: str) -> list[str]:
        return [str(c.get("name")) for c in self.checks.get(table, []) if c.get("status") == "failed"]

    def reason(self) -> str:
        """Why it did not publish, in one line a task log shows, with where to look."""
        failed = [f"{t}: {', '.join(f)}" for t in self.tables if (f := self.failed_checks(t))]
        why = f"blocked by {'; '.join(failed)}" if self.blocked and failed else self.message
        report = self.report_command()
        return f"wapflow {self.kind} {self.run_id or ''} {self.status}: {why}" + (f" (see: {report})" if report else "")


def _retryable(exit_code: int) -> bool:
    return exit_code == EXIT_TRANSIENT


def from_run(res: RunResult, config: str | None = None) -> Outcome:
    """A one-table run's outcome (`wap run`, wapflow.run)."""
    return Outcome(
        kind="run",
        run_id=res.run_id,
        status=res.status,
        exit_code=res.exit_code,
        retryable=_retryable(res.exit_code),
        message=res.message,
        config=config,
        tables=[res.table],
        files=list(res.files),
        checks={res.table: list(res.checks)},
        snapshots={res.table: res.snapshot_id if res.status == PUBLISHED else None},
        run_ids={res.table: res.run_id},
        held=[res.run_id] if res.status == AWAITING_REVIEW else [],
        error=res.error,
    )


def from_group(
    res: MultiRunResult, config: str | None = None, *, kind: str = "run-tables", upstream: Sequence[str] = ()
) -> Outcome:
    """A multi-table run's outcome (`wap run-tables`, `wap run-models`, an SDP pipeline): one commit or none."""
    tables = [r.table for r in res.tables]
    error = next((r.error for r in res.tables if r.error), None)
    return Outcome(
        kind=kind,
        run_id=res.run_id,
        status=res.status,
        exit_code=res.exit_code,
        retryable=_retryable(res.exit_code),
        message=res.message,
        config=config,
        tables=tables,
        files=[f for r in res.tables for f in r.files],
        upstream=[t for t in upstream if t not in tables],
        checks={r.table: list(r.checks) for r in res.tables},
        snapshots={r.table: r.snapshot_id if res.status == PUBLISHED else None for r in res.tables},
        run_ids={r.table: r.run_id for r in res.tables},
        held=[res.run_id] if res.status == AWAITING_REVIEW else [],
        error=error,
    )


def from_ingest(res: IngestResult, config: str | None = None) -> Outcome:
    """An ingest pass's outcome: each new file published exactly once, in batches (runs); blocked if any blocked."""
    status = {"ok": PUBLISHED}.get(res.status, res.status)
    if not res.runs and res.exit_code == EXIT_PUBLISHED:
        status = "nothing new"
    last = res.runs[-1] if res.runs else None
    checks: dict[str, list[dict[str, Any]]] = {}
    for r in res.runs:
        checks.setdefault(r.table, []).extend(r.checks)
    published = [r for r in res.runs if r.status == PUBLISHED]
    return Outcome(
        kind="ingest",
        run_id=last.run_id if last else "",
        status=status,
        exit_code=res.exit_code,
        retryable=_retryable(res.exit_code),
        message=res.message(),
        config=config,
        tables=[res.table],
        files=[f.uri for f in res.files],
        checks=checks,
        snapshots={res.table: published[-1].snapshot_id if published else None},
        run_ids={res.table: last.run_id} if last else {},
        held=[r.run_id for r in res.runs if r.status == AWAITING_REVIEW],
        error=next((r.error for r in res.runs if r.error), None),
    )


# --- one lakehouse per wap.toml and process ----------------------------------------------------------------------

_lakehouses: dict[str, Lakehouse] = {}
_lock = threading.Lock()


def lakehouse(config: str | os.PathLike[str] | None = None, progress: Callable[[str], None] | None = None) -> Lakehouse:
    """The lakehouse of a wap.toml, one per config and process: the tasks a worker process runs share its Spark
    session (Spark starts at the first step that needs it, not here)."""
    from wapflow import api

    key = str(api.config_path(config) or "")
    with _lock:
        if key not in _lakehouses:
            _lakehouses[key] = api.connect(config, progress=progress)
        return _lakehouses[key]


def config_text(config: str | os.PathLike[str] | None) -> str | None:
    """The wap.toml a task runs with, as an absolute path (None: built-in defaults)."""
    from wapflow import api

    path = api.config_path(config)
    return str(path.resolve()) if path is not None else None


# --- the seam to `wap pipelines run` (an SDP project audited and published as one group) -------------------------


def run_pipeline(lh: Lakehouse, spec: str | None, **options: Any) -> MultiRunResult:
    """`wap pipelines run` from Python: the SDP project of `spec` (a spark-pipeline.yml, or its folder) run on
    the run's branch, audited, published in one commit or not at all. The one place the orchestrators call it."""
    from wapflow import api
    from wapflow.sdp.run import DryRun

    result = api.run_pipeline(lh, spec, **options)
    assert not isinstance(result, DryRun)  # dry is never asked for here
    return result
