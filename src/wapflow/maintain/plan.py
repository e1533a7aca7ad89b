"""What maintenance may remove, decided in pure Python from a table's snapshots, refs and the run store.

The one rule of this module: never expire what wapflow still needs. Kept, with the reason shown by
`wap maintain --dry-run`:

- every ref's head (Iceberg refuses otherwise);
- main's newest `keep_last` snapshots, and all of main's history newer than the older of
  `expire_older_than` and `revert_window`: on a v2 table `wap revert` walks main's history from its head
  back to a run's snapshot, so that history is kept whole, never with holes. On a v3 table
  (`history_for_revert` False) revert_window keeps only main's latest change other than an append (a merge:
  rolled back to its parent) with what came after it: an append's rows are found by the row lineage its record
  keeps, and an idempotent re-run by its record (`_expired_publish`), so main's history costs each commit no
  more than `expire_older_than` asks;
- the snapshots of runs recorded as still running (`unsettled`): a run killed between its commit on main
  and its record finds its rows on main when resumed, and publishes nothing twice;
- each other branch's snapshots back to where it left main, that point included (a blocked run's
  report, resume and `wap retry` read its rows as the increment from that base);
- the snapshot a kept snapshot was cherry-picked from (it carries the run's id: `lineage.run_of`);
- any snapshot newer than `expire_older_than`.

Everything else is expired by id (`expire_snapshots(snapshot_ids => ...)`), so a dry run lists exactly what
a real run removes.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from wapflow.lakehouse.lineage import picked_from, run_of
from wapflow.lakehouse.model import Ref, Snapshot
from wapflow.runs.store import RunRecord
from wapflow.vocabulary import KEPT_STATUSES, table_of_quarantine


@dataclass
class ExpiryPlan:
    expire: list[int]  # snapshot ids to expire, oldest first
    keep: dict[int, str] = field(default_factory=dict)  # snapshot id -> why it stays

    def to_dict(self) -> dict[str, object]:
        reasons: dict[str, int] = {}
        for why in self.keep.values():
            reasons[why] = reasons.get(why, 0) + 1
        return {"expire": len(self.expire), "keep": len(self.keep), "kept_because": reasons}


def _chain(snaps: Mapping[int, Snapshot], head: int | None) -> list[Snapshot]:
    out: list[Snapshot] = []
    cur = head
    while cur is not None and cur in snaps:
        out.append(snaps[cur])
        cur = snaps[cur].parent_id
    return out


def _keep_latest_change(chain: list[Snapshot], keep: dict[int, str], since: datetime) -> None:
    """v3: a merge or replace is reverted by rolling main back to the snapshot before it, while only
    compactions (`replace`: the same rows) came after it; so main's newest change other than an append, when it
    is within revert_window, is kept with its parent and the compactions after it. Appends need no snapshot."""
    for i, s in enumerate(chain):
        if s.operation == "replace":
            continue
        if s.operation not in (None, "append") and s.committed_at >= since:
            for kept in chain[: i + 2]:
                keep.setdefault(kept.snapshot_id, "the latest change, revertable by rollback within revert_window")
        return


def plan_expiry(
    snaps: Mapping[int, Snapshot],
    refs: Mapping[str, Ref],
    *,
    now: datetime,
    expire_older_than: timedelta,
    keep_last: int,
    revert_window: timedelta,
    history_for_revert: bool = True,
    unsettled: Collection[str] = (),
) -> ExpiryPlan:
    """The snapshots to expire and why each other one stays (`now`: the same clock as the snapshots' times)."""
    cutoff = now - expire_older_than
    history_cutoff = now - max(expire_older_than, revert_window if history_for_revert else timedelta(0))
    keep: dict[int, str] = {}
    for r in refs.values():
        keep.setdefault(r.snapshot_id, f"head of {r.type.lower()} {r.name}")
    if unsettled:
        for s in snaps.values():
            run = run_of(snaps, s)
            if run is not None and run in unsettled:
                keep.setdefault(s.snapshot_id, f"run {run} is still recorded running")
    main = refs.get("main")
    on_main: set[int] = set()
    if main is not None:
        chain = _chain(snaps, main.snapshot_id)
        on_main = {s.snapshot_id for s in chain}
        for i, s in enumerate(chain):
            if i < keep_last:
                keep.setdefault(s.snapshot_id, "keep_last")
            elif s.committed_at >= cutoff:
                keep.setdefault(s.snapshot_id, "newer than expire_older_than")
            elif s.committed_at >= history_cutoff:
                keep.setdefault(s.snapshot_id, "within revert_window")
            else:
                break  # everything older on main goes: main's history stays one piece
        if not history_for_revert:
            _keep_latest_change(chain, keep, now - revert_window)
    for r in refs.values():
        if r.name == "main" or r.type != "BRANCH":
            continue
        for s in _chain(snaps, r.snapshot_id):
            keep.setdefault(s.snapshot_id, f"on branch {r.name}")
            if s.snapshot_id in on_main:
                break  # where the branch left main: its base
    for sid in list(keep):
        src = picked_from(snaps[sid].summary) if sid in snaps else None
        if src is not None and src in snaps:
            keep.setdefault(src, f"run lineage of snapshot {sid}")
    for s in snaps.values():
        if s.snapshot_id not in keep and s.committed_at >= cutoff:
            keep[s.snapshot_id] = "newer than expire_older_than"
    expire = sorted((s for s in snaps.values() if s.snapshot_id not in keep), key=lambda s: s.committed_at)
    return ExpiryPlan([s.snapshot_id for s in expire], keep)


def _utc(when: datetime) -> datetime:
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def stale_branches(
    table: str,
    branches: Iterable[str],
    runs_by_branch: Mapping[str, list[RunRecord]],
    *,
    now: datetime,
    keep_blocked_for: timedelta,
) -> list[tuple[str, RunRecord]]:
    """Branches of `table` kept for inspection by a blocked or failed run that ended more than
    `keep_blocked_for` ago: (branch, its newest run). A branch no run of this table (or of the table whose
    quarantine it is) kept, or one a newer run still uses, is never touched."""
    base = table_of_quarantine(table)
    out: list[tuple[str, RunRecord]] = []
    for name in branches:
        runs = [r for r in runs_by_branch.get(name, []) if r.table_name in (table, base)]
        if not runs:
            continue
        newest = max(runs, key=lambda r: _utc(r.started_at))
        if newest.status not in KEPT_STATUSES or not newest.branch_kept:
            continue
        ended = _utc(newest.finished_at or newest.started_at)
        if now - ended >= keep_blocked_for:
            out.append((name, newest))
    return out


@dataclass(frozen=True)
class DataFile:
    size: int
    partition: str  # the partition as text ("" unpartitioned): compaction groups files per partition
    rows: int = 0  # the rows in the file
    deleted: int = 0  # of those, rows its deletion vector deletes (merge-on-read changes on a v3 table)

    @property
    def mostly_deleted(self) -> bool:
        return self.rows > 0 and self.deleted / self.rows >= DELETE_RATIO


# A file whose deletes reach this share of its rows is rewritten whatever its size: Iceberg's own default
# (`delete-ratio-threshold`), so every read stops paying for them; below it, rewriting a large file to drop a
# few rows costs more than reading past them.
DELETE_RATIO = 0.3


def plan_compaction(files: Iterable[DataFile], *, target: int, min_input_files: int) -> dict[str, int]:
    """What bin-pack compaction would rewrite, estimated as Iceberg's planner does by default: per
    partition, files under 75% or over 180% of the target size, when there are at least `min_input_files`
    of them (or they add up to more than the target), and any file with deletes over DELETE_RATIO. An
    estimate for the dry run; the real figures come from the procedure's own result."""
    groups: dict[str, list[int]] = {}
    deletes: set[str] = set()
    for f in files:
        if f.size < 0.75 * target or f.size > 1.8 * target or f.mostly_deleted:
            groups.setdefault(f.partition, []).append(f.size)
        if f.mostly_deleted:
            deletes.add(f.partition)
    files_n = bytes_n = out_n = 0
    for part, sizes in groups.items():
        total = sum(sizes)
        if len(sizes) >= min_input_files or (len(sizes) > 1 and total > target) or part in deletes:
            files_n += len(sizes)
            bytes_n += total
            out_n += max(1, -(-total // target))
    return {"files": files_n, "bytes": bytes_n, "files_after": out_n}
