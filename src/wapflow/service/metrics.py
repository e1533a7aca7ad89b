"""Rows of `wap metrics`: a table's metric history read from the run store alone (no Spark, no JVM).

The history itself (what each audit records, which runs count) is wapflow.runs.metrics'; the metric names are
wapflow.audit.anomaly's. A dashboard's quality trends read the same rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, TypedDict

from wapflow.audit.anomaly import CHANGE_METRICS, METRICS, SCHEMA_METRIC
from wapflow.errors import NotFound, UsageError, did_you_mean
from wapflow.lakehouse.model import ADDED_DATA_FILES, ADDED_RECORDS
from wapflow.runs.metrics import MetricHistory
from wapflow.runs.store import RunStore
from wapflow.sql.identifiers import TableName

if TYPE_CHECKING:
    from wapflow.lakehouse.lakehouse import Lakehouse
    from wapflow.lakehouse.model import Snapshot

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
    recorded: int  # runs (or other writers' snapshots) given metrics from main's history
    already: int  # appends on main whose run had recorded its metrics already (itself, or an earlier backfill)
    columns: int  # of those recorded, how many got per-column metrics (null_fraction, min, max) from their files


def backfill_metrics(lh: Lakehouse, table: str) -> BackfillDoc:
    """History for a table adopted mid-life, from main's snapshots (metadata only, no JVM where the catalog
    allows): each append on main whose run did not record its metrics (another writer's commit, a run of a
    wapflow before the metric history) gets, at its commit time, its added records as row_count and, from the
    column metrics of the data files it added (its manifests), each column's null_fraction and the min and
    max of numeric columns, as an audit records them. A run's snapshots count together: those its properties
    name, and those the run store records as a published run's (a cherry-pick whose origin has expired).
    Other writers' snapshots are recorded under `snapshot-<id>` and count as published; a snapshot that added
    no rows and names no run (the empty one that creating a table commits) is no batch and is left out. What
    a run recorded itself is never replaced; doing it again records nothing new."""
    from wapflow.audit.anomaly import file_metric_values
    from wapflow.lakehouse.lineage import run_of
    from wapflow.service.tables import main_snapshots, reading

    name = TableName.parse(table)
    snaps, main = main_snapshots(lh, name)
    history = MetricHistory(lh.store.engine)
    lost = _lost_picks(snaps, main, history.published_snapshots(name.dotted))
    runs: dict[str, tuple[datetime, int, list[int]]] = {}  # run id -> (its first commit, rows added, snapshots)
    for s in reversed(main):  # oldest first: a run's time is its first snapshot's
        if s.operation != "append":
            continue  # overwrites, deletes, compaction (replace): not a batch's row count
        rid = run_of(snaps, s) or lost.get(s.snapshot_id)
        if rid is None:
            if not _added_data(s.summary):
                continue  # the empty snapshot that creating a table commits (wapflow's, any CTAS of no rows)
            rid = f"snapshot-{s.snapshot_id}"
        at, n, ids = runs.get(rid, (s.committed_at, 0, []))
        runs[rid] = (at, n + s.added_records, [*ids, s.snapshot_id])
    audited = history.audited(name.dotted)
    files = lh.iceberg.file_metrics() if any(rid not in audited for rid in runs) else None
    values: dict[str, tuple[datetime, dict[tuple[str, str], float]]] = {}
    for rid, (at, n, ids) in runs.items():
        got: dict[tuple[str, str], float] = {("row_count", ""): float(n)}
        if files is not None and rid not in audited:
            with reading(f"reading the manifests of {name}"):
                got.update(file_metric_values(files.added_file_metrics(name, "main", ids)))
        values[rid] = (at, got)
    new = history.record_missing(name.dotted, values)
    recorded = len({rid for rid, _, column in new})
    columns = len({rid for rid, _, column in new if column})
    return BackfillDoc(table=name.dotted, recorded=recorded, already=len(runs) - recorded, columns=columns)


def _lost_picks(snaps: Mapping[int, Snapshot], main: list[Snapshot], owners: Mapping[int, str]) -> dict[int, str]:
    """Snapshots of main whose run only the run store still knows (main newest first; owners: published runs
    by the snapshots they wrote): a run's cherry-picks name it through the branch snapshots they were picked
    from, gone once those expire. A publish re-applies a run's snapshots one after the other under the table's
    publish lock, and the store keeps the last (the snapshot main was published to): the lost cherry-picks
    below it, down to a snapshot that is not one, are that run's too."""
    from wapflow.lakehouse.lineage import picked_from, run_of

    out: dict[int, str] = {}
    current: str | None = None
    for s in main:
        src = picked_from(s.summary)
        known = owners.get(s.snapshot_id) or (owners.get(src) if src is not None else None)
        if known is not None:
            current = known
        elif src is None or run_of(snaps, s) is not None:
            current = None  # not a cherry-pick, or one that names its run: the run's publish began above
        if current is not None and run_of(snaps, s) is None:
            out[s.snapshot_id] = current
    return out


def _added_data(summary: Mapping[str, str]) -> bool:
    """Whether a snapshot added data files or rows (Iceberg's summary; a key it leaves out counts as 0)."""
    return any(int(summary.get(key, "0") or 0) > 0 for key in (ADDED_DATA_FILES, ADDED_RECORDS))
