"""Publish: move main to the audited rows without rewriting data, and never twice.

Fast-forward when main has not moved since the branch was created; otherwise re-apply the run's
append snapshots on top of main (cherry-pick), so a concurrent run's rows are kept. Both are
metadata-only commits.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

from wapflow.errors import PublishConflict
from wapflow.lakehouse.tables import REVERTED_PROP, SOURCE_SNAPSHOT_PROP, Snapshot, Tables
from wapflow.spark import errors as spark_errors
from wapflow.sql.identifiers import TableName

_RETRIES = 4


@dataclass(frozen=True)
class Published:
    snapshot_id: int
    method: str  # "fast_forward" | "cherry_pick" | "already"


class MainMover(Protocol):
    """What moving one table's main needs: Iceberg's fast_forward and cherrypick_snapshot procedures."""

    def fast_forward(self, table: TableName, branch: str) -> int: ...
    def cherry_pick(self, table: TableName, snapshot_id: int) -> int: ...


def find_published(tables: Tables, table: TableName, run_id: str) -> int | None:
    """The main snapshot that carries run_id (directly, or as a cherry-pick of one of its snapshots); None
    also when a newer snapshot took the run's rows back off main (`wap revert`): it may publish again."""
    snaps = tables.snapshots(table)
    run_snaps = {s.snapshot_id for s in snaps.values() if s.run_id == run_id}
    if not run_snaps:
        return None
    for s in tables.ancestry(snaps, tables.head(table, "main")):
        if s.summary.get(REVERTED_PROP) == run_id:
            return None
        if s.snapshot_id in run_snaps:
            return s.snapshot_id
        src = s.summary.get(SOURCE_SNAPSHOT_PROP)
        if src is not None and src.isdigit() and int(src) in run_snaps:
            return s.snapshot_id
    return None


def _message(e: BaseException) -> str:
    return spark_errors.describe(e)


def _is_commit_conflict(e: BaseException) -> bool:
    text = str(e)
    return "CommitFailedException" in text or "Commit failed" in text or "SQLITE_BUSY" in text


def publish(
    backend: MainMover, tables: Tables, table: TableName, branch: str, run_snapshots: list[Snapshot]
) -> Published:
    """run_snapshots: the run's snapshots on the branch, oldest first."""
    for attempt in range(_RETRIES):
        try:
            return Published(backend.fast_forward(table, branch), "fast_forward")
        except Exception as e:
            if "not an ancestor" in str(e):
                break
            if _is_commit_conflict(e) and attempt < _RETRIES - 1:
                tables.refresh(table)
                time.sleep(0.2 * (attempt + 1))
                continue
            # A named condition (commit conflict after the retries, unreachable storage, ...) says what
            # to do; anything else propagates for the caller to report as a bug of this run and step.
            known = spark_errors.classify(e, doing=f"fast-forwarding main of {table} to {branch}")
            if known is not None:
                raise known from e
            raise
    # main moved since the branch was created: re-apply this run's appends on top of it.
    not_appends = [s for s in run_snapshots if s.operation != "append"]
    if not_appends:
        ops = ", ".join(f"{s.snapshot_id} ({s.operation})" for s in not_appends)
        raise PublishConflict(
            f"main of {table} moved since branch {branch} was created, and snapshots {ops} are not appends, "
            "so they cannot be re-applied on top of it",
            hint=f"inspect the branch (wap query ... --branch {branch}), then re-run the files on a fresh branch",
        )
    current = None
    for s in run_snapshots:
        for attempt in range(_RETRIES):
            try:
                current = backend.cherry_pick(table, s.snapshot_id)
                break
            except Exception as e:
                if _is_commit_conflict(e) and attempt < _RETRIES - 1:
                    tables.refresh(table)
                    time.sleep(0.2 * (attempt + 1))
                    continue
                known = spark_errors.classify(e, doing=f"re-applying snapshot {s.snapshot_id} onto main of {table}")
                if known is not None:
                    raise known from e
                raise PublishConflict(
                    f"could not re-apply snapshot {s.snapshot_id} of branch {branch} onto main of {table}: "
                    f"{_message(e)}",
                    hint=f"main is unchanged by this run and the branch {branch} is kept: inspect it "
                    f"(wap query ... --branch {branch}), then re-run the files on a fresh branch",
                ) from e
    assert current is not None
    return Published(current, "cherry_pick")
