"""One WAP run: write the files to a branch, audit the rows the run added, publish or block.

Steps are separate methods so that callers (tests, durable executors) can interleave runs and
resume after a crash; run() chains them. Every outcome, failures included, is recorded.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from wapflow.audit.checks import observed_metrics, resolve_columns, run_checks, validate_expressions
from wapflow.audit.report import AuditReport
from wapflow.config import Check, NotNullCheck
from wapflow.errors import (
    EXIT_BLOCKED,
    EXIT_PUBLISHED,
    EngineError,
    InputError,
    UsageError,
    WapError,
)
from wapflow.lakehouse import spark_errors
from wapflow.lakehouse.identifiers import TableName, validate_branch
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.lakehouse.tables import RUN_ID_PROP, SOURCES_PROP, Snapshot
from wapflow.publish import find_published, publish
from wapflow.runs.store import RunRecord
from wapflow.write.schema import align_to_table
from wapflow.write.sources import SourceFile, detect_format, read_batch, resolve_sources

_INPUT_MARKERS = (
    "Malformed",
    "FAILFAST",
    "PARSE",
    "Parquet",
    "parquet",
    "PATH_NOT_FOUND",
    "FileNotFound",
    "UNABLE_TO_INFER_SCHEMA",
    "CANNOT_READ",
    "corrupt",
    "JSON",
    "CSV",
    "CAST_INVALID_INPUT",
)


def new_run_id() -> str:
    """Sortable by time, unique across machines, and safe in branch names and SQL."""
    return datetime.now(timezone.utc).strftime("%Y%m%dt%H%M%S") + "_" + secrets.token_hex(3)


def validate_run_id(run_id: str) -> str:
    validate_branch(run_id)
    return run_id


@dataclass
class RunResult:
    run_id: str
    table: str
    status: str  # published | blocked | failed
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

    @property
    def exit_code(self) -> int:
        if self.status == "published":
            return EXIT_PUBLISHED
        if self.status == "blocked":
            return EXIT_BLOCKED
        return int((self.error or {}).get("exit_code", 3))

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
            "exit_code": self.exit_code,
        }


class WapRun:
    """State of one run across its steps."""

    def __init__(
        self,
        lakehouse: Lakehouse,
        table: str,
        sources: list[str],
        *,
        branch: str | None = None,
        run_id: str | None = None,
        extra_checks: list[Check] | None = None,
        not_null: list[str] | None = None,
    ) -> None:
        self.lh = lakehouse
        self.run_id = validate_run_id(run_id) if run_id else new_run_id()
        self.table_text = table
        self.patterns = list(sources)
        self.branch = branch
        self.checks: list[Check] = list(extra_checks or [])
        for col in not_null or []:
            self.checks.append(NotNullCheck(check="not_null", column=col))
        self.rec = RunRecord(run_id=self.run_id, table_name=table, status="running", branch=branch, files=list(sources))
        self.sources: list[SourceFile] = []
        self.base: int | None = None
        self.run_snapshots: list[Snapshot] = []
        self.report: AuditReport | None = None
        self.already_published: int | None = None
        self.created_table = False
        self.published_via: str | None = None
        self.message = ""
        self.observed: dict[str, Any] | None = None

    # --- helpers ------------------------------------------------------------------------------

    def _step(self, name: str) -> "_Timer":
        return _Timer(self.rec.timings, name)

    def _save(self) -> None:
        try:
            self.lh.store.save(self.rec)
        except Exception as e:  # noqa: BLE001 - the run's own outcome matters more than its record
            self.lh.progress(f"warning: could not record run {self.run_id}: {e}")

    # --- steps --------------------------------------------------------------------------------

    def prepare(self) -> None:
        """Validate names, resolve files, check idempotence. No data moves."""
        with self._step("prepare"):
            self.table = TableName.parse(self.table_text)
            self.table_cfg = self.lh.config.table(self.table.dotted)
            self.checks = list(self.table_cfg.checks) + self.checks
            self.branch = validate_branch(self.branch) if self.branch else f"wap_{self.run_id}"
            self.rec.branch = self.branch
            previous = self.lh.store.get(self.run_id)
            if previous is not None:
                self.rec.started_at = previous.started_at
                self.base = previous.base_snapshot_id
            self.rec.status = "running"
            self._save()
            self.sources = resolve_sources(self.patterns)
            self.rec.files = [s.uri for s in self.sources]
            self.fmt = detect_format(self.sources, self.table_cfg.format)
            tables = self.lh.tables
            if tables.exists(self.table):
                self.already_published = find_published(tables, self.table, self.run_id)

    def write(self) -> None:
        """Append the batch to the run's branch; main and its readers see nothing."""
        if self.already_published is not None:
            return
        tables, branches = self.lh.tables, self.lh.branches
        with self._step("write"):
            exists = tables.exists(self.table)
            if exists and branches.exists(self.table, self.branch):
                mine = self._branch_snapshots()
                if mine:
                    # A crash after the write: the branch already holds this run's rows.
                    self.run_snapshots = mine
                    self.base = mine[0].parent_id
                    self.lh.progress(f"branch {self.branch} already holds run {self.run_id}'s rows; resuming")
                    return
                raise UsageError(
                    f"branch {self.branch} of {self.table} already exists and holds another run's data",
                    hint=f"pick another --branch, or drop it with `wap discard {self.branch} --table {self.table}`",
                )
            self.lh.progress(f"reading {len(self.sources)} file(s) as {self.fmt}")
            try:
                table_schema = tables.schema(self.table) if exists else None
                df = read_batch(self.lh.spark, self.sources, self.fmt, self.table_cfg.read_options, table_schema)
                if table_schema is not None:
                    df, info = align_to_table(df, table_schema, table=self.table.dotted, files=self.rec.files)
                    for w in info.widened:
                        self.lh.progress(f"widening {w}")
                else:
                    df.schema  # noqa: B018 - forces schema inference so unreadable files fail before any DDL
            except WapError:
                raise
            except Exception as e:  # noqa: BLE001
                raise self._classify(e) from e
            resolve_columns(self.checks, df.columns, table=self.table.dotted)
            validate_expressions(self.checks, df, table=self.table.dotted)
            if not exists:
                self.lh.progress(f"creating table {self.table}")
                tables.ensure_namespace(self.table)
                tables.create_like(self.table, df)
                self.created_table = True
            self.base = branches.create(self.table, self.branch)
            self.rec.base_snapshot_id = self.base
            self._save()
            self.lh.progress(f"writing to branch {self.branch}")
            observation = None
            if self.checks:
                # Row-level checks are computed by the write job itself: auditing them costs no extra scan.
                from pyspark.sql import Observation

                observation = Observation(f"wap_audit_{self.run_id}")
                df = df.observe(observation, *observed_metrics(self.checks, df.columns, table=self.table.dotted))
            try:
                (
                    df.writeTo(branches.write_target(self.table, self.branch))
                    .option(f"snapshot-property.{RUN_ID_PROP}", self.run_id)
                    .option(f"snapshot-property.{SOURCES_PROP}", ",".join(s.uri for s in self.sources)[:4000])
                    .append()
                )
            except Exception as e:  # noqa: BLE001
                self._undo_write()
                raise self._classify(e) from e
            self.run_snapshots = self._branch_snapshots()
            if observation is not None:
                self.observed = dict(observation.get)
                written = sum(s.added_records for s in self.run_snapshots)
                if int(self.observed.get("_rows") or 0) != written:
                    # Never trust metrics that do not describe exactly the rows committed: re-scan instead.
                    self.observed = None

    def _branch_snapshots(self) -> list[Snapshot]:
        tables = self.lh.tables
        snaps = tables.snapshots(self.table)
        chain = tables.ancestry(snaps, tables.head(self.table, self.branch))
        mine = [s for s in chain if s.run_id == self.run_id]
        return list(reversed(mine))

    def _undo_write(self) -> None:
        """A failed write leaves nothing behind: the empty branch, and a table this run created."""
        try:
            self.lh.branches.drop(self.table, self.branch)
            if self.created_table:
                self.lh.tables.drop(self.table)
        except Exception as e:  # noqa: BLE001
            self.lh.progress(f"warning: cleanup after failed write: {e}")

    def _classify(self, e: BaseException) -> WapError:
        text = spark_errors.full_text(e)
        first = spark_errors.describe(e)
        files = ", ".join(s.uri for s in self.sources)
        if any(m in text for m in _INPUT_MARKERS):
            return InputError(
                f"could not read {self.fmt} input ({files}): {first[:500]}",
                hint="check that the file is complete and in the declared format; nothing was published",
            )
        return EngineError(f"Spark failed while writing {self.table}: {first[:500]}")

    def audit(self) -> AuditReport:
        if self.already_published is not None:
            return AuditReport(rows=0, checks=[])
        with self._step("audit"):
            head = self.run_snapshots[-1].snapshot_id if self.run_snapshots else self.lh.tables.head(self.table, self.branch)
            assert head is not None
            self.rec.branch_snapshot_id = head
            self.rec.rows_written = sum(s.added_records for s in self.run_snapshots)
            if not self.checks:
                self.report = AuditReport(rows=self.rec.rows_written, checks=[])
            else:
                self.lh.progress(f"auditing {self.rec.rows_written} new row(s) with {len(self.checks)} check(s)")
                added = self.lh.tables.read_increment(self.table, self.base, head)
                try:
                    self.report = run_checks(added, self.checks, table=self.table.dotted, observed=self.observed)
                except WapError:
                    raise
                except Exception as e:  # noqa: BLE001
                    raise EngineError(f"the audit query failed: {spark_errors.describe(e)}") from e
            self.rec.checks = [c.to_dict() for c in self.report.checks]
            self._save()
            return self.report

    def publish(self) -> None:
        tables, branches = self.lh.tables, self.lh.branches
        if self.already_published is not None:
            with self._step("cleanup"):
                branches.drop(self.table, self.branch)
            self.rec.status, self.rec.snapshot_id = "published", self.already_published
            self.published_via = "already"
            self.message = f"run {self.run_id} was already published (snapshot {self.already_published}); nothing to do"
            return
        assert self.report is not None
        if self.report.passed:
            with self._step("publish"):
                self.lh.progress(f"publishing {self.branch} to main")
                done = publish(branches, tables, self.table, self.branch, self.run_snapshots)
                branches.drop(self.table, self.branch)
            self.rec.status, self.rec.snapshot_id, self.rec.branch_kept = "published", done.snapshot_id, False
            self.published_via = done.method
            warned = len(self.report.warned)
            self.message = f"published {self.rec.rows_written} row(s) to {self.table}" + (
                f" with {warned} warning(s)" if warned else ""
            )
        else:
            failed = ", ".join(c.name for c in self.report.failed)
            self.rec.status, self.rec.snapshot_id = "blocked", self.rec.branch_snapshot_id
            if self.table_cfg.on_failure == "drop":
                branches.drop(self.table, self.branch)
                self.rec.branch_kept = False
                self.message = f"blocked by {failed}; main unchanged; branch {self.branch} dropped"
            else:
                self.rec.branch_kept = True
                self.message = (
                    f"blocked by {failed}; main unchanged; rows kept on branch {self.branch} "
                    f"(inspect: wap query \"SELECT * FROM {self.table}\" --branch {self.branch}; "
                    f"drop: wap discard {self.branch})"
                )

    # --- the whole run ------------------------------------------------------------------------

    def run(self) -> RunResult:
        step = "prepare"
        try:
            self.prepare()
            step = "write"
            self.write()
            step = "audit"
            self.audit()
            step = "publish"
            self.publish()
        except WapError as e:
            e.at(run_id=self.run_id, step=step)
            self._fail(e, step)
        except Exception as e:  # noqa: BLE001 - record anything unexpected, then report it
            err = EngineError(f"{type(e).__name__}: {spark_errors.describe(e)}")
            err.at(run_id=self.run_id, step=step)
            self._fail(err, step)
        self.rec.finished_at = datetime.now(timezone.utc)
        self._save()
        return self.result()

    def _fail(self, e: WapError, step: str) -> None:
        self.rec.status = "failed"
        if not e.hint and step in ("audit", "publish"):
            e.hint = f"the branch {self.branch} is kept; retry with `wap run {self.table_text} ... --run-id {self.run_id}`"
        self.rec.error = e.to_dict()
        self.rec.error["run_id"] = self.run_id
        if step in ("audit", "publish") and self.branch:
            try:
                self.rec.branch_kept = self.lh.branches.exists(self.table, self.branch)
            except Exception:  # noqa: BLE001
                pass
        self.message = str(e)

    def result(self) -> RunResult:
        return RunResult(
            run_id=self.run_id,
            table=self.table_text,
            status=self.rec.status,
            branch=self.rec.branch,
            rows_written=self.rec.rows_written,
            snapshot_id=self.rec.snapshot_id,
            base_snapshot_id=self.base,
            checks=self.rec.checks,
            error=self.rec.error,
            files=self.rec.files,
            branch_kept=self.rec.branch_kept,
            published_via=self.published_via,
            message=self.message,
            timings=dict(self.rec.timings),
        )


class _Timer:
    def __init__(self, sink: dict[str, float], name: str) -> None:
        self.sink, self.name = sink, name

    def __enter__(self) -> "_Timer":
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.sink[self.name] = round(self.sink.get(self.name, 0.0) + time.perf_counter() - self.t0, 3)


def run_wap(lakehouse: Lakehouse, table: str, sources: list[str], **kw: Any) -> RunResult:
    """Write, audit and publish `sources` into `table`; never raises for a failed run, see .status."""
    return WapRun(lakehouse, table, sources, **kw).run()
