"""Kept branches, main's history, and discarding a kept branch: what the CLI and a dashboard show of tables.

These need a `Lakehouse` (Spark for the table metadata; on Nessie, the catalog's refs too). The run rows
themselves come from `wapflow.service.runs`, which needs no Spark.
"""

from __future__ import annotations

from typing import Any

from wapflow.errors import NotFound, UsageError, did_you_mean
from wapflow.lakehouse.identifiers import TableName, validate_branch
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.lakehouse.tables import SOURCE_SNAPSHOT_PROP, SOURCES_PROP
from wapflow.runs.store import RunRecord
from wapflow.service.runs import failed_checks


def _require_table(lh: Lakehouse, table: TableName) -> None:
    if not lh.tables.exists(table):
        known = [t.dotted for t in lh.tables.list_tables()]
        raise NotFound(
            f"table {table} does not exist in catalog {lh.catalog}{did_you_mean(table.dotted, known)}",
            hint='list tables with `wap query "SHOW TABLES IN <namespace>"`',
        )


def history(lh: Lakehouse, table_text: str, *, limit: int = 50) -> list[dict[str, Any]]:
    """main's snapshots, newest first, with the run that produced each (cherry-picks resolved)."""
    table = TableName.parse(table_text)
    _require_table(lh, table)
    snaps = lh.tables.snapshots(table)
    out: list[dict[str, Any]] = []
    for s in lh.tables.ancestry(snaps, lh.tables.head(table, "main"))[:limit]:
        run_id = s.run_id
        src = s.summary.get(SOURCE_SNAPSHOT_PROP)
        origin = snaps.get(int(src)) if src and src.isdigit() else None
        if run_id is None and origin is not None:
            run_id = origin.run_id
        files = (origin.summary if origin else s.summary).get(SOURCES_PROP)
        out.append(
            {
                "snapshot_id": s.snapshot_id,
                "parent_id": s.parent_id,
                "committed_at": s.committed_at.isoformat(sep=" ", timespec="seconds"),
                "operation": s.operation,
                "run_id": run_id,
                "rows_added": s.added_records,
                "total_rows": int(s.summary.get("total-records", "0") or 0),
                "cherry_picked_from": int(src) if src and src.isdigit() else None,
                "files": files.split(",") if files else [],
            }
        )
    return out


def list_branches(lh: Lakehouse, table_text: str | None = None) -> list[dict[str, Any]]:
    """Branches other than main, with the run that left each and its failed checks."""
    if lh.catalog_level and not table_text:
        return _nessie_branches(lh)
    if table_text:
        table = TableName.parse(table_text)
        _require_table(lh, table)
        tables = [table]
    else:
        tables = lh.tables.list_tables()
    out: list[dict[str, Any]] = []
    for t in tables:
        for b in lh.branches.list(t):
            runs = [r for r in lh.store.by_branch(b.name) if r.table_name == t.dotted]
            run = runs[0] if runs else None
            out.append({"table": t.dotted, "branch": b.name, "head_snapshot_id": b.head, **_run_fields(run)})
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


def _nessie_branches(lh: Lakehouse) -> list[dict[str, Any]]:
    """Nessie branches (each may hold several tables, some created by the run and absent from main)."""
    out: list[dict[str, Any]] = []
    for ref in lh.branches.list_refs():  # type: ignore[union-attr]  # Nessie-only: the branch-backend interface is not one type yet (issue 9, item 2)
        runs: list[RunRecord | None] = [*lh.store.by_branch(ref.name)] or [None]
        for run in runs:
            out.append(
                {
                    "table": run.table_name if run is not None else None,
                    "branch": ref.name,
                    "nessie_hash": ref.hash,
                    **_run_fields(run),
                }
            )
    return out


def _discard_nessie(lh: Lakehouse, branch: str) -> dict[str, Any]:
    """A Nessie branch is the whole run's sandbox: deleting it discards every table the run wrote."""
    if not lh.branches.branch_exists(branch):  # type: ignore[union-attr]  # Nessie-only: the branch-backend interface is not one type yet (issue 9, item 2)
        kept = [r.name for r in lh.branches.list_refs()]  # type: ignore[union-attr]  # Nessie-only: the branch-backend interface is not one type yet (issue 9, item 2)
        raise NotFound(
            f"Nessie has no branch {branch}{did_you_mean(branch, kept)}", hint="see kept branches with `wap branches`"
        )
    lh.branches.delete(branch)  # type: ignore[union-attr]  # Nessie-only: the branch-backend interface is not one type yet (issue 9, item 2)
    runs = lh.store.by_branch(branch)
    for r in runs:
        if r.branch_kept:
            r.branch_kept = False
            if r.status == "blocked":
                r.status = "discarded"
            lh.store.save(r)
    tables = sorted({r.table_name for r in runs})
    return {
        "table": ", ".join(tables) or "(all tables)",
        "branch": branch,
        "dropped": True,
        "run_ids": [r.run_id for r in runs],
    }


def discard(lh: Lakehouse, branch: str, table_text: str | None = None) -> dict[str, Any]:
    """Drop a kept branch (its rows were never on main) and mark its run discarded."""
    validate_branch(branch)
    if lh.catalog_level:
        return _discard_nessie(lh, branch)
    runs = lh.store.by_branch(branch)
    if table_text:
        table = TableName.parse(table_text)
    elif runs:
        candidates = sorted({r.table_name for r in runs})
        if len(candidates) > 1:
            raise UsageError(
                f"branch {branch} exists in several tables ({', '.join(candidates)})", hint="add --table TABLE"
            )
        table = TableName.parse(candidates[0])
    else:
        raise NotFound(
            f"no recorded run used branch {branch}", hint=f"name its table: wap discard {branch} --table ns.table"
        )
    _require_table(lh, table)
    if not lh.branches.exists(table, branch):
        kept = [b.name for b in lh.branches.list(table)]
        raise NotFound(
            f"{table} has no branch {branch}{did_you_mean(branch, kept)}",
            hint="see kept branches with `wap branches`",
        )
    lh.branches.drop(table, branch)
    for r in runs:
        if r.table_name == table.dotted and r.branch_kept:
            r.branch_kept = False
            if r.status == "blocked":
                r.status = "discarded"
            lh.store.save(r)
    return {"table": table.dotted, "branch": branch, "dropped": True, "run_ids": [r.run_id for r in runs]}
