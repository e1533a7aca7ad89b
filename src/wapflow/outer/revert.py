"""`wap revert RUN_ID`: take a published run's rows back off main, and keep its files from coming back.

One new snapshot per table (the run's table, and its quarantine table when the run diverted rows there)
deletes exactly the data files the run's snapshots on main added: metadata only, other runs' rows untouched,
whether the run is the latest on main or deep in its history. The snapshot carries
`wapflow.reverted-run-id`, so main's history says what happened and the run id may publish again after
`wap retry`. The run is recorded `reverted`; its files are `reverted` in the ledger (not ingested again
unless retried). On a Spark Connect client (master = "sc://...") the files go through PyIceberg on the same
catalog (the JDBC catalogs); a merge or replace rolls back through Iceberg's procedure, as locally.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from wapflow.errors import NotFound, UsageError
from wapflow.lakehouse import session
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.lakehouse.lineage import on_main, revert_properties
from wapflow.lakehouse.pyiceberg_client import MISSING_FILES
from wapflow.pipeline import quarantine_of, validate_run_id
from wapflow.sql.identifiers import TableName


def revert(lh: Lakehouse, run_id: str) -> dict[str, Any]:
    validate_run_id(run_id)
    # The files go through Iceberg's Java API in this process (a local master: a `wap serve` server is not
    # used), or through PyIceberg on the same catalog with master = "sc://..." (Tables.remove_added_files).
    session.use_server = False
    rec = lh.store.get(run_id)
    if rec is None:
        raise NotFound(f"no run {run_id} in the run store", hint="see `wap runs` for run ids")
    if rec.status != "published":
        hint = (
            f"drop its kept branch with `wap discard {rec.branch}`"
            if rec.status == "blocked" and rec.branch_kept
            else "only a published run's rows are on main"
        )
        raise UsageError(f"run {run_id} is {rec.shown_status}: there is nothing of it on main to revert", hint=hint)
    table = TableName.parse(rec.table_name)
    quarantine = quarantine_of(table)
    plan: list[tuple[TableName, list[int], bool]] = []  # each table, the run's snapshots on it, changed rows
    for t in (table, quarantine):
        if not lh.tables.exists(t):
            continue
        lh.tables.refresh(t)
        snaps = list(reversed(on_main(lh.tables, t, run_id)))  # oldest first
        if snaps:
            plan.append((t, snaps, _changed_rows(lh, t, snaps)))
    if any(not changed for _, _, changed in plan):
        lh.tables.check_remove_files()  # this session cannot remove files: say so before either table changes
    done: dict[str, int] = {}
    removed: dict[str, int] = {}
    for t, snaps, changed in plan:
        rows_before = lh.tables.row_count(t)
        if changed:
            done[t.dotted] = _roll_back_change(lh, t, run_id, snaps)
        else:
            done[t.dotted] = _remove_files(lh, t, run_id, snaps)
        removed[t.dotted] = rows_before - lh.tables.row_count(t)
    if table.dotted not in done and rec.snapshot_id is not None and rec.snapshot_id not in lh.tables.snapshots(table):
        raise UsageError(
            f"run {run_id}'s snapshot {rec.snapshot_id} is no longer in the history of {table}: `wap maintain` "
            "expired it (the run was published before [maintenance] revert_window)",
            hint="main is unchanged; revert_window sets how long runs stay revertable",
        )
    if table.dotted not in done:
        raise UsageError(
            f"run {run_id} is recorded published, but main of {table} holds none of its snapshots",
            hint=f"see `wap history {table}`; its rows may have been removed by other means",
        )
    rec.status = "reverted"
    rec.reverted = {"at": datetime.now(UTC).isoformat(), "snapshots": done, "rows_removed": removed}
    lh.store.save(rec)
    files = [r for r in lh.ledger.rows(run_id=run_id) if r.state == "published"]
    lh.ledger.settle(
        [r.key for r in files], "reverted", run_id=run_id, reason=f"wap revert {run_id} (snapshot {done[table.dotted]})"
    )
    return {
        "run_id": run_id,
        "table": table.dotted,
        "snapshot_id": done[table.dotted],
        "snapshots": done,
        "rows_removed": removed,
        "ledger_files": len(files),
        "message": f"reverted run {run_id}: {removed[table.dotted]} row(s) off main of {table} "
        f"in snapshot {done[table.dotted]}"
        + (
            f"; {len(files)} file(s) marked reverted in the ledger (`wap retry {run_id}` brings them back)"
            if files
            else ""
        ),
    }


def _changed_rows(lh: Lakehouse, table: TableName, snaps: list[int]) -> bool:
    """The run's commits on main changed existing rows (a merge or replace: operations other than append).
    Their added files hold rows the run only copied too, so removing them would lose other runs' rows."""
    known = lh.tables.snapshots(table)
    return any(known[s].operation not in (None, "append") for s in snaps if s in known)


def _roll_back_change(lh: Lakehouse, table: TableName, run_id: str, snaps: list[int]) -> int:
    """A merge or replace is taken back by moving main to the snapshot before it, only while it is main's
    latest commit (later commits may build on the rows it changed)."""
    head = lh.tables.head(table)
    parent = lh.tables.snapshots(table)[snaps[0]].parent_id
    if len(snaps) != 1 or snaps[0] != head or parent is None:
        raise UsageError(
            f"run {run_id} changed rows of {table} (a merge or replace), and main has moved on since "
            f"(its snapshot {snaps[-1]}, main at {head})",
            hint="a change other runs built on cannot be taken out alone: publish a correcting batch instead "
            f"(see `wap history {table}`)",
        )
    lh.progress(f"rolling main of {table} back to snapshot {parent}, before run {run_id}'s change")
    lh.tables.roll_back(table, parent)
    return parent


def _remove_files(lh: Lakehouse, t: TableName, run_id: str, snaps: list[int]) -> int:
    """An append's exact files off main (one new snapshot); refused when maintenance rewrote them since."""
    lh.progress(f"removing run {run_id}'s files from main of {t}")
    try:
        return lh.tables.remove_added_files(t, snaps, revert_properties(run_id))
    except Exception as e:
        if MISSING_FILES not in str(e):
            raise
        raise UsageError(
            f"run {run_id}'s files are no longer on main of {t} as it wrote them: `wap maintain` compacted "
            "them with other runs' rows (the run was published before [maintenance] revert_window)",
            hint="main is unchanged; revert_window sets how long runs stay revertable",
        ) from None
