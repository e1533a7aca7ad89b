"""Rows of `wap metrics`: a table's metric history read from the run store alone (no Spark, no JVM).

The history itself (what each audit records, which runs count) is wapflow.runs.metrics'; the metric names are
wapflow.audit.anomaly's. A dashboard's quality trends read the same rows.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, TypedDict

from wapflow.audit.anomaly import CHANGE_METRICS, METRICS, SCHEMA_METRIC
from wapflow.errors import NotFound, UsageError, did_you_mean
from wapflow.runs.metrics import MetricHistory
from wapflow.runs.store import RunStore
from wapflow.sql.identifiers import TableName

if TYPE_CHECKING:
    from wapflow.lakehouse.lakehouse import Lakehouse

KNOWN_METRICS = (*METRICS, *CHANGE_METRICS, SCHEMA_METRIC)


class MetricRowDoc(TypedDict):
    """One line of `wap metrics` (and one element of its JSON `metrics` list)."""

    run_id: str
    table: str
    metric: str
    column: str | None  # None: a metric of the whole batch (row_count, rows_inserted...)
    value: float | None
    text: str | None  # a metric that is not a number (schema: the columns and types as JSON)
    run_at: str
    status: str  # the run's status (published, blocked...); history backfilled from snapshots: published


def metric_rows(
    store: RunStore, table: str, *, column: str | None = None, metric: str | None = None, limit: int = 20
) -> list[MetricRowDoc]:
    """The metrics of the table's last `limit` audited runs (of one metric, one column), newest run first.

    UsageError for an unknown metric or a limit below 1; NotFound (with near matches) for a table of no history.
    """
    name = TableName.parse(table).dotted
    if metric is not None and metric not in KNOWN_METRICS:
        raise UsageError(
            f"unknown metric '{metric}'{did_you_mean(metric, KNOWN_METRICS)}",
            hint=f"metrics are: {', '.join(KNOWN_METRICS)}",
        )
    if limit < 1:
        raise UsageError(f"--limit must be at least 1, not {limit}", hint="e.g. --limit 30")
    history = MetricHistory(store.engine)
    rows = history.read(name, metric=metric, column=column, runs=limit)
    if not rows:
        tables = history.tables()
        if name not in tables:
            raise NotFound(
                f"no metric history for {name}{did_you_mean(name, tables)}",
                hint="every audited run records its metrics: run the table first (`wap run`), or see `wap runs`",
            )
    return [
        MetricRowDoc(
            run_id=r.run_id,
            table=r.table,
            metric=r.metric,
            column=r.column or None,
            value=r.value,
            text=r.text,
            run_at=r.run_at.isoformat(sep=" ", timespec="seconds"),
            status=r.status,
        )
        for r in rows
    ]


class BackfillDoc(TypedDict):
    """What `wap metrics TABLE --backfill` recorded."""

    table: str
    recorded: int  # runs (or other writers' snapshots) given a row_count from main's history
    already: int  # appends on main whose run had recorded its metrics already


def backfill_metrics(lh: Lakehouse, table: str) -> BackfillDoc:
    """History for a table adopted mid-life, from main's snapshots (metadata only, no JVM where the catalog
    allows): each append on main whose run recorded no row count (another writer's commit, a run of a wapflow
    before the metric history) gets its added-records as row_count at its commit time. Other writers'
    snapshots are recorded under `snapshot-<id>` and count as published. Doing it again records nothing new."""
    from wapflow.lakehouse.lineage import run_of
    from wapflow.service.tables import main_snapshots

    name = TableName.parse(table)
    snaps, main = main_snapshots(lh, name)
    rows: dict[str, tuple[datetime, int]] = {}  # run id -> (its first commit, rows it added)
    for s in reversed(main):  # oldest first: a run's time is its first snapshot's
        if s.operation != "append":
            continue  # overwrites, deletes, compaction (replace): not a batch's row count
        rid = run_of(snaps, s) or f"snapshot-{s.snapshot_id}"
        at, n = rows.get(rid, (s.committed_at, 0))
        rows[rid] = (at, n + s.added_records)
    recorded = MetricHistory(lh.store.engine).record_missing(
        name.dotted, "row_count", {rid: (at, float(n)) for rid, (at, n) in rows.items()}
    )
    return BackfillDoc(table=name.dotted, recorded=recorded, already=len(rows) - recorded)
