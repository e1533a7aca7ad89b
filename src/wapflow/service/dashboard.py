"""Every number the dashboard shows (overview, a table, a run, a branch), as plain rows and dicts.

The dashboard only renders what these functions return. Nothing here may import pyspark or start a JVM:
runs come from the run store, files from the ledger, alerts from the alert log (service.alerts), and table
metadata (snapshots, refs, schemas, the data files a branch added) from the Iceberg catalog through
PyIceberg where it can open that catalog (the embedded SQLite catalog, data local or on S3). On the JDBC
(PostgreSQL), REST and Nessie catalogs main's history and rows come from the catalog's metadata read directly
(wapflow.lakehouse.metadata, no JVM either); what needs PyIceberg there (schema changes, a branch's added files
and nulls) is replaced by a note. Other catalogs get the note for every table panel, and the run store, ledger
and alert panels still show (tests/test_dashboard.py checks both).
"""

from __future__ import annotations

import shlex
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from wapflow.config import WapConfig, load_config
from wapflow.errors import NotFound, WapError, did_you_mean
from wapflow.lakehouse import pyiceberg_client
from wapflow.lakehouse.lineage import run_id_of, run_of
from wapflow.lakehouse.metadata import CatalogTables
from wapflow.lakehouse.model import ADDED_RECORDS, rows_at, rows_of
from wapflow.pipeline.state import STEPS
from wapflow.runs.ledger import Ledger, files_table
from wapflow.runs.store import RunStore, runs_table
from wapflow.service import render
from wapflow.service.alerts import recent_alerts
from wapflow.service.runs import (
    duration_text,
    failed_checks,
    group_report,
    run_report,
    runs_listing,
    seconds_between,
    shown_check_name,
    shown_checks,
)
from wapflow.sql.identifiers import TableName

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot


@dataclass
class Sources:
    """What the dashboard reads: the config, the run store, the ledger and (where possible) the catalog."""

    cfg: WapConfig
    store: RunStore
    ledger: Ledger
    catalog: Catalog | None
    note: str | None  # why table metadata is not shown, when catalog is None
    # The catalog's metadata read directly (history and rows on main) where PyIceberg cannot open it.
    direct: Callable[[], CatalogTables | None] | None = None

    def metadata(self) -> CatalogTables | None:
        """A fresh direct view of the catalog (a new run must show), when PyIceberg does not open it."""
        return self.direct() if self.catalog is None and self.direct is not None else None

    def table(self, name: str) -> Table | None:
        """The Iceberg table (fresh metadata on every call: a new run must show), None when unreadable."""
        if self.catalog is None:
            return None
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        try:
            return self.catalog.load_table(name)
        except (NoSuchTableError, NoSuchNamespaceError):
            return None

    def close(self) -> None:
        self.store.close()


def open_sources(config: str | Path | None = None) -> Sources:
    """Open what wap.toml names, the way `wap runs` does (no Spark)."""
    cfg = load_config(config)
    store = RunStore(cfg.run_store_url())
    catalog, note = open_catalog(cfg)
    direct = None
    if catalog is None and cfg.lakehouse.catalog != "sqlite":
        direct, note = _direct_catalog(cfg, note)
    return Sources(cfg, store, Ledger(store.engine), catalog, note, direct)


def _direct_catalog(cfg: WapConfig, note: str | None) -> tuple[Callable[[], CatalogTables | None] | None, str | None]:
    """The catalog's metadata without PyIceberg or Spark (JDBC, REST, Nessie), and the note that goes with it."""
    from wapflow.lakehouse.lakehouse import Lakehouse

    lh = Lakehouse(cfg)  # never starts Spark: only the catalog read directly is used
    try:
        if lh.iceberg.direct() is None:
            return None, note
    except WapError as e:
        return None, f'catalog metadata is not readable for catalog = "{cfg.lakehouse.catalog}" now: {e.message}'
    return lh.iceberg.direct, (
        "main's history and rows come from the catalog's metadata; schema changes and a branch's nulls per column "
        f'need PyIceberg, which opens only the embedded SQLite catalog here (catalog = "{cfg.lakehouse.catalog}")'
    )


def open_catalog(cfg: WapConfig) -> tuple[Catalog | None, str | None]:
    """PyIceberg's SqlCatalog on the embedded catalog; (None, why) for catalogs it cannot open without Spark."""
    kind = cfg.lakehouse.catalog
    if kind != "sqlite":
        return None, (
            "catalog metadata (row counts on main, snapshots, schemas, branch contents) is not readable without "
            f'Spark for catalog = "{kind}": the dashboard reads it with PyIceberg, which opens only the embedded '
            "SQLite catalog here; runs, checks and the file ledger below come from the run store"
        )
    try:
        import pyiceberg.catalog.sql  # noqa: F401  # only to say it is missing, as a note
    except ImportError:
        return None, 'PyIceberg is not installed: pip install "wapflow[dashboard]" to show catalog metadata'
    db = cfg.embedded_catalog_path()
    if not db.exists():
        return None, f"no catalog yet at {db}: nothing has been written to this lakehouse"
    return pyiceberg_client.open_catalog(cfg, why="the dashboard reads table metadata"), None


def change_token(src: Sources) -> str:
    """Changes whenever a run or a file changes: the dashboard's cache key, so a new run shows at the next refresh."""
    r, f = runs_table.c, files_table.c
    with src.store.engine.connect() as conn:
        runs = conn.execute(sa.select(sa.func.count(), sa.func.max(r.started_at), sa.func.max(r.finished_at))).one()
        files = conn.execute(sa.select(sa.func.count(), sa.func.max(f.updated_at))).one()
        statuses = conn.execute(
            sa.select(r.status, r.branch_kept, sa.func.count()).group_by(r.status, r.branch_kept)
        ).all()
    alerts = [(a["id"], a["status"]) for a in recent_alerts(src.store, limit=5)]
    return repr((tuple(runs), tuple(files), sorted((str(s), bool(k), n) for s, k, n in statuses), alerts))


def _iso(t: datetime | None) -> str | None:
    return t.isoformat(sep=" ", timespec="seconds") if t else None


def _records(snap: Snapshot | None) -> int | None:
    """Rows on main at a PyIceberg snapshot (its summary a mapping), as wapflow's Snapshot.rows counts them."""
    return rows_of(snap.summary) if snap is not None else None


def _catalog_tables(src: Sources) -> list[str]:
    direct = src.metadata()
    if direct is not None:
        return [t.dotted for t in direct.list_tables()]
    if src.catalog is None:
        return []
    out: list[str] = []
    for ns in src.catalog.list_namespaces():
        out += [".".join(t) for t in src.catalog.list_tables(ns)]
    return sorted(out)


def list_tables(src: Sources) -> list[str]:
    """Tables of the catalog and of the run store (a table whose first run was blocked is in the store only)."""
    with src.store.engine.connect() as conn:
        stored = {str(t) for (t,) in conn.execute(sa.select(runs_table.c.table_name).distinct()).all()}
    return sorted(stored | set(_catalog_tables(src)))


def overview(src: Sources) -> dict[str, Any]:
    """Tables with rows on main and their last run, runs per day by status, files by state, kept branches."""
    r = runs_table.c
    with src.store.engine.connect() as conn:
        runs = conn.execute(
            sa.select(r.run_id, r.table_name, r.status, r.started_at, r.branch, r.branch_kept).order_by(
                r.started_at.desc()
            )
        ).all()
        files = conn.execute(
            sa.select(files_table.c.source, files_table.c.state, sa.func.count()).group_by(
                files_table.c.source, files_table.c.state
            )
        ).all()
    last: dict[str, Any] = {}
    for run in runs:
        last.setdefault(run.table_name, run)
    tables = []
    direct = src.metadata()
    for name in sorted(set(last) | set(_catalog_tables(src))):
        tbl = src.table(name)
        main = tbl.current_snapshot() if tbl is not None else None
        latest = last.get(name)
        rows_on_main = (_records(main) or 0) if tbl is not None else None
        main_id = main.snapshot_id if main is not None else None
        if direct is not None and direct.exists(TableName.parse(name)):
            rows_on_main, main_id = _direct_main(direct, TableName.parse(name))
        tables.append(
            {
                "table": name,
                "rows_on_main": rows_on_main,
                "main_snapshot_id": main_id,
                "last_run_id": latest.run_id if latest is not None else None,
                "last_status": latest.status if latest is not None else None,
                "last_run_at": _iso(latest.started_at) if latest is not None else None,
            }
        )
    per_day = Counter((run.started_at.date().isoformat(), run.status) for run in runs)
    status_counts = Counter(run.status for run in runs)
    kept = [
        {"table": run.table_name, "branch": run.branch, "run_id": run.run_id, "status": run.status}
        for run in runs
        if run.branch_kept and run.branch
    ]
    for row in kept:
        rec = src.store.get(row["run_id"])
        row["rows"] = rec.rows_written if rec else None
        row["failed_checks"] = ", ".join(failed_checks(rec)) if rec else ""
    return {
        "tables": tables,
        "runs_total": len(runs),
        "runs_by_status": dict(sorted(status_counts.items())),
        "runs_per_day": [{"day": d, "status": s, "runs": n} for (d, s), n in sorted(per_day.items())],
        "files_by_state": [
            {"source": str(s), "state": str(st), "files": int(n)} for s, st, n in sorted(files, key=lambda x: x[:2])
        ],
        "kept_branches": kept,
        "alerts": recent_alerts(src.store, limit=50),
        "note": src.note,
    }


def _direct_main(direct: CatalogTables, table: TableName) -> tuple[int, int | None]:
    """Rows on main and main's snapshot, from the catalog's metadata read directly."""
    head = direct.head(table)
    return (rows_at(direct.snapshots(table), head) or 0), head


def _direct_history(direct: CatalogTables, table: TableName, limit: int) -> tuple[int, list[dict[str, Any]]]:
    """Rows on main and main's snapshots (newest first) as table_detail shows them, from the catalog directly."""
    snaps = direct.snapshots(table)
    main = direct.ancestry(snaps, direct.head(table))
    rows: list[dict[str, Any]] = [
        {
            "snapshot_id": s.snapshot_id,
            "committed_at": _iso(s.committed_at.astimezone(UTC)),  # committed_at is naive local time
            "operation": s.operation,
            "run_id": run_of(snaps, s),
            "rows_added": s.added_records,
            "total_rows": rows_at(snaps, s.snapshot_id),
        }
        for s in main[:limit]
    ]
    return (rows[0]["total_rows"] or 0) if rows else 0, rows


def _require_table(src: Sources, table: str) -> None:
    known = list_tables(src)
    if table not in known:
        raise NotFound(f"no table {table} in the run store or the catalog{did_you_mean(table, known)}")


def _ancestry(tbl: Table, head: int | None) -> list[Snapshot]:
    """Snapshots from `head` back to the table's first, newest first."""
    out: list[Snapshot] = []
    while head is not None:
        snap = tbl.snapshot_by_id(head)
        if snap is None:
            break
        out.append(snap)
        head = snap.parent_snapshot_id
    return out


def _run_of(tbl: Table, snap: Snapshot) -> str | None:
    """The run that wrote a snapshot; a cherry-picked one carries it on the snapshot it was picked from."""

    def summary_of(snapshot_id: int) -> dict[str, str] | None:
        picked = tbl.snapshot_by_id(snapshot_id)
        return picked.summary.additional_properties if picked is not None and picked.summary else None

    return run_id_of(snap.summary.additional_properties if snap.summary else {}, summary_of)


def _schema_changes(tbl: Table, main: list[Snapshot]) -> list[dict[str, Any]]:
    """Each schema main moved to, oldest first: when, by which run, which columns came, went or changed type."""
    schemas = {s.schema_id: s for s in tbl.metadata.schemas}
    out: list[dict[str, Any]] = []
    previous: int | None = None
    for snap in reversed(main):
        sid = snap.schema_id
        if sid is None or sid == previous:
            continue
        before = {f.field_id: f for f in schemas[previous].fields} if previous in schemas else {}
        after = {f.field_id: f for f in schemas[sid].fields}
        out.append(
            {
                "schema_id": sid,
                "snapshot_id": snap.snapshot_id,
                "committed_at": _iso(datetime.fromtimestamp(snap.timestamp_ms / 1000, UTC)),
                "run_id": _run_of(tbl, snap),
                "added": [f"{after[i].name} {after[i].field_type}" for i in after if i not in before],
                "removed": [before[i].name for i in before if i not in after],
                "changed": [
                    f"{after[i].name}: {before[i].field_type} -> {after[i].field_type}"
                    for i in after
                    if i in before and str(before[i].field_type) != str(after[i].field_type)
                ],
            }
        )
        previous = sid
    return out


def _utc(t: datetime) -> datetime:
    """A run store time as UTC (SQLite hands it back naive; it was written in UTC)."""
    return t.astimezone(UTC) if t.tzinfo else t.replace(tzinfo=UTC)


def check_metrics(src: Sources, table: str, limit: int = 200) -> list[dict[str, Any]]:
    """One row per (run, check), oldest run first: failing rows, observed value, rows the run wrote. Runs are
    placed in time by `started_at` (a datetime: the charts' time axis), never by their ids."""
    rows: list[dict[str, Any]] = []
    for rec in sorted(src.store.list(table, limit), key=lambda r: _utc(r.started_at)):
        for c in rec.checks:
            observed = c.get("observed")
            rows.append(
                {
                    "run_id": rec.run_id,
                    "started_at": _utc(rec.started_at),
                    "status": rec.status,
                    "rows_written": rec.rows_written,
                    "check": shown_check_name(str(c.get("name"))),
                    "check_status": c.get("status"),
                    "failing_rows": c.get("failing_rows"),
                    "observed": observed if isinstance(observed, int | float) else None,
                    "null_rate": observed if c.get("check") == "null_rate" else None,
                }
            )
    return rows


def table_detail(src: Sources, table: str, limit: int = 100) -> dict[str, Any]:
    """main's snapshots with the run that wrote each, check results per run, schema changes."""
    _require_table(src, table)
    tbl = src.table(table)
    history: list[dict[str, Any]] = []
    schema_changes: list[dict[str, Any]] = []
    rows_on_main = None
    direct = src.metadata()
    if direct is not None and direct.exists(TableName.parse(table)):
        rows_on_main, history = _direct_history(direct, TableName.parse(table), limit)
    if tbl is not None:
        main = _ancestry(tbl, tbl.metadata.current_snapshot_id)
        rows_on_main = _records(main[0]) if main else 0
        for snap in main[:limit]:
            s = snap.summary.additional_properties if snap.summary else {}
            history.append(
                {
                    "snapshot_id": snap.snapshot_id,
                    "committed_at": _iso(datetime.fromtimestamp(snap.timestamp_ms / 1000, UTC)),
                    "operation": str(snap.summary.operation.value) if snap.summary else None,
                    "run_id": _run_of(tbl, snap),
                    "rows_added": int(s.get(ADDED_RECORDS, 0) or 0),
                    "total_rows": _records(snap),
                }
            )
        schema_changes = _schema_changes(tbl, main)
    return {
        "table": table,
        "rows_on_main": rows_on_main,
        "history": history,
        "checks": check_metrics(src, table),
        "schema_changes": schema_changes,
        "note": src.note if tbl is None else None,
    }


def run_detail(src: Sources, run_id: str) -> dict[str, Any]:
    """A run's report plus what a person does next: the commands to inspect, publish after a fix, or discard."""
    rep: dict[str, Any] = dict(run_report(src.store, run_id))
    rep["checks"] = [shown_check(c) for c in rep["checks"]]
    rec = src.store.get(run_id)
    assert rec is not None  # run_report raised NotFound otherwise
    commands: dict[str, str] = {"report": f"wap report {run_id}"}
    branch = rec.branch if rec.branch_kept else None
    if branch:
        commands["inspect"] = f"wap query {shlex.quote(f'SELECT * FROM {rec.table_name}')} --branch {branch}"
    if rec.group_id:  # a table of a multi-table run is decided, completed and retried with its group
        commands["the whole run"] = f"wap report {rec.group_id}"
    decide = rec.group_id or run_id
    if rec.status == "awaiting_review":  # pipeline.state.AWAITING_REVIEW: a person decides (service.review)
        commands["approve"] = f"wap approve {decide} --reason ..."
        commands["reject"] = f"wap reject {decide} --reason ..."
    elif branch:
        commands["discard"] = f"wap discard {branch} --table {rec.table_name}"
    if not rec.group_id and (rec.status in ("blocked", "failed") or rep["resume"]):
        from_ledger = bool(src.ledger.rows(run_id=run_id))
        # A blocked run's kept branch is audited again by the same run id once the data or checks are fixed.
        commands["publish after a fix"] = f"wap retry {run_id}" if from_ledger else rec.resume_command()
    rep["commands"] = commands
    rep["timing_rows"] = timing_rows(rec.timings)
    rep["ledger_files"] = [f.to_dict() for f in src.ledger.rows(run_id=run_id)]
    rep["started_at"] = _iso(rec.started_at)
    rep["finished_at"] = _iso(rec.finished_at)
    return rep


def recent_runs(src: Sources, limit: int = 50) -> list[dict[str, Any]]:
    """The Run page's list: the newest runs, a multi-table run on one row naming its tables and their status."""
    listing = runs_listing(src.store, None, limit)
    groups = {g["group_id"]: g for g in listing["groups"]}
    status = {r["run_id"]: r["status"] for r in listing["runs"]}
    rows: list[dict[str, Any]] = []
    for r in listing["runs"]:
        g = groups.get(r["group_id"] or "")
        if g is None:
            rows.append(
                {"run_id": r["run_id"], "tables": r["table"], "status": r["status"], "rows": r["rows"],
                 "started_at": r["started_at"], "took": duration_text(r["seconds"]), "reason": r["reason"]}
            )  # fmt: skip
        elif r["run_id"] == g["members"][0]:
            tables = [f"{t} ({status[m]})" for t, m in zip(g["tables"], g["members"], strict=True)]
            rows.append(
                {"run_id": g["group_id"], "tables": ", ".join(tables), "status": g["status"], "rows": g["rows"],
                 "started_at": g["started_at"], "took": duration_text(g["seconds"]), "reason": g["reason"]}
            )  # fmt: skip
    return rows


def run_choices(src: Sources, limit: int = 100) -> list[str]:
    """The Run page's picker: the newest runs, a multi-table run by its group id (its tables' ids paste in)."""
    listing = runs_listing(src.store, None, limit)
    return [r["group_id"] or r["run_id"] for r in listing["runs"] if r["group_id"] is None or r["run_id"] in
            {g["members"][0] for g in listing["groups"]}]  # fmt: skip


def group_detail(src: Sources, group_id: str) -> dict[str, Any] | None:
    """A multi-table run as the Run page shows it: the whole run, a row per table, the checks of the tables that
    stopped it, each table's timings and what a person does next. None when `group_id` names no such run."""
    rep = group_report(src.store, group_id)
    if rep is None:
        return None
    doc: dict[str, Any] = dict(rep)
    members = rep["members"]
    doc["table_rows"] = [
        {
            "table": m["table"],
            "run_id": m["run_id"],
            "status": m["status"],
            "rows_written": m["rows_written"],
            "snapshot_id": m["snapshot_id"],
            "failed_checks": ", ".join(str(c["name"]) for c in m["checks"] if c.get("status") == "failed"),
            "stopped_it": m["table"] in rep["blocked_by"],
            "took": duration_text(seconds_between(m["started_at"], m["finished_at"])),
        }
        for m in members
    ]
    doc["stopped_by"] = [
        {"table": m["table"], "run_id": m["run_id"], "checks": [shown_check(c) for c in m["checks"]]}
        for m in members
        if m["table"] in rep["blocked_by"]
    ]
    doc["timing_rows"] = [{"table": m["table"], **t} for m in members for t in timing_rows(m["timings"])]
    commands: dict[str, str] = {"report": f"wap report {group_id}"}
    if rep["branch_kept"] or rep["status"] == "awaiting_review":
        commands["diff"] = f"wap diff {group_id}"
    if rep["status"] == "awaiting_review":
        commands["approve"] = f"wap approve {group_id} --reason ..."
        commands["reject"] = f"wap reject {group_id} --reason ..."
    elif rep["branch_kept"] and rep["branch"]:
        for t in rep["tables"]:
            commands[f"inspect {t}"] = f"wap query {shlex.quote(f'SELECT * FROM {t}')} --branch {rep['branch']}"
        commands["discard"] = f"wap discard {rep['branch']}"
    if rep["resume"]:
        commands["complete it"] = rep["resume"]
    doc["commands"] = commands
    doc["started_at"] = _iso(rep["started_at"])
    doc["finished_at"] = _iso(rep["finished_at"])
    doc["took"] = duration_text(rep["seconds"])
    return doc


def shown_check(c: dict[str, Any]) -> dict[str, Any]:
    """A check result as the Run and Branch pages show it: its observed value and threshold in words
    (wapflow.service.render: a band as `[212.5, 1150]`, no dict or `None`), its failing rows' NULLs as `null`."""
    return {
        **c,
        "observed": render.observed(c.get("observed")),
        "threshold": render.text(c.get("threshold") or None),
        "samples": [render.sample_row(r) for r in c.get("samples") or []],
    }


def timing_rows(timings: dict[str, float]) -> list[dict[str, Any]]:
    """A run's timings as (step, seconds) rows in the order the pipeline runs its steps (pipeline.state.STEPS),
    then any other timed part (e.g. cleanup) in the order it was recorded."""
    order: dict[str, int] = {name: i for i, name in enumerate(STEPS)}
    keys = sorted(timings, key=lambda k: (order.get(k, len(order)), list(timings).index(k)))
    return [{"step": k, "seconds": timings[k]} for k in keys]


def branch_names(src: Sources) -> list[str]:
    """Branches kept for inspection, newest run first (for the branch picker)."""
    return list(dict.fromkeys(b["branch"] for b in overview_kept(src)))


def overview_kept(src: Sources) -> list[dict[str, Any]]:
    r = runs_table.c
    with src.store.engine.connect() as conn:
        rows = conn.execute(
            sa.select(r.table_name, r.branch, r.run_id)
            .where(r.branch_kept.is_(True), r.branch.is_not(None))
            .order_by(r.started_at.desc())
        ).all()
    return [{"table": t, "branch": b, "run_id": i} for t, b, i in rows]


def _added_files(tbl: Table, snaps: list[Snapshot]) -> list[Any]:
    """The data files the given snapshots added (each snapshot's own ADDED manifest entries)."""
    from pyiceberg.manifest import DataFileContent, ManifestEntryStatus

    ids = {s.snapshot_id for s in snaps}
    out = []
    for snap in snaps:
        for m in snap.manifests(tbl.io):
            if m.added_snapshot_id != snap.snapshot_id:
                continue
            for e in m.fetch_manifest_entry(tbl.io, discard_deleted=True):
                if (
                    e.status == ManifestEntryStatus.ADDED
                    and e.snapshot_id in ids
                    and e.data_file.content == DataFileContent.DATA
                ):
                    out.append(e.data_file)
    return out


def _null_counts(tbl: Table, files: list[Any]) -> list[dict[str, Any]]:
    """Nulls per column of the new rows: from the files' column statistics, else by reading the files."""
    schema = tbl.schema()
    columns = [(f.field_id, f.name) for f in schema.fields]
    if all(all(fid in (df.null_value_counts or {}) for fid, _ in columns) for df in files):
        counts = {name: sum(df.null_value_counts[fid] for df in files) for fid, name in columns}
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        counts = dict.fromkeys((name for _, name in columns), 0)
        for df in files:
            with tbl.io.new_input(df.file_path).open() as f:
                data = pq.read_table(pa.BufferReader(f.read()))
            for name in counts:
                if name in data.column_names:
                    counts[name] += data.column(name).null_count
    total = sum(df.record_count for df in files)
    return [
        {"column": name, "nulls": n, "null_rate": round(n / total, 4) if total else 0.0} for name, n in counts.items()
    ]


def branch_detail(src: Sources, branch: str) -> dict[str, Any]:
    """A kept branch per table: rows it adds over main, the checks that failed, nulls per column of its new rows."""
    runs = src.store.by_branch(branch)
    known = branch_names(src)
    if not runs:
        raise NotFound(f"no run used branch {branch}{did_you_mean(branch, known)}", hint="pick a kept branch")
    tables: list[dict[str, Any]] = []
    for table in dict.fromkeys(r.table_name for r in runs):
        run = next(r for r in runs if r.table_name == table)
        entry: dict[str, Any] = {
            "table": table,
            "run_id": run.run_id,
            "status": run.status,
            "kept": run.branch_kept,
            "failed_checks": [shown_check(c) for c in shown_checks(run.checks) if c.get("status") == "failed"],
            "rows_added": run.rows_written,
            "null_counts": [],
            "head_snapshot_id": None,
            "note": src.note,
        }
        tbl = src.table(table)
        direct = src.metadata()
        if direct is not None:  # the branch's head from the catalog directly; its added files need PyIceberg
            head = direct.refs(TableName.parse(table)).get(branch)
            entry["head_snapshot_id"] = head.snapshot_id if head is not None else None
        ref = tbl.metadata.refs.get(branch) if tbl is not None else None
        if tbl is not None and ref is None:
            entry["note"] = f"{table} has no branch {branch} any more (published, dropped or discarded)"
        elif tbl is not None and ref is not None:
            on_main = {s.snapshot_id for s in _ancestry(tbl, tbl.metadata.current_snapshot_id)}
            own = [s for s in _ancestry(tbl, ref.snapshot_id) if s.snapshot_id not in on_main]
            files = _added_files(tbl, own)
            entry["head_snapshot_id"] = ref.snapshot_id
            entry["rows_added"] = sum(df.record_count for df in files)
            entry["null_counts"] = _null_counts(tbl, files)
            entry["note"] = None
        tables.append(entry)
    return {"branch": branch, "tables": tables}
