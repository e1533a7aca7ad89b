"""The dashboard's review queue and quality trends, and its decisions (the same calls as `wap approve / reject`).

Reading needs no Spark: held runs come from the run store; what publishing one would change is the run's recorded
change and metrics beside main's live data files' metrics read with PyIceberg (the same assembly as `wap diff`:
service.diff.side_by_side and summary); a catalog PyIceberg cannot open shows the rows only. Trends are the
metric history (wapflow.runs.metrics) with, for each run, the band its audit judged it by (the evidence the
table's check recorded in the run store), recomputed (wapflow.audit.anomaly.judge over the published runs before
it) only for runs that recorded none.

Deciding is a write: `decide` calls service.review.approve / reject, which start Spark in the dashboard's
process on first use (an approval audits the run again and publishes it). With [dashboard.oidc] a person
decides only once logged in with the provider (service.dashboard_login); otherwise a dashboard bound beyond
loopback lets a person decide only after entering $WAP_DASHBOARD_TOKEN (compared in constant time, never shown).
`writes_allowed` says whether this one may, after which login, and why not.
"""

from __future__ import annotations

import hmac
import json
import os
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, TypedDict

import sqlalchemy as sa

from wapflow.audit.anomaly import MODEL_WORDS, TAIL_MEMORY, judge, same_weekday, weekday_of
from wapflow.audit.batch_checks import AnomalyCheck, VolumeCheck
from wapflow.audit.metrics import FileMetrics
from wapflow.errors import UsageError
from wapflow.runs.metrics import PUBLISHED, MetricHistory
from wapflow.runs.store import RunRecord, runs_table
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
    group_id: str | None  # the multi-table run this run is part of: its tables are decided together
    decide_id: str  # what Approve / Reject decide: the multi-table run's id, else the run's own


def _main_metrics(tbl: Table) -> FileMetrics:
    """main's live data files' metrics (rows, nulls, bounds per column) from the table's metadata (PyIceberg)."""
    from wapflow.lakehouse.manifests import bound

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
                value = bound(types[fid], raw)  # dates and times as times, not days and microseconds
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
    """Runs awaiting review, oldest first: table, how long they wait, warned checks, what publishing changes. The
    tables of a multi-table run come together (in its order), under the run decided as a whole (`decide_id`)."""
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
                "group_id": rec.group_id,
                "decide_id": rec.group_id or rec.run_id,
            }
        )
    first = {row["decide_id"]: i for i, row in reversed(list(enumerate(out)))}  # where each decision first waits
    return sorted(out, key=lambda row: (first[row["decide_id"]], row["held_since"], row["run_id"]))


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


class Watch(NamedTuple):
    """The table's check on a metric (None: no check watches it) and the band settings a recomputation uses."""

    check: VolumeCheck | AnomalyCheck | None
    sensitivity: float
    window: int
    min_history: int
    weekly: bool


def _watching(src: Sources, table: str, metric: str, column: str) -> Watch:
    """The table's check on this metric and its (sensitivity, window, min_history, weekly), else the anomaly
    defaults."""
    for chk in src.cfg.table(table).checks:
        if isinstance(chk, VolumeCheck) and metric == "row_count":
            return Watch(chk, chk.sensitivity, chk.runs, chk.min_history, chk.seasonality == "weekly")
        if isinstance(chk, AnomalyCheck) and chk.metric == metric and (chk.column or "").lower() == column:
            return Watch(chk, chk.sensitivity, chk.window, chk.min_history, chk.seasonality == "weekly")
    return Watch(None, DEFAULT_SENSITIVITY, DEFAULT_WINDOW, DEFAULT_MIN_HISTORY, False)


def _recorded(
    src: Sources, run_ids: Iterable[str], check: VolumeCheck | AnomalyCheck | None
) -> dict[str, dict[str, Any]]:
    """run id -> the evidence `check` recorded for that run (its result's "observed" in the run store, matched by
    the check's type and name), for the runs that recorded one."""
    ids = list(run_ids)
    if check is None or not ids:
        return {}
    kind, name = check.type_name(), check.display_name()
    r = runs_table.c
    with src.store.engine.connect() as conn:
        rows = conn.execute(sa.select(r.run_id, r.checks).where(r.run_id.in_(ids))).all()
    out: dict[str, dict[str, Any]] = {}
    for run_id, checks in rows:
        for c in json.loads(checks or "[]"):
            if c.get("check") == kind and c.get("name") == name and isinstance(c.get("observed"), dict):
                out[run_id] = c["observed"]
    return out


def _band_of(evidence: Mapping[str, Any], value: float | None) -> dict[str, Any]:
    """A point's band from a check's evidence (Judged.evidence: "band" [lo, hi], "median", "model", "seasonality",
    "outside_by"...): edges, median, whether the value was outside, the model and the seasonality in words. A
    verdict made before min_history runs existed has no band."""
    edges = evidence.get("band")
    if not (isinstance(edges, list) and len(edges) == 2):
        return dict.fromkeys(("median", "band_low", "band_high", "model", "seasonality", "history")) | {
            "outside": False
        }
    lo, hi = float(edges[0]), float(edges[1])
    if "model" in evidence:  # a model's evidence says itself whether the value was outside (outside_by)
        outside = evidence.get("outside_by") is not None
    else:
        outside = value is not None and not lo <= value <= hi
    seasonality = evidence.get("seasonality")
    if evidence.get("holiday"):
        seasonality = "; ".join(filter(None, [seasonality, f"near a holiday: {evidence['holiday']}"]))
    return {
        "median": evidence.get("median"),
        "band_low": lo,
        "band_high": hi,
        "outside": outside,
        "model": MODEL_WORDS.get(str(evidence.get("model"))),
        "seasonality": seasonality,
        "history": evidence.get("history"),
    }


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
    """One metric over the table's last runs (oldest first), each with the band its run was judged by: the band
    the table's check on the metric recorded in that run's audit (its evidence: edges, median, model, seasonality
    words), "as judged". A run without such a result (before the check existed, history a backfill recorded, a
    metric no check watches) gets the band recomputed with the check's model (wapflow.audit.anomaly.judge) over
    the published runs before it (weekly seasonality: of those on its weekday; None until min_history of them),
    "recomputed": that band knows no weekly rhythm, per-weekday level or batch row count."""
    history = MetricHistory(src.store.engine)
    watch = _watching(src, table, metric, column)
    sensitivity, window, min_history, weekly = watch.sensitivity, watch.window, watch.min_history, watch.weekly
    # The shown runs, and behind them the history their recomputed bands are made of (a weekly band: `window`
    # weeks), and the year of runs their tails were learned from.
    depth = runs + max(window, TAIL_MEMORY) * (7 if weekly else 1)
    rows = [  # numbers only: a date's or string's bounds are recorded as text, for `wap diff`
        r
        for r in history.read(table, metric=metric, column=column or None, runs=depth)
        if r.column == column and r.value is not None
    ]
    rows.sort(key=lambda r: (r.run_at, r.run_id))
    shown = {(r.run_at, r.run_id) for r in rows[-runs:]}
    recorded = _recorded(src, (run_id for _, run_id in shown), watch.check)
    published: list[tuple[datetime, float]] = []  # newest first
    points: list[dict[str, Any]] = []
    for r in rows:
        day = r.batch_at or r.run_at  # the batch's own day where its table names a time column
        if (r.run_at, r.run_id) in shown:
            evidence = recorded.get(r.run_id)
            came_from = "as judged" if evidence is not None else "recomputed"
            if evidence is None:
                weekday = weekday_of(day) if weekly else None
                before = same_weekday(published, weekday, window)
                memory = same_weekday(published, weekday, TAIL_MEMORY) if len(before) >= window else []
                judged = bool(before) and len(before) >= min_history
                evidence = (
                    judge(metric, before, sensitivity, weekday, memory=memory).evidence(r.value) if judged else {}
                )
            band = _band_of(evidence, r.value)
            points.append(
                {
                    "run_at": r.run_at if r.run_at.tzinfo else r.run_at.replace(tzinfo=UTC),
                    "run_id": r.run_id,
                    "status": r.status,
                    "value": r.value,
                    **band,
                    "band_from": came_from if band["band_low"] is not None else None,
                }
            )
        if r.status == PUBLISHED and r.value is not None:
            published.insert(0, (day, r.value))
    label = metric if not column else f"{metric}({column})"
    latest = next((p for p in reversed(points) if p["band_low"] is not None), None)
    return {
        "table": table,
        "metric": label,
        "points": points,
        "model": latest["model"] if latest else None,
        "seasonality": latest["seasonality"] if latest else None,
        "recomputed": sum(p["band_from"] == "recomputed" for p in points),
        "band": _band_words(watch, points, latest),
    }


def _band_words(watch: Watch, points: list[dict[str, Any]], latest: dict[str, Any] | None) -> str:
    """What the shaded band is, as the page's caption says it: the band each run was judged by (the check, its
    model, the latest run's seasonality), and how the bands of runs that recorded none were recomputed."""
    on = " on the same weekday" if watch.weekly else ""
    recomputed = (
        f"the band an anomaly check (sensitivity {watch.sensitivity:g}) would use over the last {watch.window} "
        f"published runs{on} before each run (from {watch.min_history}), recomputed"
    )
    if watch.check is None:
        return f"no check of the table watches this metric: {recomputed}"
    name = shown_check_name(watch.check.display_name())
    model = f": {latest['model']}" if latest and latest["model"] else ""
    words = f"the band each run was judged by, as its audit recorded it ({name}{model})"
    if latest and latest["seasonality"]:
        words += f"; the latest run's band: {latest['seasonality']}"
    n = sum(p["band_from"] == "recomputed" for p in points)
    if n:
        words += f"; {n} run(s) recorded no result of {name}: for those, {recomputed}"
    return words
