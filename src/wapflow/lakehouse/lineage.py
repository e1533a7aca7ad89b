"""Run lineage: which run wrote a snapshot (or a Nessie commit), written and read in this one place.

A run's commits carry its id, its files and their fingerprint as snapshot properties. Publishing may
re-apply a run's snapshots on a moved main (Iceberg's cherry-pick): the new snapshot then carries only
`source-snapshot-id`, naming the branch snapshot that holds the run's properties, so every reader follows
that link here. `wap revert` marks the snapshot that took a run's rows back off main.

Pure Python on purpose (no Spark, no catalog client): the dashboard reads lineage through pyiceberg
summaries, the pipeline through Spark's snapshots metadata table, with the same functions.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from wapflow.lakehouse.model import (
    APPROVAL_REASON_PROP,
    APPROVED_BY_PROP,
    BRANCH_PROP,
    FILES_HASH_PROP,
    REVERTED_PROP,
    RUN_ID_PROP,
    SOURCE_SNAPSHOT_PROP,
    SOURCES_PROP,
    TABLES_PROP,
    Snapshot,
)

if TYPE_CHECKING:
    from wapflow.lakehouse.reads import TableMetadata
    from wapflow.sql.identifiers import TableName

# The property keys (wapflow.lakehouse.model): RUN_ID_PROP, SOURCES_PROP and FILES_HASH_PROP on every snapshot
# a run commits, REVERTED_PROP on `wap revert`'s, APPROVED_BY_PROP and APPROVAL_REASON_PROP on an approved
# run's, TABLES_PROP and BRANCH_PROP on a Nessie merge commit; Iceberg sets SOURCE_SNAPSHOT_PROP on a
# cherry-pick.

# Property values travel in every commit's metadata: a run of thousands of files keeps a prefix only.
_TEXT_LIMIT = 4000

Summary = Mapping[str, str]


def files_fingerprint(ids: list[dict[str, Any]]) -> str:
    """One short hash of a set of file identities (uri, size, version): the FILES_HASH_PROP value."""
    rows = sorted([i["uri"], i.get("size"), i.get("version")] for i in ids)
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()[:32]


def run_properties(run_id: str, files: Iterable[str], fingerprint: str) -> dict[str, str]:
    """What every snapshot a run commits carries: its run id, its files and their fingerprint."""
    return {RUN_ID_PROP: run_id, SOURCES_PROP: ",".join(files)[:_TEXT_LIMIT], FILES_HASH_PROP: fingerprint}


def approval_properties(by: str, reason: str) -> dict[str, str]:
    """What the snapshot publishing an approved run carries besides its run properties."""
    return {APPROVED_BY_PROP: by[:_TEXT_LIMIT], APPROVAL_REASON_PROP: reason[:_TEXT_LIMIT]}


def approval_of(summary: Summary) -> tuple[str, str] | None:
    """(who, why) of an approved run's snapshot; None for a run published without review."""
    by = summary.get(APPROVED_BY_PROP)
    return (by, summary.get(APPROVAL_REASON_PROP, "")) if by else None


def revert_properties(run_id: str) -> dict[str, str]:
    """What the snapshot that takes run_id's rows back off main carries (the run may publish again after)."""
    return {REVERTED_PROP: run_id}


def merge_properties(run_id: str, tables: Iterable[TableName], branch: str) -> dict[str, str]:
    """What a Nessie merge commit publishing a run carries."""
    return {RUN_ID_PROP: run_id, TABLES_PROP: ",".join(t.dotted for t in tables)[:_TEXT_LIMIT], BRANCH_PROP: branch}


def with_properties(writer: Any, properties: Mapping[str, str]) -> Any:
    """A DataFrameWriterV2 whose commit carries these snapshot properties."""
    for k, v in properties.items():
        writer = writer.option(f"snapshot-property.{k}", v)
    return writer


def picked_from(summary: Summary) -> int | None:
    """The snapshot a cherry-picked snapshot was copied from; None for any other snapshot."""
    src = summary.get(SOURCE_SNAPSHOT_PROP)
    return int(src) if src is not None and src.isdigit() else None


def run_id_of(summary: Summary, summary_of: Callable[[int], Summary | None]) -> str | None:
    """The run that wrote a snapshot, following a cherry-pick to the snapshot it was picked from
    (summary_of: that snapshot's summary by id, None when the table no longer has it)."""
    if summary.get(RUN_ID_PROP):
        return summary[RUN_ID_PROP]
    src = picked_from(summary)
    origin = summary_of(src) if src is not None else None
    return origin.get(RUN_ID_PROP) if origin is not None else None


def origin(snaps: Mapping[int, Snapshot], snap: Snapshot) -> Snapshot | None:
    """The snapshot holding `snap`'s run properties: itself, or the one it was cherry-picked from (None
    when that one is gone)."""
    src = picked_from(snap.summary)
    return snap if src is None else snaps.get(src)


def run_of(snaps: Mapping[int, Snapshot], snap: Snapshot) -> str | None:
    """run_id_of for the snapshots of one table as Tables.snapshots returns them."""
    return run_id_of(snap.summary, lambda sid: snaps[sid].summary if sid in snaps else None)


def on_main(tables: TableMetadata, table: TableName, run_id: str) -> list[int]:
    """main's snapshots that hold run_id's rows (its own, or cherry-picks of them), newest first. Only what
    came after the run's latest revert counts (a reverted run may publish again)."""
    snaps = tables.snapshots(table)
    mine = {s.snapshot_id for s in snaps.values() if s.run_id == run_id}
    if not mine:
        return []
    out: list[int] = []
    for s in tables.ancestry(snaps, tables.head(table, "main")):
        if s.summary.get(REVERTED_PROP) == run_id:
            break
        if s.snapshot_id in mine or picked_from(s.summary) in mine:
            out.append(s.snapshot_id)
    return out


def runs_on_main(tables: TableMetadata, table: TableName, run_ids: Collection[str]) -> dict[str, list[int]]:
    """on_main for several runs in one walk of main's history: each run's snapshots there, newest first
    (runs with none are left out)."""
    snaps = tables.snapshots(table)
    wanted = set(run_ids)
    out: dict[str, list[int]] = {}
    reverted: set[str] = set()
    for s in tables.ancestry(snaps, tables.head(table, "main")):
        gone = s.summary.get(REVERTED_PROP)
        if gone in wanted:
            reverted.add(gone)
        run = run_of(snaps, s)
        if run in wanted and run not in reverted:
            out.setdefault(run, []).append(s.snapshot_id)
    return out


def find_published(tables: TableMetadata, table: TableName, run_id: str) -> int | None:
    """The main snapshot that carries run_id (directly, or as a cherry-pick of one of its snapshots); None
    also when a newer snapshot took the run's rows back off main (`wap revert`): it may publish again."""
    found = on_main(tables, table, run_id)
    return found[0] if found else None
