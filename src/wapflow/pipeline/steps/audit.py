"""The audit step: the run's checks over the rows it added (metrics observed by the write, file metadata, or a
scan), main read at pinned heads by the checks that depend on it, re-checked under the publish lock."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import date, datetime, timedelta
from typing import Any

from wapflow.audit.anomaly import (
    CHANGE_METRICS,
    SCHEMA_METRIC,
    day_at,
    file_bound_texts,
    file_metric_values,
    same_day,
)
from wapflow.audit.batch_checks import schema_of
from wapflow.audit.calendars import holiday_near
from wapflow.audit.checks import AuditPlan, FileMetrics, evaluate
from wapflow.audit.checktype import AuditContext, Delivery
from wapflow.audit.report import AuditReport, CheckResult
from wapflow.config import Check
from wapflow.errors import ConfigError, WapError, did_you_mean
from wapflow.faults import crash_point
from wapflow.files.spark_paths import SparkInputs
from wapflow.lakehouse.lineage import run_of
from wapflow.lakehouse.model import DELETED_DATA_FILES, Snapshot
from wapflow.pipeline.steps.context import Run
from wapflow.pipeline.steps.record import unexpected
from wapflow.runs.metrics import MetricHistory
from wapflow.spark import errors as spark_errors
from wapflow.sql.identifiers import TableName, quote
from wapflow.vocabulary import OVERRIDABLE_CHECKS
from wapflow.writing.modes import Changes, WriteMode, changes_result
from wapflow.writing.plan import WriteOutcome


def _tables_in_sql(sql: str, catalog: str | None = None) -> set[TableName]:
    """Lakehouse tables a custom_sql query names (the view `batch` and CTEs excluded; `catalog.` dropped)."""
    import sqlglot
    from sqlglot import exp

    try:
        tree = sqlglot.parse_one(sql, read="spark")
    except sqlglot.errors.ParseError:
        return set()
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    out: set[TableName] = set()
    for t in tree.find_all(exp.Table):
        parts = [p for p in (t.catalog, t.db, t.name) if p]
        if catalog and len(parts) > 2 and parts[0] == catalog:
            parts = parts[1:]
        if len(parts) == 1 and parts[0].lower() in ctes | {"batch"}:
            continue
        try:
            out.add(TableName.parse(".".join(parts)))
        except WapError:
            continue
    return out


def audit(run: Run) -> AuditReport:
    if run.already_published is not None:
        return AuditReport(rows=0, checks=[])
    if run.report is not None and not run.written():
        return run.report  # blocked by the schema contract before anything was written
    if not run.branch_as_recorded():
        return AuditReport(rows=0, checks=[])  # the state is older than the branch: write goes first again
    tables = run.lh.tables
    written = run.outcome()  # what the write did: a change or an append, its rows, its commit
    with run.timer("audit"), _batch_inputs(run, written):
        changes: Changes | None = None
        run.record.branch_snapshot_id = written.snapshot_id
        if not written.staged and (written.change or any(c.check == "max_change" for c in run.checks)):
            # An append's only where something reads it: its metadata read here failed in a DBOS-resumed audit
            # (tests/process/test_watch_kill.py), and nothing else of an append needs it.
            changes = run_changes(run, written)
        # A merge's or replace's commit counts the rows its copy-on-write files copied too: the change says.
        run.record.rows_written = written.rows_written
        quarantined = written.rows_quarantined
        history = MetricHistory(run.lh.store.engine)
        file_metrics = _once(lambda: _file_metrics(run))
        added = None
        batch_at: datetime | None = None
        if not run.checks:
            # On the user's word only (asked again: wap.toml may have changed since prepare), and said so.
            unchecked = run.unchecked()
            lines = [unchecked_result(unchecked)] if unchecked is not None else []
            run.report = AuditReport(rows=run.record.rows_written, checks=lines)
        else:
            total = run.record.rows_written + quarantined
            run.lh.progress(f"auditing {total} new row(s) with {len(run.checks)} check(s)")
            added = added_rows(run)
            if run.plan is None:
                run.plan = AuditPlan.for_batch(
                    run.checks, added.columns, table=run.target.dotted, key=run.table_cfg.sample_key()
                )
            view = run.lh.iceberg.audit_view(run.target, run.branch, run.base, _group_tables(run))
            branch_sql = tables.ident(run.staging) if run.staging is not None else view.branch_sql
            # Checks that depend on main read it at a head pinned here (re-checked at publish, where the
            # backend's publish would not notice main moving by itself).
            for t in _main_dependencies(run):
                view.pin(t)
            run.main_heads = view.pinned
            batch_at = batch_day(run, added, file_metrics())
            ctx = AuditContext(
                main_table=view.read_main,
                this_table=run.target,
                history=lambda: _history(run),
                branch_sql=branch_sql,
                file_metrics=file_metrics,
                changes=changes.to_dict() if changes is not None else None,
                metric_history=lambda metric, column, n, weekday: history.published(
                    run.target.dotted, metric, column, n, weekday
                ),
                last_schema=lambda: history.last_published_schema(run.target.dotted),
                metric_texts=lambda metric, column, n: history.published_texts(run.target.dotted, metric, column, n),
                run_at=run.record.started_at,
                batch_at=batch_at,
                holiday=_holiday(run, batch_at),
                table_after=_table_after(run, written),
                batch_of=_sibling_batches(run),
                delivery=_delivery(run, quarantined),
            )
            try:
                run.report = evaluate(run.plan, added, observed=run.observed, ctx=ctx)
            except WapError:
                raise
            except Exception as e:
                raise unexpected(e, run.run_id, "audit", f"auditing {run.target}") from e
            _apply_quarantine(run, quarantined)
            _apply_overrides(run)
        if written.change and changes is not None:
            mode = written.applied_mode(run.table_cfg)
            run.report.checks.append(changes_result(mode, changes, change_keys(run, mode)))
        history.record(
            run.run_id,
            run.target.dotted,
            run.record.started_at,
            batch_metrics(run.report, file_metrics(), changes if written.change else None, added),
            batch_at,
        )
        run.report.schema_changes = list(run.schema_changes)
        run.record.checks = [c.to_dict() for c in run.report.checks]
        run.save()
        crash_point("audit")
        return run.report


# The report's line of a run that had no checks (its check type; never a check a table declares).
NO_CHECKS = "no_checks"


def unchecked_result(word: str) -> CheckResult:
    """The report's line of a run published without checks, on the user's `word` (checks = [] in wap.toml,
    --no-checks): `wap report`, --json and the dashboard show it as they show a check, so an unaudited publish
    never reads as an audited one."""
    return CheckResult(
        name="no checks",
        check=NO_CHECKS,
        severity="warn",
        status="passed",
        observed=word,
        failing_rows=0,
        threshold=f"published without checks: {word}",
        source="metadata",
    )


@contextmanager
def _batch_inputs(run: Run, written: WriteOutcome) -> Iterator[None]:
    """A merge or replace audits its batch read again from the files: they stay linked for Spark meanwhile."""
    if not written.change or run.inputs is not None or not run.run_snapshots:
        yield
        return
    run.inputs = SparkInputs(run.files)
    try:
        yield
    finally:
        run.inputs.close()
        run.inputs = None


def _delivery(run: Run, quarantined: int) -> Delivery | None:
    """The run's files and how to read their producer's manifests (control_totals); None for a DataFrame batch."""
    if not run.files:
        return None
    storage = run.lh.storage
    return Delivery(
        files=[(f.uri, f.size) for f in run.files],
        read=storage.read_if_exists,
        digest=storage.digest,
        quarantined=quarantined,
        metadata=storage.user_metadata,
        tail=storage.tail,
    )


def run_changes(run: Run, written: WriteOutcome) -> Changes:
    """The run's change: a merge's or replace's as its write counted it, or an append's rows against main's
    rows at its base (metadata only)."""
    counts = written.change_counts
    if counts is not None:
        return counts
    return Changes(rows_inserted=written.rows_added, main_rows=run.main_rows_at_base())


def change_keys(run: Run, mode: WriteMode) -> list[dict[str, Any]]:
    """A merge's sample keys per kind of change (WriteMode.change_keys): its batch as the write applied it
    (without the changes a quarantine held back) against its table at the run's base. Evidence for review,
    never a verdict: if its job fails, the run goes on without samples (and says so).

    Only for a run that stops before main (blocked, or held by the table's `review`): one that publishes now is
    never diffed, and the job costs about a fifth of its merge (docs/guides/review.md)."""
    if run.staging is not None or not run.run_snapshots:
        return []
    report = run.report
    if report is not None and report.passed and not run.table_cfg.holds_for_review(bool(report.warned)):
        return []
    tables = run.wt()

    def applied() -> Any:
        from wapflow.pipeline.steps.write import batch_of

        source = mode.source(batch_of(run))
        if run.q_snapshots and run.quarantine is not None:
            held = tables.read_increment(run.quarantine, run.q_base, run.q_snapshots[-1].snapshot_id)
            key = list(run.table_cfg.key)
            source = source.join(held.select(*[quote(k) for k in key]), key, "left_anti")
        return source

    def before() -> Any:
        return tables.read_increment(run.target, None, run.base) if run.base is not None else None

    try:
        return mode.change_keys(applied, before)
    except WapError:
        raise
    except Exception as e:  # noqa: BLE001 - sample keys are evidence for review, not part of the verdict
        run.lh.progress(f"warning: no sample keys of the change ({spark_errors.describe(e)})")
        return []


def added_rows(run: Run) -> Any:
    """Every row the run added: the table branch's new rows, plus quarantined ones, or the staging table.
    A merge or replace: its batch as applied (merge: without its deletes), not the files its commit
    rewrote (copy-on-write copies unchanged rows into new files; those are not the run's)."""
    tables = run.wt()
    if run.staging is not None:
        return tables.read(run.staging)
    written = run.outcome()
    if written.change:
        from wapflow.pipeline.steps.write import batch_of

        mode = written.applied_mode(run.table_cfg)
        return mode.audited(mode.source(batch_of(run)))
    head = run.run_snapshots[-1].snapshot_id
    if written.case == "engine" and not only_new_rows(run.run_snapshots):
        # A pipeline engine's refresh (a materialized view: a delete, then an append): the whole new table.
        return tables.read_increment(run.target, None, head)
    added = tables.read_increment(run.target, run.base, head)
    if run.q_snapshots:
        assert run.quarantine is not None
        q = tables.read_increment(run.quarantine, run.q_base, run.q_snapshots[-1].snapshot_id)
        added = added.unionByName(q.select(*added.columns))
    return added


def _group_tables(run: Run) -> list[TableName]:
    """The other tables of the run's multi-table run (none for a run of one table)."""
    return [TableName.parse(t) for t in run.siblings]


def _sibling_batches(run: Run) -> Callable[[TableName], Any] | None:
    """The new rows of the other tables of the run's group (a multi-table run), by name."""
    if not run.siblings:
        return None

    def batch(t: TableName) -> Any:
        sibling = run.siblings.get(t.dotted)
        if sibling is None:
            raise ConfigError(
                f"{t} is not a table of this multi-table run ({', '.join(sorted(run.siblings))})",
                hint="name a table of the same run, or run the tables together (`wap run-tables`)",
            )
        return added_rows(sibling)

    return batch


def _table_after(run: Run, written: WriteOutcome) -> Callable[[], Any] | None:
    """The run's table on its branch after a write that changed rows in place (a merge): `unique` looks up
    there the keys the batch touched."""
    if not written.keys_after_write or run.staging is not None or not run.run_snapshots:
        return None
    return lambda: run.wt().read(run.target, run.ref())


def _once(fn: Callable[[], FileMetrics | None]) -> Callable[[], FileMetrics | None]:
    """The file metrics read once per audit: the checks and the metric history both use them."""
    got: list[FileMetrics | None] = []

    def once() -> FileMetrics | None:
        if not got:
            got.append(fn())
        return got[0]

    return once


def batch_metrics(
    report: AuditReport, fm: FileMetrics | None, changes: Changes | None, added: Any
) -> dict[tuple[str, str], float | str]:
    """What the metric history keeps of a run, all of it already at hand (no extra scan): the row count;
    per column the null fraction, min and max of the files the run added (Iceberg metadata); what the
    checks measured (anomaly checks: means, sums...); a merge's rows inserted, updated and deleted; the
    audited rows' columns and types (for schema_change)."""
    out: dict[tuple[str, str], float | str] = {("row_count", ""): float(report.rows)}
    if fm is not None:
        out.update(file_metric_values(fm))
        out.update(file_bound_texts(fm))  # dates, times, strings: text, for `wap diff`
    for m in report.metrics:
        v = m["value"]
        out[(str(m["metric"]), str(m["column"]))] = v if isinstance(v, str) else float(v)
    if changes is not None:
        figures = changes.to_dict()
        out.update({(m, ""): float(figures.get(m) or 0) for m in CHANGE_METRICS})
    if added is not None:
        out[(SCHEMA_METRIC, "")] = json.dumps(schema_of(added), sort_keys=True)
    return out


def batch_day(run: Run, added: Any, fm: FileMetrics | None) -> datetime | None:
    """The batch's own day where its table names a time column (None where it names none): the day the added
    files' bounds of it both fall on (Iceberg metadata, no job: a daily batch), else the median day of its
    rows (one aggregate). Anomaly checks' weekly seasonality judges the batch by it, and the metric history
    keys the run on it."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DateType, TimestampNTZType, TimestampType

    name = run.table_cfg.time_column
    if name is None or added is None:
        return None
    fields = {f.name.lower(): f for f in added.schema.fields}
    field = fields.get(name.lower())
    where = f'[tables."{run.target.dotted}"] time_column'
    if field is None:
        raise ConfigError(
            f"{where}: '{name}' is not a column of the batch{did_you_mean(name, [f.name for f in fields.values()])}",
            hint="name the date or timestamp column holding when each row happened, or remove time_column",
        )
    if not isinstance(field.dataType, (DateType, TimestampType, TimestampNTZType)):
        raise ConfigError(
            f"{where}: '{field.name}' is {field.dataType.simpleString()}, not a date or timestamp",
            hint="name a date or timestamp column (a string of dates: cast it in a model, or remove time_column)",
        )
    if fm is not None:
        day = same_day(fm.lower.get(field.name.lower()), fm.upper.get(field.name.lower()))
        if day is not None:
            return day
    median = added.agg(F.percentile_approx(F.unix_date(F.to_date(F.col(quote(field.name)))), F.lit(0.5))).first()
    if median is None or median[0] is None:
        return None  # no row has a time: judged by the run's start
    return day_at(date(1970, 1, 1) + timedelta(days=int(median[0])))


def _holiday(run: Run, batch_at: datetime | None) -> str | None:
    """The holiday of the table's calendar (its `holidays`) the batch's day is near, in words; None without one.
    The day is the batch's own (time_column), else the day the run started."""
    code = run.table_cfg.holidays
    if code is None:
        return None
    day = batch_at or run.record.started_at
    return holiday_near(day.date(), code)


def _file_metrics(run: Run) -> FileMetrics | None:
    if run.staging is not None or run.q_snapshots or not run.run_snapshots:
        return None
    if run.outcome().change and not only_new_rows(run.run_snapshots):
        return None  # copy-on-write: the files it added copy rows that were there before
    try:
        metrics: FileMetrics | None = run.wt().added_file_metrics(
            run.target, run.ref(), [s.snapshot_id for s in run.run_snapshots]
        )
        return metrics
    except Exception as e:  # noqa: BLE001 - metadata is an optimisation; the scan is always right
        run.lh.progress(f"file metrics unavailable ({spark_errors.describe(e)}); scanning instead")
        return None


def only_new_rows(snapshots: list[Snapshot]) -> bool:
    """The commits took no data file off the table: every row of the files they added is one they wrote.
    A merge-on-read merge (format v3) writes its inserted and updated rows into new files and marks the rows
    they replace or delete in deletion vectors, so its added files hold exactly the rows its audit judges (the
    batch as applied, without its deletes), and their Iceberg metrics settle checks as an append's do. A
    copy-on-write merge or a replace rewrites files: their rows include unchanged ones."""
    return all(int(s.summary.get(DELETED_DATA_FILES, "0") or 0) == 0 for s in snapshots)


def _history(run: Run) -> list[tuple[datetime, int]]:
    """(commit time, rows added) of the table's earlier published runs, newest first (for volume checks)."""
    tables = run.lh.tables
    snaps = tables.snapshots(run.target)
    out = []
    for s in tables.ancestry(snaps, tables.head(run.target, "main")):
        rid = run_of(snaps, s)
        if rid and rid != run.run_id:
            out.append((s.committed_at, s.added_records))
    return out


def _main_head(run: Run, t: TableName) -> int | None:
    tables = run.lh.tables
    return tables.head(t, "main") if tables.exists(t) else None


def _main_tables(run: Run, chk: Check) -> set[TableName]:
    """Tables whose main this check's verdict reads (the check type says which)."""
    return chk.main_tables(run.target, lambda sql: _tables_in_sql(sql, run.lh.catalog))


def _main_dependent(run: Run, chk: Check) -> bool:
    return bool(_main_tables(run, chk))


def _main_dependencies(run: Run) -> set[TableName]:
    """Tables whose main the audit's verdict depends on (their heads are re-checked at publish)."""
    out: set[TableName] = set()
    for chk in run.checks:
        out.update(_main_tables(run, chk))
    return out


def recheck_main(run: Run) -> None:
    """Under the publish lock: if main moved since the audit read it, re-evaluate the checks that read main."""
    if run.staging is not None or not run.main_heads:
        return
    assert run.report is not None
    tables = run.lh.tables
    for t in run.main_heads:
        if tables.exists(TableName.parse(t)):
            tables.refresh(TableName.parse(t))  # other processes' publishes, not this process's cache
    moved = {t: (old, _main_head(run, TableName.parse(t))) for t, old in run.main_heads.items()}
    moved = {t: v for t, v in moved.items() if v[0] != v[1]}
    if not moved:
        return
    idx = [i for i, chk in enumerate(run.checks) if _main_dependent(run, chk)]
    if not idx:
        return
    where = ", ".join(f"{t} {a} -> {b}" for t, (a, b) in moved.items())
    run.lh.progress(f"main moved since the audit ({where}): re-checking {len(idx)} check(s)")
    view = run.lh.iceberg.audit_view(run.target, run.branch, run.base, _group_tables(run))
    written = run.outcome()
    with _batch_inputs(run, written):
        added = added_rows(run)
        sub = AuditPlan(
            [run.checks[i] for i in idx], added.columns, table=run.target.dotted, key=run.table_cfg.sample_key()
        )
        ctx = AuditContext(
            main_table=view.read_main,
            this_table=run.target,
            history=lambda: _history(run),
            branch_sql=view.branch_sql,
            run_at=run.record.started_at,
            changes=run_changes(run, written).to_dict() if run.run_snapshots else None,
        )
        try:
            again = evaluate(sub, added, ctx=ctx)
        except WapError:
            raise
        except Exception as e:
            raise unexpected(e, run.run_id, "publish", f"re-checking the audit of {run.target} at publish") from e
    for i, res in zip(idx, again.checks, strict=True):
        res.threshold = f"{res.threshold} (re-checked at publish: main moved, {where})"
        run.report.checks[i] = res
    run.main_heads = view.pinned
    run.record.checks = [c.to_dict() for c in run.report.checks]
    run.save()


def _apply_overrides(run: Run) -> None:
    """A blocked run a person approved: its history-based checks they overrode warn instead of failing, saying
    who and why (the approval's own record holds both too)."""
    if not run.overridden or run.report is None:
        return
    rec = run.record
    for c in run.report.checks:
        if c.name in run.overridden and c.check in OVERRIDABLE_CHECKS and c.status == "failed":
            c.status = "warned"
            c.threshold = f"{c.threshold}; overridden by {rec.review_by}: {rec.review_reason}".lstrip("; ")


def _apply_quarantine(run: Run, quarantined: int) -> None:
    """Row-level failures that were diverted do not block; too many diverted rows do."""
    assert run.report is not None
    if run.quarantine is None:
        return
    run.report.quarantined_rows = quarantined
    assert run.plan is not None
    for comp, res in zip(run.plan.compiled, run.report.checks, strict=False):  # + max_quarantine_rate
        if comp.blocks_rows and res.status == "failed":
            res.status = "quarantined"
    limit = run.table_cfg.max_quarantine_rate
    total = run.report.rows
    rate = quarantined / total if total else 0.0
    if limit is not None:
        run.report.checks.append(
            CheckResult(
                name=f"max_quarantine_rate({limit})",
                check="max_quarantine_rate",
                severity="error",
                status="passed" if rate <= limit else "failed",
                observed=round(rate, 6),
                failing_rows=quarantined,
                threshold=f"<= {limit}",
                source="write",
            )
        )


# --- publish ------------------------------------------------------------------------------
