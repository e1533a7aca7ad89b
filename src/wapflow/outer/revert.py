"""`wap revert RUN_ID`: take a published run's rows back off main, and keep its files from coming back.

One new snapshot per table (the run's table, and its quarantine table when the run diverted rows there),
carrying `wapflow.reverted-run-id`, so main's history says what happened and the run id may publish again
after `wap retry`. How the rows come off is decided once per table, from what the run did and the table's
format:
- an append on a v2 table: the data files the run's snapshots on main added are deleted (metadata only,
  other runs' rows untouched, the run latest or deep in history); refused once `wap maintain` compacted them;
- an append on a v3 table: the rows row lineage says the run's commits last wrote (`_last_updated_sequence_number`,
  kept through compaction) are deleted, with deletion vectors on a merge-on-read table; so compaction need not
  wait for `revert_window`. Rows a later run updated are that run's now and stay (the result says how many);
- a merge or replace: main rolls back to the snapshot before it, while nothing but maintenance rewrites
  (compaction: same rows) came after it.
The run is recorded `reverted`; its files are `reverted` in the ledger (not ingested again unless retried).
A revert killed after its commit finishes on the next `wap revert` (the commit is found on main). On a Spark
Connect client (master = "sc://...") a v2 append's files go through PyIceberg on the same catalog.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from wapflow.errors import NotFound, UsageError
from wapflow.faults import crash_point
from wapflow.lakehouse import session
from wapflow.lakehouse.conflicts import retry_on_conflict
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.lakehouse.lineage import on_main, revert_properties
from wapflow.lakehouse.model import ADDED_POSITION_DELETES, DELETED_RECORDS, LINEAGE_FROM_VERSION, REVERTED_PROP
from wapflow.lakehouse.pyiceberg_client import MISSING_FILES
from wapflow.pipeline import quarantine_of, validate_run_id
from wapflow.spark import errors as spark_errors
from wapflow.sql.identifiers import TableName


def revert(lh: Lakehouse, run_id: str) -> dict[str, Any]:
    validate_run_id(run_id)
    # The files go through Iceberg's Java API in this process (a local master: a `wap serve` server is not
    # used), or through PyIceberg on the same catalog with master = "sc://..." (Commits.remove_added_files).
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
    plan: list[tuple[TableName, list[int], str]] = []  # each table, the run's snapshots on it, how they go
    for t in (table, quarantine):
        if not lh.tables.exists(t):
            continue
        lh.tables.refresh(t)
        snaps = list(reversed(on_main(lh.tables, t, run_id)))  # oldest first
        if snaps:
            plan.append((t, snaps, _how(lh, t, snaps)))
        elif (rec.lineage or {}).get(t.dotted) and _revert_commit(lh, t, run_id) is None:
            # A v3 append whose snapshots `wap maintain` expired: its rows by the lineage its record kept.
            plan.append((t, [], LINEAGE))
    if any(how == FILES for _, _, how in plan):
        lh.tables.commits.check_remove_files()  # this session cannot remove files: say so before either table changes
    done: dict[str, int] = {}
    removed: dict[str, int] = {}
    kept: dict[str, int] = {}
    crash_point("revert:planned")
    for t, snaps, how in plan:
        head = lh.tables.head(t)
        recorded = (rec.lineage or {}).get(t.dotted) or {}
        if how == LINEAGE:
            seqs = [lh.tables.sequence_number(t, s) for s in snaps] if snaps else list(recorded["sequence_numbers"])
            done[t.dotted] = _delete_by_lineage(lh, t, run_id, seqs)
        else:
            done[t.dotted] = _STRATEGIES[how](lh, t, run_id, snaps)
        # A rollback moves main back to an older snapshot: what it took off is counted from main's head before.
        removed[t.dotted] = _rows_taken_off(lh, t, done[t.dotted], since=head if how == ROLLBACK else None)
        if how == LINEAGE:
            known = lh.tables.snapshots(t)
            added = sum(known[s].added_records for s in snaps) if snaps else int(recorded.get("rows") or 0)
            if added > removed[t.dotted]:
                kept[t.dotted] = added - removed[t.dotted]
    for t in (table, quarantine):
        # A revert killed after its commit to this table (before the other's, or before its record): the
        # commit is on main; count it, and finish the record.
        if t.dotted not in done:
            sid = _revert_commit(lh, t, run_id) if lh.tables.exists(t) else None
            if sid is not None:
                done[t.dotted] = sid
                removed[t.dotted] = _rows_taken_off(lh, t, sid)
    if table.dotted not in done and rec.snapshot_id is not None and rec.snapshot_id not in lh.tables.snapshots(table):
        v3 = lh.tables.current_format_version(table) >= LINEAGE_FROM_VERSION
        raise UsageError(
            f"run {run_id}'s snapshot {rec.snapshot_id} is no longer in the history of {table}: `wap maintain` "
            + (
                "expired it, and the run's record holds no row lineage to find its rows by (a merge or replace, "
                "or a run published before wapflow recorded it)"
                if v3
                else "expired it (the run was published before [maintenance] revert_window)"
            ),
            hint="main is unchanged; "
            + (
                "a merge is revertable while its snapshot is kept ([maintenance] expire_older_than, keep_last)"
                if v3
                else "revert_window sets how long runs stay revertable"
            ),
        )
    if table.dotted not in done:
        raise UsageError(
            f"run {run_id} is recorded published, but main of {table} holds none of its snapshots",
            hint=f"see `wap history {table}`; its rows may have been removed by other means",
        )
    crash_point("revert:committed")
    rec.status = "reverted"
    rec.reverted = {"at": datetime.now(UTC).isoformat(), "snapshots": done, "rows_removed": removed}
    if kept:
        rec.reverted["rows_changed_since"] = kept
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
        "rows_changed_since": kept,
        "ledger_files": len(files),
        "message": f"reverted run {run_id}: {removed[table.dotted]} row(s) off main of {table} "
        f"in snapshot {done[table.dotted]}"
        + (
            f"; {kept[table.dotted]} row(s) it wrote were since updated or deleted by later runs, left as they are"
            if table.dotted in kept
            else ""
        )
        + (
            f"; {len(files)} file(s) marked reverted in the ledger (`wap retry {run_id}` brings them back)"
            if files
            else ""
        ),
    }


FILES, LINEAGE, ROLLBACK = "files", "lineage", "rollback"  # how a table's part of a run comes off main


def _how(lh: Lakehouse, table: TableName, snaps: list[int]) -> str:
    """A merge or replace (commits other than appends: their added files hold rows the run only copied too,
    so removing them would lose other runs' rows) rolls back; an append goes by row lineage on a v3 table,
    by its files on a v2 one."""
    known = lh.tables.snapshots(table)
    if any(known[s].operation not in (None, "append") for s in snaps if s in known):
        return ROLLBACK
    return LINEAGE if lh.tables.current_format_version(table) >= LINEAGE_FROM_VERSION else FILES


def _revert_commit(lh: Lakehouse, table: TableName, run_id: str) -> int | None:
    """The snapshot on main that took run_id's rows off (a revert killed before it recorded it), if any."""
    lh.tables.refresh(table)
    for s in lh.tables.ancestry(lh.tables.snapshots(table), lh.tables.head(table, "main")):
        if s.summary.get(REVERTED_PROP) == run_id:
            return s.snapshot_id
        if s.run_id == run_id:
            return None
    return None


def _roll_back_change(lh: Lakehouse, table: TableName, run_id: str, snaps: list[int]) -> int:
    """A merge or replace is taken back by moving main to the snapshot before it, while nothing but
    maintenance rewrites (operation `replace`: compaction, the same rows in other files) came after it: later
    commits that changed rows may build on the rows it changed."""
    snapshots = lh.tables.snapshots(table)
    head = lh.tables.head(table)
    parent = snapshots[snaps[0]].parent_id
    after = lh.tables.ancestry(snapshots, head, stop=snaps[-1])
    changed_after = [s for s in after if s.operation != "replace"]
    if len(snaps) != 1 or changed_after or parent is None:
        raise UsageError(
            f"run {run_id} changed rows of {table} (a merge or replace), and main has moved on since "
            f"(its snapshot {snaps[-1]}, main at {head})",
            hint="a change other runs built on cannot be taken out alone: publish a correcting batch instead "
            f"(see `wap history {table}`)",
        )
    rewrites = f" (and the {len(after)} compaction(s) after it: the same rows)" if after else ""
    lh.progress(f"rolling main of {table} back to snapshot {parent}, before run {run_id}'s change{rewrites}")
    lh.tables.roll_back(table, parent)
    return parent


def _delete_by_lineage(lh: Lakehouse, t: TableName, run_id: str, seqs: list[int]) -> int:
    """An append on a v3 table: the rows its commits on main last wrote (their sequence numbers), by row
    lineage, wherever compaction moved them, even once its snapshots are expired (one new snapshot; a concurrent
    commit on main is kept: the delete is planned again)."""
    lh.progress(f"deleting run {run_id}'s rows from main of {t} by row lineage")

    def lost() -> None:
        lh.tables.refresh(t)

    return retry_on_conflict(
        lambda: lh.tables.delete_by_lineage(t, seqs, revert_properties(run_id)),
        what=f"deleting run {run_id}'s rows from main of {t}",
        on_conflict=lost,
        is_conflict=lambda e: spark_errors.commit_conflict(e) or spark_errors.concurrent_change(e),
        hint="main is unchanged; run `wap revert` again",
    )


def _remove_files(lh: Lakehouse, t: TableName, run_id: str, snaps: list[int]) -> int:
    """An append's exact files off main (one new snapshot); refused when maintenance rewrote them since."""
    lh.progress(f"removing run {run_id}'s files from main of {t}")
    try:
        return lh.tables.commits.remove_added_files(t, snaps, revert_properties(run_id))
    except Exception as e:
        if MISSING_FILES not in str(e):
            raise
        raise UsageError(
            f"run {run_id}'s files are no longer on main of {t} as it wrote them: `wap maintain` compacted "
            "them with other runs' rows (the run was published before [maintenance] revert_window)",
            hint="main is unchanged; revert_window sets how long runs stay revertable",
        ) from None


_STRATEGIES = {FILES: _remove_files, ROLLBACK: _roll_back_change}  # LINEAGE: _delete_by_lineage, by sequence numbers


def _rows_taken_off(lh: Lakehouse, table: TableName, snapshot_id: int, *, since: int | None = None) -> int:
    """The rows the revert's own commit took off main: its parent's live rows (or those of `since`, main's head
    before a rollback) less its own (Snapshot.rows), so neither a concurrent commit nor the rows deletion vectors
    had already hidden count in it."""
    lh.tables.refresh(table)
    snaps = lh.tables.snapshots(table)
    snap = snaps[snapshot_id]
    before = since if since is not None else snap.parent_id
    parent = snaps.get(before) if before is not None else None
    if parent is None or parent.rows is None or snap.rows is None:
        return int(snap.summary.get(DELETED_RECORDS) or snap.summary.get(ADDED_POSITION_DELETES) or 0)
    return parent.rows - snap.rows
