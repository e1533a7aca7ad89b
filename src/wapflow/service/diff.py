"""`wap diff RUN|BRANCH`: what publishing a run that is not on main yet would change there.

The evidence a reviewer needs before `wap approve`: the rows the run adds (a merge's or replace's rows inserted,
updated, deleted, replaced; a merge's sample keys of each), and per column main beside the batch: null
fraction, min, max (mean where the batch's metric history has it). Nothing here scans data:
- the batch side is what the run's audit recorded: its change (the `changes` line of its audit, else its
  change metrics), a merge's sample keys (that line's samples, taken by the audit's own bounded job:
  wapflow.service.runs.change_keys) and its rows in the metric history (wapflow.runs.metrics; the bounds of
  dates, times and strings as text);
- main's side is Iceberg metadata: the column metrics of main's live data files, summed as the audit sums a
  run's added files (wapflow.audit.metrics.summed_file_metrics), no data file read. Where wapflow reads the
  catalog itself and PyIceberg is installed, main's manifests are read here and no JVM starts
  (main_file_metrics); elsewhere Spark reads them (Tables.live_file_metrics: the manifests, or the `files`
  metadata table), and the `wap diff` command is then handed to the warm engine. Iceberg keeps no mean, so
  main's mean is not shown.

The CLI and the Python API (wapflow.api.diff) call `diff`; `side_by_side` is the assembly alone (no Spark).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, TypedDict

from wapflow import display
from wapflow.audit.anomaly import SCHEMA_METRIC, as_number, bound_text
from wapflow.audit.metrics import FileMetrics
from wapflow.errors import NotFound, UsageError, WapError, did_you_mean
from wapflow.runs.metrics import PUBLISHED, MetricHistory
from wapflow.runs.store import RunRecord, RunStore
from wapflow.service.runs import (
    AWAITING_REVIEW,
    ChangeKeysDoc,
    RowsDoc,
    change_keys,
    change_words,
    keys_lines,
    pending,
    run_rows,
)

if TYPE_CHECKING:
    from wapflow.lakehouse.lakehouse import Lakehouse
    from wapflow.sql.identifiers import TableName


class SideDoc(TypedDict):
    """One column on one side (main, or the batch)."""

    null_fraction: float | None
    min: Any  # a number, or a date's, time's or string's bound as text (strings: as Iceberg keeps them)
    max: Any
    mean: float | None  # the batch's, where an anomaly check measured it; never main's (not in metadata)


class ColumnDiffDoc(TypedDict):
    """A column main vs the batch; `on`: both, new (only the batch has it), missing (only main has it)."""

    column: str
    on: Literal["both", "new", "missing"]
    main: SideDoc | None
    batch: SideDoc | None


class DiffDoc(TypedDict):
    """Everything `wap diff` shows (and its JSON document)."""

    run_id: str
    table: str
    status: str
    branch: str | None
    published: bool  # already on main: nothing left to diff (snapshot_id says where)
    snapshot_id: int | None
    rows: RowsDoc | None
    keys: ChangeKeysDoc | None  # a merge's sample keys inserted / updated / deleted; None for other modes
    columns: list[ColumnDiffDoc]
    message: str


def target(store: RunStore, run_or_branch: str) -> RunRecord:
    """The run named, or the newest run that left the named branch kept; NotFound with near matches."""
    rec = store.get(run_or_branch)
    if rec is not None:
        return rec
    on_branch = store.by_branch(run_or_branch)
    kept = [r for r in on_branch if r.branch_kept]
    if kept or on_branch:
        return (kept or on_branch)[0]
    recent = store.list(limit=50)
    names = [r.run_id for r in recent] + sorted({r.branch for r in recent if r.branch and r.branch_kept})
    raise NotFound(
        f"no run or kept branch {run_or_branch} in the run store{did_you_mean(run_or_branch, names)}",
        hint="list runs with `wap runs`, kept branches with `wap branches`",
    )


def _side(null_fraction: float | None, lo: Any, hi: Any, mean: float | None = None) -> SideDoc:
    return {"null_fraction": null_fraction, "min": _shown(lo), "max": _shown(hi), "mean": mean}


def _shown(v: Any) -> Any:
    """A bound as JSON can carry it: numbers as floats or ints, other values (dates, strings) as text, main's
    as a batch's (anomaly.bound_text)."""
    if v is None or isinstance(v, (int, float, str)):  # (bools too)
        return v
    number = as_number(v)
    return number if number is not None else bound_text(v)


def side_by_side(main: FileMetrics, batch: Mapping[tuple[str, str], float | str]) -> list[ColumnDiffDoc]:
    """main's live file metrics beside a run's recorded metrics ((metric, column) -> value), one row per column:
    the batch's columns in its schema's order (then any other it measured), then the columns only main has."""
    schema = batch.get((SCHEMA_METRIC, ""))
    batch_cols = [c.lower() for c in json.loads(schema)] if isinstance(schema, str) else []
    for _metric, col in batch:
        if col and col not in batch_cols:
            batch_cols.append(col)

    def num(metric: str, col: str) -> float | None:
        v = batch.get((metric, col))
        return float(v) if isinstance(v, (int, float)) else None

    def bound(metric: str, col: str) -> float | str | None:
        """A number, or the text of a date's, time's or string's bound (anomaly.file_bound_texts)."""
        v = batch.get((metric, col))
        return float(v) if isinstance(v, (int, float)) else v

    def main_side(col: str) -> SideDoc:
        nulls = main.null_counts.get(col)
        frac = nulls / main.rows if nulls is not None and main.rows else None
        return _side(frac, main.lower.get(col), main.upper.get(col))

    out: list[ColumnDiffDoc] = []
    for col in batch_cols:
        mine = _side(num("null_fraction", col), bound("min", col), bound("max", col), num("mean", col))
        on_main = col in main.columns
        out.append(
            {
                "column": col,
                "on": "both" if on_main else "new",
                "main": main_side(col) if on_main else None,
                "batch": mine,
            }
        )
    for col in sorted(main.columns - set(batch_cols)):
        out.append({"column": col, "on": "missing", "main": main_side(col), "batch": None})
    return out


def diff(lh: Lakehouse, run_or_branch: str) -> DiffDoc:
    """What publishing the run (or the run that left the branch) would change on its table's main.

    A published run: already on main (its snapshot), nothing read but the record. A run whose branch is gone
    (discarded, rejected, failed before writing): UsageError, there is nothing left to publish."""
    from wapflow.service.tables import reading
    from wapflow.sql.identifiers import TableName

    rec = target(lh.store, run_or_branch)
    base: DiffDoc = {
        "run_id": rec.run_id,
        "table": rec.table_name,
        "status": rec.shown_status,
        "branch": rec.branch,
        "published": False,
        "snapshot_id": rec.snapshot_id,
        "rows": None,
        "keys": None,
        "columns": [],
        "message": "",
    }
    if rec.status == PUBLISHED:
        return {
            **base,
            "published": True,
            "message": f"run {rec.run_id} is already on main of {rec.table_name} (snapshot {rec.snapshot_id}): "
            "publishing it changes nothing",
        }
    if not pending(rec):
        raise UsageError(
            f"run {rec.run_id} is {rec.shown_status} and its branch is not kept: there is nothing to publish, "
            "so nothing to diff",
            hint=f"see what it did with `wap report {rec.run_id}`",
        )
    batch = MetricHistory(lh.store.engine).of_run(rec.run_id, rec.table_name)
    table = TableName.parse(rec.table_name)
    with reading(f"reading the file metrics of {table}'s main"):
        main = main_file_metrics(lh, table)
    rows = run_rows(rec, batch, main.rows_read)
    then = f"; approve with `wap approve {rec.run_id} --reason ...`" if rec.status == AWAITING_REVIEW else ""
    measured = "" if batch else " (its audit recorded no column metrics)"
    return {
        **base,
        "rows": rows,
        "keys": change_keys(rec),
        "columns": side_by_side(main, batch),
        "message": f"publishing run {rec.run_id} ({rec.shown_status}) would {change_words(rows)} on main of "
        f"{rec.table_name} ({rows['main_rows']} row(s) now){measured}{then}",
    }


def main_file_metrics(lh: Lakehouse, table: TableName) -> FileMetrics:
    """Column metrics summed over main's live data files: from the catalog and main's manifests with no JVM
    where wapflow reads the catalog itself and PyIceberg the manifests, else through Spark."""
    from wapflow.lakehouse.manifests import pyiceberg_installed
    from wapflow.lakehouse.model import refs_of

    direct = lh.iceberg.direct() if pyiceberg_installed() else None
    if direct is not None and direct.manifests is not None:
        meta = direct.metadata(table)
        if meta is None:
            return FileMetrics(rows=0)
        ref = refs_of(meta).get("main")
        if ref is None:
            return FileMetrics(rows=0)
        if direct.manifests.available(meta):
            try:
                return direct.manifests.live(meta, ref.snapshot_id)
            except (OSError, WapError):  # a manifest this process cannot read: Spark's own reading may
                pass
    return lh.tables.live_file_metrics(table) if lh.tables.exists(table) else FileMetrics(rows=0)


# A column's change is notable (shown in alerts and the dashboard's review queue) when it is new or missing, its
# null fraction moved by at least this much, or the batch's bound lies outside main's range by more than main's
# own width (a shift of scale; a time or id column that grows past main's max by a batch's worth is not notable).
NOTABLE_NULL_SHIFT = 0.05
NOTABLE_MAX = 5  # columns named in a summary; the rest are counted


class SummaryDoc(TypedDict):
    """A diff in a few lines: the rows publishing changes, and the notable column changes."""

    rows: RowsDoc | None
    notable: list[str]  # e.g. "passenger_count: null fraction 0 → 0.3"
    more_notable: int  # notable columns beyond NOTABLE_MAX, not named
    text: str  # one line: "add 100 row(s); passenger_count: null fraction 0 → 0.3"
    keys: list[str]  # a merge's sample keys, a line per kind: "updated id: 2, 4" (service.runs.keys_lines)


def _fmt(v: Any) -> str:
    """A fraction or bound on a line: numbers as wapflow.display words them (a whole number exactly: an id
    recorded as a float, 12001.0, is 12001), text as it is."""
    return display.number(v) if isinstance(v, int | float) else str(v)


def _position(v: Any) -> float | None:
    """A bound on a line: a number, or a date's or time's text as seconds since 1970 (a batch dated ten years
    past main's range is as notable as a fare ten times its max); None for other text (strings)."""
    number = as_number(v)
    if number is not None or not isinstance(v, str):
        return number
    try:
        at = datetime.fromisoformat(v)
    except ValueError:
        return None
    return (at if at.tzinfo is not None else at.replace(tzinfo=UTC)).timestamp()


def notable_change(col: ColumnDiffDoc) -> str | None:
    """What changed notably in one column main → batch, in words (None: nothing notable)."""
    name, main, batch = col["column"], col["main"], col["batch"]
    if col["on"] == "new":
        return f"{name}: new column"
    if col["on"] == "missing" or main is None or batch is None:
        return f"{name}: not in the batch"
    parts: list[str] = []
    before, after = main["null_fraction"], batch["null_fraction"]
    if before is not None and after is not None and abs(after - before) >= NOTABLE_NULL_SHIFT:
        parts.append(f"null fraction {_fmt(before)} → {_fmt(after)}")
    lo, hi = _position(main["min"]), _position(main["max"])
    if lo is not None and hi is not None:
        width = hi - lo
        b_lo, b_hi = _position(batch["min"]), _position(batch["max"])
        if b_lo is not None and b_lo < lo - width:
            parts.append(f"min {_fmt(main['min'])} → {_fmt(batch['min'])}")
        if b_hi is not None and b_hi > hi + width:
            parts.append(f"max {_fmt(main['max'])} → {_fmt(batch['max'])}")
    return f"{name}: {', '.join(parts)}" if parts else None


def summary(doc: DiffDoc) -> SummaryDoc:
    """A diff for a person deciding: the rows it changes and at most NOTABLE_MAX notable column changes."""
    return summarize(doc["run_id"], doc["rows"], doc["columns"], doc["message"], keys=doc.get("keys"))


def summarize(
    run_id: str,
    rows: RowsDoc | None,
    columns: list[ColumnDiffDoc],
    fallback: str = "",
    *,
    keys: ChangeKeysDoc | None = None,
) -> SummaryDoc:
    """summary() of a diff's parts (the dashboard assembles them from PyIceberg, without Spark)."""
    # A table main has no columns of yet (a first batch): every column would be "new", which says nothing.
    first = all(c["on"] == "new" for c in columns)
    notable = [] if first else [n for c in columns if (n := notable_change(c)) is not None]
    words = change_words(rows) if rows is not None else fallback
    shown = notable[:NOTABLE_MAX]
    more = len(notable) - len(shown)
    text = "; ".join([words, *shown]) + (f"; {more} more column change(s) (wap diff {run_id})" if more else "")
    return {"rows": rows, "notable": shown, "more_notable": more, "text": text, "keys": keys_lines(keys)}
