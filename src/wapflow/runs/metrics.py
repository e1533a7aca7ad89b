"""The metric history: a table's batch metrics per audited run (row count, per column null fraction, min, max...).

Anomaly checks learn what is normal for a table from it, and `wap metrics` reads it back. One row per run,
table, metric and column (column "" for the batch's own metrics: row_count, rows_inserted...), with the run's
time and, where its table names a time column, the batch's own day (batch_at: what weekly seasonality keys
on, so a backfill or a late delivery is judged by its data's day). Which runs count as history is the run's
status in wap_runs (one owner of statuses): published runs; rows of no run in wap_runs are history
backfilled from the table's snapshots, published by definition.

A table of its own (`wap_metrics`, added by migration 0003 of wapflow/runs/migrations; batch_at by 0006).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from wapflow.runs.schema import METADATA, ensure_schema
from wapflow.runs.store import runs_table
from wapflow.vocabulary import PUBLISHED as PUBLISHED
from wapflow.vocabulary import RUN_BLOCKED, blocked_by_history_only, vouched_for

if TYPE_CHECKING:
    from wapflow.audit.anomaly import History

metrics_table = sa.Table(
    "wap_metrics",
    METADATA,
    sa.Column("run_id", sa.String(256), primary_key=True),
    sa.Column("table_name", sa.String(512), primary_key=True),
    sa.Column("metric", sa.String(64), primary_key=True),  # wapflow.audit.anomaly: METRICS, CHANGE_METRICS...
    sa.Column("column_name", sa.String(256), primary_key=True),  # lower-cased; "" for the batch's own metrics
    sa.Column("value", sa.Float),  # numeric metrics
    sa.Column("text", sa.Text),  # the others (the batch's schema as JSON)
    sa.Column("run_at", sa.DateTime(timezone=True), nullable=False),  # when the run started (a snapshot: committed)
    # The batch's own day (the median day of its table's time_column), None where the table names none.
    sa.Column("batch_at", sa.DateTime(timezone=True)),
    sa.Index("ix_wap_metrics_series", "table_name", "metric", "column_name", "run_at"),
)


@dataclass(frozen=True)
class MetricRow:
    run_id: str
    table: str
    metric: str
    column: str
    value: float | None
    text: str | None
    run_at: datetime
    status: str  # the run's status in wap_runs; "published" for backfilled history
    batch_at: datetime | None = None  # the batch's own day (its table's time_column), if it has one


def _status() -> sa.ColumnElement[str]:
    return sa.func.coalesce(runs_table.c.status, sa.literal(PUBLISHED))


def _weekday(run_at: sa.ColumnElement[Any], dialect: str) -> sa.ColumnElement[int] | None:
    """A run's UTC weekday (0 Monday .. 6 Sunday, as anomaly.weekday_of) in the database's own SQL, so a weekly
    history reads its 30 runs, not the whole series (365 ms for 10 checks at 10,000 runs, make bench-anomaly);
    None for a database without one here (the weekday is then picked in Python)."""
    if dialect == "sqlite":  # SQLite keeps the UTC time without a zone; %w counts from Sunday = 0
        return (sa.cast(sa.func.strftime("%w", run_at), sa.Integer) + 6) % 7
    if dialect == "postgresql":  # ISO: Monday = 1; the timestamptz's weekday in UTC, not the session's zone
        return sa.cast(sa.extract("isodow", sa.func.timezone("UTC", run_at)), sa.Integer) - 1
    return None


def _day_of(t: sa.Table) -> sa.ColumnElement[Any]:
    """The time seasonality keys a run on: its batch's own day where recorded, else when the run started."""
    return sa.func.coalesce(t.c.batch_at, t.c.run_at)


def _joined() -> sa.FromClause:
    return metrics_table.outerjoin(runs_table, runs_table.c.run_id == metrics_table.c.run_id)


# What a run's record says of whether the metric history learns from it (_learns_from).
_LEARNING = (
    _status().label("status"),
    runs_table.c.checks.label("run_checks"),
    runs_table.c.review.label("run_review"),
    runs_table.c.files.label("run_files"),
)


def _learns_from(rows: Iterable[Any], metric: str = "", column: str = "") -> list[Any]:
    """The rows (newest first, with _LEARNING's columns) of runs the history learns from: every published run,
    and a blocked run nobody decided on whose failed checks all judged the batch against the history
    (vocabulary.blocked_by_history_only), once the next run of the series (of a weekly band: of the same
    weekday) was blocked by one of the same checks too, unless a run published the same files. A run a rule
    blocked (a check not the history's failed: a short delivery, a NULL key) is not of the series; one whose
    producer's totals agreed on this metric (vocabulary.vouched_for: control_totals passed, and it compared the
    rows, or this column's sum) needs no next run to confirm it.

    Without them a new level (a storm week, a new customer) is blocked for ever once nobody approves its first
    day: each later day is judged against a history that never saw it (issue 61: a quarter of real days
    blocked). The next run's block by the same check is what says the level held: a faulty delivery followed
    by a good one, or by another fault, is never learnt (with every blocked run learnt, flights' faults stayed
    in the year's tails and detection fell from 99% to 30%); a fault delivered again and again is learnt as
    the source's new level after half a window of blocked runs, each of them alerted."""
    rows = list(rows)
    published_files = {r.run_files for r in rows if r.status == PUBLISHED and r.run_files not in (None, "[]")}

    def failed_by_history(r: Any) -> frozenset[str]:
        """The checks that blocked the run, where all of them judged it against the history; else none."""
        checks = json.loads(r.run_checks or "[]") if r.status == RUN_BLOCKED and r.run_review is None else []
        if not blocked_by_history_only(checks):
            return frozenset()
        return frozenset(str(c.get("name")) for c in checks if c.get("status") == "failed")

    def blocked_by_a_rule(r: Any) -> bool:
        """Blocked, nobody deciding, by a check that is not the history's (control_totals, not_null...): it says
        nothing of the level, so the series' next run is the one after it."""
        if r.status != RUN_BLOCKED or r.run_review is not None:
            return False
        failed = [c for c in json.loads(r.run_checks or "[]") if c.get("status") == "failed"]
        return bool(failed) and not blocked_by_history_only(failed)

    def vouched(r: Any) -> bool:
        """Its producer's totals agreed on this metric: a real day's level, nothing to confirm."""
        return vouched_for(json.loads(r.run_checks or "[]"), metric, column)

    series = [r for r in rows if not blocked_by_a_rule(r)]
    held = [failed_by_history(r) for r in series]
    return [
        r
        for k, r in enumerate(series)
        if r.status == PUBLISHED
        or (r.run_files not in published_files and held[k] and (vouched(r) or (k > 0 and held[k] & held[k - 1])))
    ]


def _pages(conn: sa.Connection, q: sa.Select[Any], limit: int, *, paged: bool) -> Iterator[list[Any]]:
    """The query's rows in pages of a few times `limit` (most runs are learnt from: one page is the rule),
    or all at once where `paged` is false (the weekday is picked in Python)."""
    if not paged:
        yield list(conn.execute(q))
        return
    size, offset = max(2 * limit, limit + 8), 0
    while True:
        page = list(conn.execute(q.limit(size).offset(offset)))
        yield page
        if len(page) < size:
            return
        offset += size


class MetricHistory:
    """Batch metrics in the run store's database (any SQLAlchemy engine the store uses)."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        ensure_schema(engine)

    def record(
        self,
        run_id: str,
        table: str,
        run_at: datetime,
        values: dict[tuple[str, str], float | str],
        batch_at: datetime | None = None,
    ) -> None:
        """The run's metrics, replacing any it recorded before (an audit done again after a resume or rewind);
        `batch_at`: the batch's own day (its table's time_column), which weekly seasonality keys the run on."""
        rows = [
            {
                "run_id": run_id,
                "table_name": table,
                "metric": metric,
                "column_name": column.lower(),
                "value": None if isinstance(v, str) else float(v),
                "text": v if isinstance(v, str) else None,
                "run_at": run_at,
                "batch_at": batch_at,
            }
            for (metric, column), v in values.items()
        ]
        t = metrics_table
        with self.engine.begin() as conn:
            conn.execute(t.delete().where(t.c.run_id == run_id, t.c.table_name == table))
            if rows:
                conn.execute(t.insert(), rows)

    def audited(self, table: str) -> set[str]:
        """Runs that recorded their metrics themselves: every audit records the batch's schema, a backfill never
        does."""
        from wapflow.audit.anomaly import SCHEMA_METRIC

        t = metrics_table
        q = sa.select(t.c.run_id).where(t.c.table_name == table, t.c.metric == SCHEMA_METRIC)
        with self.engine.connect() as conn:
            return {r[0] for r in conn.execute(q).all()}

    def published_snapshots(self, table: str) -> dict[int, str]:
        """The table's published runs by the snapshots the run store says they wrote (the branch head audited,
        the snapshot main was published to): whose a snapshot on main is where its own properties no longer
        say (a cherry-pick whose branch snapshot has expired, a snapshot of a wapflow before run lineage)."""
        r = runs_table
        q = sa.select(r.c.run_id, r.c.branch_snapshot_id, r.c.snapshot_id).where(
            r.c.table_name == table, r.c.status == PUBLISHED
        )
        with self.engine.connect() as conn:
            return {
                int(sid): str(rid)
                for rid, branch, main in conn.execute(q).all()
                for sid in (branch, main)
                if sid is not None
            }

    def record_missing(
        self, table: str, values: dict[str, tuple[datetime, dict[tuple[str, str], float]]]
    ) -> list[tuple[str, str, str]]:
        """Backfilled history (run id -> its time and (metric, column) -> value): the metrics a run lacks. A run
        that recorded its metrics itself (`audited`) is left as it is, and so is every metric already there:
        nothing a run recorded is replaced, and doing it again records nothing. Returns the (run id, metric,
        column) recorded."""
        from wapflow.audit.anomaly import SCHEMA_METRIC

        t = metrics_table
        with self.engine.begin() as conn:
            have: dict[str, set[tuple[str, str]]] = {}
            for rid, metric, column in conn.execute(
                sa.select(t.c.run_id, t.c.metric, t.c.column_name).where(t.c.table_name == table)
            ).all():
                have.setdefault(rid, set()).add((metric, column))
            audited = {rid for rid, got in have.items() if (SCHEMA_METRIC, "") in got}
            rows = [
                {"run_id": rid, "table_name": table, "metric": m, "column_name": c.lower(), "value": v, "run_at": at}
                for rid, (at, metrics) in values.items()
                if rid not in audited
                for (m, c), v in metrics.items()
                if (m, c.lower()) not in have.get(rid, set())
            ]
            if rows:
                conn.execute(t.insert(), rows)
        return [(str(r["run_id"]), str(r["metric"]), str(r["column_name"])) for r in rows]

    def published(self, table: str, metric: str, column: str, limit: int, weekday: int | None = None) -> History:
        """The metric's values over the table's last `limit` runs the history learns from (`_learns_from`),
        newest first; with `weekday` (0 Monday .. 6 Sunday), over its last `limit` such runs of that weekday:
        their batch's own day where their table names a time column (batch_at), else the day they started (UTC).

        Published whichever way (at once, after a warning, approved by a person, or a blocked batch published
        later by a run of its own), and blocked runs nobody decided on that only the history judged unlike
        earlier ones. The History also names those runs and counts the runs of the same span left out, by
        status (blocked by a rule, awaiting review...): what a report says the band was made of."""
        from wapflow.audit.anomaly import History, weekday_of

        t = metrics_table
        series = (
            t.c.table_name == table,
            t.c.metric == metric,
            t.c.column_name == column.lower(),
            t.c.value.is_not(None),
        )
        q = (
            sa.select(t.c.run_at, t.c.value, t.c.run_id, t.c.batch_at, *_LEARNING)
            .select_from(_joined())
            .where(*series)
            .order_by(t.c.run_at.desc(), t.c.run_id.desc())
        )
        day = None if weekday is None else _weekday(_day_of(t), self.engine.dialect.name)
        if day is not None:
            q = q.where(day == weekday)
        with self.engine.connect() as conn:
            # Picked again here: on a database without a weekday expression, here only (reading the whole series).
            # Read in pages, newest first, until `limit` runs the history learns from are found.
            used: list[Any] = []
            left_out: dict[str, int] = {}
            seen: list[Any] = []
            for page in _pages(conn, q, limit, paged=weekday is None or day is not None):
                for r in page:
                    if weekday is not None and weekday_of(r.batch_at or r.run_at) != weekday:
                        continue
                    seen.append(r)
                used = _learns_from(seen, metric, column)[:limit]
                if len(used) == limit:
                    break
            rows = [(r.run_at, float(r.value), str(r.run_id)) for r in used]
            if rows:
                kept = {rid for _, _, rid in rows}
                for r in seen:
                    if r.run_id not in kept and r.run_at >= rows[-1][0]:
                        status = str(r.status)
                        left_out[status] = left_out.get(status, 0) + 1
        blocked = sum(1 for r in used if r.status != PUBLISHED)
        return History(
            [v for _, v, _ in rows], runs=tuple(rid for _, _, rid in rows), left_out=left_out, learnt=blocked
        )

    def published_texts(self, table: str, metric: str, column: str, limit: int) -> list[str]:
        """A text metric's values (a category column's set of values as JSON) over the table's last `limit`
        published runs, newest first."""
        t = metrics_table
        q = (
            sa.select(t.c.text, t.c.run_id, *_LEARNING)
            .select_from(_joined())
            .where(
                t.c.table_name == table,
                t.c.metric == metric,
                t.c.column_name == column.lower(),
                t.c.text.is_not(None),
            )
            .order_by(t.c.run_at.desc(), t.c.run_id.desc())
        )
        texts: list[str] = []
        with self.engine.connect() as conn:
            seen: list[Any] = []
            for page in _pages(conn, q, limit, paged=True):
                seen.extend(page)
                texts = [str(r.text) for r in _learns_from(seen)][:limit]
                if len(texts) == limit:
                    break
        return texts

    def last_published_schema(self, table: str) -> dict[str, str] | None:
        """The columns and types of the table's last published run that recorded them."""
        from wapflow.audit.anomaly import SCHEMA_METRIC

        t = metrics_table
        q = (
            sa.select(t.c.text)
            .select_from(_joined())
            .where(t.c.table_name == table, t.c.metric == SCHEMA_METRIC, _status() == PUBLISHED)
            .order_by(t.c.run_at.desc(), t.c.run_id.desc())
            .limit(1)
        )
        with self.engine.connect() as conn:
            text = conn.execute(q).scalar()
        return dict(json.loads(text)) if text else None

    def read(
        self, table: str, *, metric: str | None = None, column: str | None = None, runs: int = 20
    ) -> list[MetricRow]:
        """The metrics (of `metric`, of `column`) of the table's last `runs` runs, newest run first.

        A run is in the history by its row count (every audit records one, and so does a backfill): the last
        runs are found on the series index, not by sorting every row of the table."""
        t = metrics_table
        last = (
            sa.select(t.c.run_id)
            .where(t.c.table_name == table, t.c.metric == "row_count", t.c.column_name == "")
            .order_by(t.c.run_at.desc(), t.c.run_id.desc())
            .limit(runs)
            .scalar_subquery()
        )
        cond = [t.c.table_name == table, t.c.run_id.in_(last)]
        if metric:
            cond.append(t.c.metric == metric)
        if column:
            cond.append(t.c.column_name == column.lower())
        q = (
            sa.select(t, _status().label("status"))
            .select_from(_joined())
            .where(*cond)
            .order_by(t.c.run_at.desc(), t.c.run_id.desc(), t.c.metric, t.c.column_name)
        )
        with self.engine.connect() as conn:
            return [
                MetricRow(
                    r.run_id,
                    r.table_name,
                    r.metric,
                    r.column_name,
                    r.value,
                    r.text,
                    r.run_at,
                    str(r.status),
                    r.batch_at,
                )
                for r in conn.execute(q).all()
            ]

    def of_run(self, run_id: str, table: str) -> dict[tuple[str, str], float | str]:
        """What one run recorded for its table: (metric, column) -> value (text for the schema)."""
        t = metrics_table
        q = sa.select(t.c.metric, t.c.column_name, t.c.value, t.c.text).where(
            t.c.run_id == run_id, t.c.table_name == table
        )
        with self.engine.connect() as conn:
            return {
                (r.metric, r.column_name): (r.value if r.value is not None else r.text)
                for r in conn.execute(q).all()
                if r.value is not None or r.text is not None
            }

    def tables(self) -> list[str]:
        """Tables with any metric history (for a did-you-mean on an unknown table)."""
        with self.engine.connect() as conn:
            return [r[0] for r in conn.execute(sa.select(metrics_table.c.table_name).distinct()).all()]
