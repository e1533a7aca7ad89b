"""The dashboard's review queue and quality trends, and its decisions (the same calls as `wap approve / reject`).

Reading needs no Spark: held runs come from the run store; what publishing one would change is the run's recorded
change and metrics beside main's live data files' metrics read with PyIceberg (the same assembly as `wap diff`:
service.diff.side_by_side and summary); a catalog PyIceberg cannot open shows the rows only. Trends are the
metric history (wapflow.runs.metrics) with, for each run, the band the anomaly check would have used then
(wapflow.audit.anomaly.band over the published runs before it).

Deciding is a write: `decide` calls service.review.approve / reject, which start Spark in the dashboard's
process on first use (an approval audits the run again and publishes it). With [dashboard.oidc] a person
decides only once logged in with the provider (service.dashboard_login); otherwise a dashboard bound beyond
loopback lets a person decide only after entering $WAP_DASHBOARD_TOKEN (compared in constant time, never shown).
`writes_allowed` says whether this one may, after which login, and why not.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, TypedDict

from wapflow.audit.anomaly import TAIL_MEMORY, judge, same_weekday, weekday_of
from wapflow.audit.batch_checks import AnomalyCheck, VolumeCheck
from wapflow.audit.metrics import FileMetrics
from wapflow.errors import UsageError
from wapflow.runs.metrics import PUBLISHED, MetricHistory
from wapflow.runs.store import RunRecord
from wapflow.service.diff import SummaryDoc, side_by_side, summarize
from wapflow.service.review import age_words, awaiting_runs, held_since
from wapflow.service.runs import change_keys, run_rows, shown_check_name

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from wapflow.lakehouse.lakehouse import Lakehouse
    from wapflow.service.dashboard import Sources

TOKEN_ENV = "WAP_DASHBOARD_TOKEN"
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
DEFAULT_SENSITIVITY, DEFAULT_WINDOW, DEFAULT_MIN_HISTORY = 3.0, 30, 3  # a metric no anomaly check watches


class QueueRow(TypedDict):
    """One run awaiting review, as the queue shows it."""

    run_id: str
    table: str
    held_since: datetime
    age: str  # e.g. "3h", "2d 1h"
    warned_checks: list[str]
    diff: SummaryDoc
    branch: str | None


def _main_metrics(tbl: Table) -> FileMetrics:
    """main's live data files' metrics (rows, nulls, bounds per column) from the table's metadata (PyIceberg)."""
    from pyiceberg.conversions import from_bytes

    schema = tbl.schema()
    names = {f.field_id: f.name.lower() for f in schema.fields}
    types = {f.field_id: f.field_type for f in schema.fields}
    out = FileMetrics(rows=0)
    if tbl.current_snapshot() is None:
        return out
    for task in tbl.scan().plan_files():
        df = task.file
        out.rows += df.record_count
        for fid, name in names.items():
            if fid in (df.value_counts or {}):
                out.columns.add(name)
            nulls = (df.null_value_counts or {}).get(fid)
            seen = out.null_counts.get(name, 0)
            out.null_counts[name] = None if nulls is None or seen is None else seen + nulls
            for bounds, into, pick in ((df.lower_bounds, out.lower, min), (df.upper_bounds, out.upper, max)):
                raw = (bounds or {}).get(fid)
                if raw is None:
                    into[name] = None
                    continue
                value = from_bytes(types[fid], raw)  # type: ignore[arg-type]
                into[name] = value if name not in into else (None if into[name] is None else pick(into[name], value))
    return out


def run_summary(src: Sources, rec: RunRecord) -> SummaryDoc:
    """What publishing a held run would change: its rows, and its notable column changes where main is readable."""
    batch = MetricHistory(src.store.engine).of_run(rec.run_id, rec.table_name)
    tbl = src.table(rec.table_name)
    main = _main_metrics(tbl) if tbl is not None else FileMetrics(rows=0)
    columns = side_by_side(main, batch) if tbl is not None else []
    return summarize(rec.run_id, run_rows(rec, batch, main.rows), columns, keys=change_keys(rec))


def review_queue(src: Sources, now: datetime | None = None) -> list[QueueRow]:
    """Runs awaiting review, oldest first: table, how long they wait, warned checks, what publishing changes."""
    now = now or datetime.now(UTC)
    out: list[QueueRow] = []
    for rec in sorted(awaiting_runs(src.store), key=held_since):
        since = held_since(rec)
        out.append(
            {
                "run_id": rec.run_id,
                "table": rec.table_name,
                "held_since": since,
                "age": age_words(max(0.0, (now - since).total_seconds())),
                "warned_checks": [
                    shown_check_name(str(c.get("name"))) for c in rec.checks if c.get("status") == "warned"
                ],
                "diff": run_summary(src, rec),
                "branch": rec.branch if rec.branch_kept else None,
            }
        )
    return out


# --- who may decide --------------------------------------------------------------------------------------------


def loopback(address: str | None) -> bool:
    """Whether a bind address serves this machine only (None or "": every interface, as Streamlit binds)."""
    return (address or "").strip().lower() in LOOPBACK


class Gate(NamedTuple):
    """Whether this dashboard lets people decide: at all, after which login ("token", "oidc", None), why not."""

    allowed: bool
    login: Literal["token", "oidc"] | None
    why: str | None


def writes_allowed(address: str | None, env: Mapping[str, str] | None = None, *, oidc: bool = False) -> Gate:
    """Who may decide. With [dashboard.oidc]: a person logged in with the provider, on any address. Otherwise on
    loopback anyone at this machine; beyond it only after the token is entered, and nobody when none is set."""
    if oidc:
        return Gate(True, "oidc", None)
    token = (os.environ if env is None else env).get(TOKEN_ENV, "")
    if loopback(address):
        return Gate(True, None, None)
    if not token:
        return Gate(
            False,
            None,
            (
                f"approve and reject are off: this dashboard is bound beyond loopback ({address or 'every interface'}) "
                f"and neither {TOKEN_ENV} nor [dashboard.oidc] is set; set one (and restart) to decide here, or use "
                "`wap approve` / `wap reject`"
            ),
        )
    return Gate(True, "token", None)


def token_matches(given: str, env: Mapping[str, str] | None = None) -> bool:
    """The entered token against $WAP_DASHBOARD_TOKEN, in constant time (never logged or shown)."""
    token = (os.environ if env is None else env).get(TOKEN_ENV, "")
    return bool(token) and hmac.compare_digest(given.encode(), token.encode())


# --- deciding --------------------------------------------------------------------------------------------------


def open_lakehouse(src: Sources) -> Lakehouse:
    """The lakehouse decisions run on (Spark starts at the first one, in this process)."""
    from wapflow.lakehouse.lakehouse import Lakehouse

    return Lakehouse(src.cfg)


def decide(lh: Lakehouse, run_id: str, decision: str, *, reason: str, by: str | None) -> dict[str, Any]:
    """Approve or reject a held run as `wap approve` / `wap reject` do (`by` None: the OS user running the
    dashboard); the outcome as the page shows it."""
    from wapflow.service.review import approve, reject

    if decision == "approve":
        res = approve(lh, run_id, reason=reason, by=by)
        snapshot = getattr(res, "snapshot_id", None)  # a multi-table run has one per table
        return {"run_id": run_id, "status": res.status, "message": res.message, "snapshot_id": snapshot}
    if decision == "reject":
        doc = reject(lh, run_id, reason=reason, by=by)
        return {"run_id": run_id, "status": doc["status"], "message": doc["message"], "snapshot_id": None}
    raise UsageError(f"unknown decision {decision!r}", hint="approve or reject")


# --- quality trends --------------------------------------------------------------------------------------------


def _watching(src: Sources, table: str, metric: str, column: str) -> tuple[float, int, int, bool]:
    """(sensitivity, window, min_history, weekly) of the table's check on this metric, else the anomaly defaults."""
    for chk in src.cfg.table(table).checks:
        if isinstance(chk, VolumeCheck) and metric == "row_count":
            return chk.sensitivity, chk.runs, chk.min_history, chk.seasonality == "weekly"
        if isinstance(chk, AnomalyCheck) and chk.metric == metric and (chk.column or "").lower() == column:
            return chk.sensitivity, chk.window, chk.min_history, chk.seasonality == "weekly"
    return DEFAULT_SENSITIVITY, DEFAULT_WINDOW, DEFAULT_MIN_HISTORY, False


def trend_choices(src: Sources, table: str, runs: int = 50) -> list[str]:
    """The column metrics a table's history holds, as "metric(column)" (what the trend picker offers): those an
    anomaly check of the table watches first, in the order of its checks, then the others alphabetically."""
    rows = MetricHistory(src.store.engine).read(table, runs=runs)
    held = {f"{r.metric}({r.column})" for r in rows if r.column and r.value is not None}
    watched = [
        f"{chk.metric}({chk.column.lower()})"
        for chk in src.cfg.table(table).checks
        if isinstance(chk, AnomalyCheck) and chk.column
    ]
    first = [w for w in dict.fromkeys(watched) if w in held]
    return first + sorted(held - set(first))


def trend(src: Sources, table: str, metric: str = "row_count", column: str = "", runs: int = 50) -> dict[str, Any]:
    """One metric over the table's last runs (oldest first), each with the band the anomaly check would have used
    for it: the check's own model (wapflow.audit.anomaly.judge) over the published runs before it (with weekly
    seasonality: of those on its weekday; None until min_history of them). A proportion's band leaves out the
    batch's binomial spread (the history holds no row counts beside it): the check's band is that or wider."""
    history = MetricHistory(src.store.engine)
    sensitivity, window, min_history, weekly = _watching(src, table, metric, column)
    # The shown runs, and behind them the history their bands were made of (a weekly band: `window` weeks), and
    # the year of runs their tails were learned from.
    depth = runs + max(window, TAIL_MEMORY) * (7 if weekly else 1)
    rows = [r for r in history.read(table, metric=metric, column=column or None, runs=depth) if r.column == column]
    rows.sort(key=lambda r: (r.run_at, r.run_id))
    shown = {(r.run_at, r.run_id) for r in rows[-runs:]}
    published: list[tuple[datetime, float]] = []  # newest first
    points: list[dict[str, Any]] = []
    for r in rows:
        day = r.batch_at or r.run_at  # the batch's own day where its table names a time column
        weekday = weekday_of(day) if weekly else None
        before = same_weekday(published, weekday, window)
        memory = same_weekday(published, weekday, TAIL_MEMORY) if len(before) >= window else []
        judged = bool(before) and len(before) >= min_history
        b = judge(metric, before, sensitivity, weekday, memory=memory) if judged else None
        if r.status == PUBLISHED and r.value is not None:
            published.insert(0, (day, r.value))
        if (r.run_at, r.run_id) not in shown:
            continue
        points.append(
            {
                "run_at": r.run_at if r.run_at.tzinfo else r.run_at.replace(tzinfo=UTC),
                "run_id": r.run_id,
                "status": r.status,
                "value": r.value,
                "median": b.median if b else None,
                "band_low": b.lo if b else None,
                "band_high": b.hi if b else None,
                "outside": bool(b and r.value is not None and not b.contains(r.value)),
            }
        )
    label = metric if not column else f"{metric}({column})"
    on = " on the same weekday" if weekly else ""
    return {
        "table": table,
        "metric": label,
        "points": points,
        "band": f"the anomaly check's band (sensitivity {sensitivity:g}) over the last {window} published runs{on} "
        f"(from {min_history})",
    }
