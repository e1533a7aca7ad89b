"""Kept branches, main's history, and discarding a kept branch: what the CLI and a dashboard show of tables.

These need a `Lakehouse`. History and branch listings read table metadata only: from the catalog itself, with
no JVM, where `Lakehouse.metadata` can (wapflow.lakehouse.metadata), else through Spark. Discarding a branch
commits to the table, through Spark. The run rows themselves come from `wapflow.service.runs` (no Spark).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from wapflow.errors import NotFound, WapError, did_you_mean
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.lakehouse.lineage import origin, picked_from, run_of
from wapflow.lakehouse.model import SOURCES_PROP, rows_at
from wapflow.lakehouse.reads import TableMetadata
from wapflow.pipeline import lineage
from wapflow.pipeline.state import AWAITING_REVIEW
from wapflow.runs.store import RunRecord
from wapflow.service.runs import failed_checks
from wapflow.spark import errors as spark_errors
from wapflow.sql.identifiers import TableName, validate_branch
from wapflow.vocabulary import DISCARDED


def require_table(tables: TableMetadata, table: TableName) -> None:
    if not tables.exists(table):
        known = [t.dotted for t in tables.list_tables()]
        raise NotFound(
            f"table {table} does not exist in catalog {tables.catalog}{did_you_mean(table.dotted, known)}",
            hint='list tables with `wap query "SHOW TABLES IN <namespace>"`',
        )


@contextmanager
def reading(doing: str) -> Iterator[None]:
    """An exception of Spark or the catalog while reading metadata, as the WapError `wap run` would name
    (an unreachable catalog is transient, refused credentials the environment); unnamed ones stay bugs."""
    try:
        yield
    except WapError:
        raise
    except Exception as e:
        known = spark_errors.classify(e, doing=doing)
        if known is None:
            raise
        raise known from e


def main_snapshots(lh: Lakehouse, table: TableName) -> tuple[dict[int, Any], list[Any]]:
    """An existing table's snapshots by id, and main's of them newest first (what lineage reads through: a
    cherry-pick's origin); a missing table is NotFound with close names."""
    with reading(f"reading the metadata of {table}"):
        md = lh.metadata
        require_table(md, table)
        snaps = md.snapshots(table)
        return snaps, list(md.ancestry(snaps, md.head(table, "main")))


def history(lh: Lakehouse, table_text: str, *, limit: int = 50) -> list[dict[str, Any]]:
    """main's snapshots, newest first, with the run that produced each (cherry-picks resolved)."""
    table = TableName.parse(table_text)
    snaps, main = main_snapshots(lh, table)
    out: list[dict[str, Any]] = []
    for s in main[:limit]:
        files = (origin(snaps, s) or s).summary.get(SOURCES_PROP)
        out.append(
            {
                "snapshot_id": s.snapshot_id,
                "parent_id": s.parent_id,
                "committed_at": s.committed_at.isoformat(sep=" ", timespec="seconds"),
                "operation": s.operation,
                "run_id": run_of(snaps, s),
                "rows_added": s.added_records,
                "total_rows": rows_at(snaps, s.snapshot_id),
                "cherry_picked_from": picked_from(s.summary),
                "files": files.split(",") if files else [],
            }
        )
    return out


def list_branches(lh: Lakehouse, table_text: str | None = None) -> list[dict[str, Any]]:
    """Branches other than main, with the run that left each and its failed checks. A branch of one table
    shows its latest run; a branch spanning the catalog (Nessie) shows every run that wrote on it."""
    table = TableName.parse(table_text) if table_text else None
    with reading(f"listing the branches of {table or 'the catalog'}"):
        if table is not None:
            require_table(lh.metadata, table)
        found = lh.iceberg.list_branches(table)
    out: list[dict[str, Any]] = []
    for b in found:
        runs = [r for r in lh.store.by_branch(b.name) if b.table is None or r.table_name == b.table.dotted]
        shown: list[RunRecord | None] = [*(runs if b.table is None else runs[:1])] or [None]
        for run in shown:
            table_name = b.table.dotted if b.table is not None else (run.table_name if run is not None else None)
            row: dict[str, Any] = {"table": table_name, "branch": b.name, "head_snapshot_id": b.head}
            if b.hash is not None:
                row["nessie_hash"] = b.hash
            out.append({**row, **_run_fields(run)})
    return out


def _run_fields(run: RunRecord | None) -> dict[str, Any]:
    """What `wap branches` shows of the run that left a branch (None: no recorded run)."""
    return {
        "run_id": run.run_id if run else None,
        "status": run.shown_status if run else None,
        "started_at": run.started_at.isoformat(sep=" ", timespec="seconds") if run else None,
        "rows": run.rows_written if run else None,
        "failed_checks": failed_checks(run) if run else [],
        "files": run.files if run else [],
    }


def discard(lh: Lakehouse, branch: str, table_text: str | None = None) -> dict[str, Any]:
    """Drop a kept branch (its rows were never on main) and mark its runs discarded."""
    validate_branch(branch)
    runs = lh.store.by_branch(branch)
    if table_text:
        tables = [TableName.parse(table_text)]
    else:
        tables = [TableName.parse(t) for t in sorted({r.table_name for r in runs})]
    names = {t.dotted for t in tables}
    held = [r for r in runs if r.status == AWAITING_REVIEW and r.table_name in names]
    if held:
        return _reject_held(lh, branch, held)
    dropped = lh.iceberg.discard(branch, tables)
    if not dropped.found:
        if table_text:
            require_table(lh.tables, tables[0])  # (a table a run created on its Nessie branch is not on main)
        where = tables[0] if len(tables) == 1 else "the lakehouse"
        kept = [b.name for b in (lh.iceberg.list(tables[0]) if len(tables) == 1 else lh.iceberg.all_branches())]
        hint = "see kept branches with `wap branches`"
        if not tables and not dropped.whole_branch:
            hint = f"no recorded run used branch {branch}; name its table: wap discard {branch} --table ns.table"
        raise NotFound(f"{where} has no branch {branch}{did_you_mean(branch, kept)}", hint=hint)
    for r in runs:
        if r.branch_kept and (dropped.whole_branch or r.table_name in names):
            r.branch_kept = False
            aborted = r.status == "blocked"
            if aborted:
                r.status = DISCARDED
            lh.store.save(r)
            if aborted:  # lineage: the run ends without publishing (a failed run's FAIL was its end already)
                lineage.emit(lh.config, "ABORT", r, progress=lh.progress)
    shown = sorted({r.table_name for r in runs}) if dropped.whole_branch else sorted(names)
    return {
        "table": ", ".join(shown) or "(all tables)",
        "branch": branch,
        "dropped": True,
        "run_ids": [r.run_id for r in runs],
    }


def _reject_held(lh: Lakehouse, branch: str, held: list[RunRecord]) -> dict[str, Any]:
    """A branch that holds a run awaiting review: discarding it is that run's rejection (the same path as
    `wap reject`: its files `rejected` in the ledger, the decision recorded), never a run left waiting on a
    branch that is gone."""
    from wapflow.service import review

    done = [review.reject(lh, r.run_id, reason=f"its branch {branch} was discarded with `wap discard`") for r in held]
    return {
        "table": ", ".join(sorted({d["table"] for d in done})),
        "branch": branch,
        "dropped": any(d["dropped"] for d in done),
        "run_ids": [d["run_id"] for d in done],
        "rejected": [d["run_id"] for d in done],
    }
