"""Iceberg's table vocabulary as wapflow reads and writes it: snapshots, refs, and the property keys.

A leaf (an import-linter contract keeps it one): it imports nothing of wapflow, so any module, of any layer,
may name a snapshot or a property key without pulling in Spark, the catalog clients or a type-only import
ring. One owner per key: grep here before writing a key's text anywhere else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

# --- snapshot properties wapflow writes (see wapflow.lakehouse.lineage for their meaning) -------------------

RUN_ID_PROP = "wapflow.run-id"
SOURCES_PROP = "wapflow.sources"  # the run's file URIs, comma-separated (cut at lineage's text limit)
FILES_HASH_PROP = "wapflow.files-sha256"  # fingerprint of the run's file identities (uri, size, version)
REVERTED_PROP = "wapflow.reverted-run-id"  # on the snapshot that took a run's rows back off main
# A Nessie merge commit's properties: the run (RUN_ID_PROP), the tables it published and the branch merged.
TABLES_PROP = "wapflow.tables"
BRANCH_PROP = "wapflow.branch"
# A run held for review and approved: who approved it and why (on the snapshot main is published to).
APPROVED_BY_PROP = "wapflow.approved-by"
APPROVAL_REASON_PROP = "wapflow.approval-reason"
MAINTENANCE_PROP = "wapflow.maintenance-pass"  # on the snapshot maintenance commits on main
# On every commit a Spark Declarative Pipelines run made (wapflow.sdp): the wapflow run it belongs to.
PIPELINE_RUN_PROP = "wapflow.pipeline-run-id"
# A table created in a session with this catalog setting gets the property (write.wap.enabled for SDP's tables).
TABLE_DEFAULT_PREFIX = "table-default."
# On a model's commits, one per table it read: the snapshot of that table it read up to (incremental models).
MODEL_INPUT_PROP_PREFIX = "wapflow.model-input."
# A stream's batch (wapflow.streams), as Iceberg's own streaming sink records it (SparkWrite.BaseStreamingWrite):
# the query's id and the batch's; publish_every: the batches one run published (first-last), the last of them
# in EPOCH_ID_PROP. SNAPSHOT_PROPERTY_CONF: the session settings Iceberg's SparkWriteConf adds to each snapshot.
QUERY_ID_PROP = "spark.sql.streaming.queryId"
EPOCH_ID_PROP = "spark.sql.streaming.epochId"
BATCHES_PROP = "wapflow.stream.batches"
SNAPSHOT_PROPERTY_CONF = "spark.sql.iceberg.snapshot-property."


def snapshot_property_confs(properties: dict[str, str] | Any) -> dict[str, str]:
    """Session settings that give the next SQL write's commit these snapshot properties (SQL commands take them
    from the session's conf; a DataFrame writer's own options win over it, so concurrent appends keep theirs)."""
    return {SNAPSHOT_PROPERTY_CONF + k: v for k, v in dict(properties).items()}


# --- snapshot summary keys Iceberg writes -----------------------------------------------------------------

SOURCE_SNAPSHOT_PROP = "source-snapshot-id"  # on cherry-picked snapshots: the snapshot picked
ADDED_RECORDS = "added-records"
DELETED_RECORDS = "deleted-records"
TOTAL_RECORDS = "total-records"
ADDED_DATA_FILES = "added-data-files"
DELETED_DATA_FILES = "deleted-data-files"  # files a commit took off (copy-on-write rewrites, replaced partitions)
ADDED_POSITION_DELETES = "added-position-deletes"  # rows a merge-on-read commit deleted (deletion vectors)
# Rows the table's live delete files (v3 deletion vectors, v2 position deletes) take off its data files: each names
# one row, so total-records minus it is what a reader of the snapshot gets (Snapshot.rows). Iceberg drops a data
# file's deletion vector with the file (compaction, copy-on-write), so it never counts a row twice.
TOTAL_POSITION_DELETES = "total-position-deletes"

# --- table properties -------------------------------------------------------------------------------------

FORMAT_VERSION_PROP = "format-version"
DEFAULT_FORMAT_VERSION = 2  # what a table is created with when nothing says otherwise ([lakehouse] format_version)
FORMAT_VERSIONS = (2, 3)  # what wapflow creates, upgrades to and runs WAP on
WAP_ENABLED_PROP = "write.wap.enabled"
# Old metadata.json files go after each commit, keeping this many (`wap maintain`: [maintenance]
# metadata_versions_max).
METADATA_DELETE_AFTER_COMMIT_PROP = "write.metadata.delete-after-commit.enabled"
METADATA_PREVIOUS_VERSIONS_MAX_PROP = "write.metadata.previous-versions-max"
METRICS_DEFAULT_PROP = "write.metadata.metrics.default"
DISTRIBUTION_MODE_PROP = "write.distribution-mode"
DATA_PATH_PROP = "write.data.path"
NAME_MAPPING_PROP = "schema.name-mapping.default"  # columns by name in files without Iceberg field ids
# How a row-level change (MERGE, UPDATE, DELETE) writes: "copy-on-write" rewrites every file it touches;
# "merge-on-read" writes the changed rows and, on a v3 table, one deletion vector per touched file.
ROW_CHANGE_MODE_PROPS = ("write.merge.mode", "write.update.mode", "write.delete.mode")
MERGE_ON_READ = "merge-on-read"
MERGE_ON_READ_FROM_VERSION = 3  # wapflow makes v3 tables merge-on-read (deletion vectors); v2 stays copy-on-write
# From v3 every row carries its lineage (`_row_id`, `_last_updated_sequence_number`), kept through compaction:
# a run's appended rows are found by it (`wap revert`), so compaction need not wait for revert_window.
LINEAGE_FROM_VERSION = 3


# A DELETE's isolation: "serializable" (Iceberg's default) also fails when a concurrent append adds files its
# condition might match; a condition Iceberg cannot read (a revert's, on row lineage) matches every file, so a
# steady stream of appends would starve it. "snapshot" deletes what the table held when it started, still
# failing on a concurrent delete or rewrite of the same files.
DELETE_ISOLATION_PROP = "write.delete.isolation-level"


def row_change_properties(format_version: int) -> dict[str, str]:
    """The row-level write settings wapflow gives a table it creates or upgrades to `format_version`: on v3,
    merge-on-read (a merge writes its changed rows and a deletion vector per touched file, not the whole
    files: docs/guides/format-v3.md) and snapshot isolation for DELETE (a revert by row lineage is not
    starved by appends: its rows carry its own sequence numbers, which no later commit can add); on v2, none
    (Iceberg's copy-on-write default: v2 position delete files slow every read until compacted, and older
    readers mishandle them)."""
    if format_version < MERGE_ON_READ_FROM_VERSION:
        return {}
    return {**dict.fromkeys(ROW_CHANGE_MODE_PROPS, MERGE_ON_READ), DELETE_ISOLATION_PROP: "snapshot"}


# --- value types ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Snapshot:
    snapshot_id: int
    parent_id: int | None
    committed_at: datetime
    operation: str | None
    summary: dict[str, str] = field(default_factory=dict)
    # The commit's sequence number: on a v3 table, the `_last_updated_sequence_number` of every row this
    # snapshot wrote (row lineage, kept through compaction). From the metadata JSON only: Spark's `snapshots`
    # metadata table lacks it (None there; revert reads it from `all_entries`), so two views of one snapshot
    # compare equal without it.
    sequence_number: int | None = field(default=None, compare=False)

    @property
    def run_id(self) -> str | None:
        """The run that committed this snapshot itself (a cherry-pick's run: lineage.run_of)."""
        return self.summary.get(RUN_ID_PROP)

    @property
    def added_records(self) -> int:
        return int(self.summary.get(ADDED_RECORDS, "0") or 0)

    @property
    def rows(self) -> int | None:
        """The rows a reader of this snapshot gets: total-records less the rows deletion vectors (and v2
        position deletes) remove; total-records alone counts those again on a merge-on-read (v3) table. None
        when the summary has no total (a snapshot written without one)."""
        return rows_of(self.summary)


@dataclass(frozen=True)
class Ref:
    name: str
    type: str
    snapshot_id: int


def rows_of(summary: Mapping[str, str] | None) -> int | None:
    """Snapshot.rows from a summary alone (None without total-records)."""
    total = (summary or {}).get(TOTAL_RECORDS)
    if total in (None, ""):
        return None
    return int(total) - int((summary or {}).get(TOTAL_POSITION_DELETES) or 0)


def rows_at(snapshots: Mapping[int, Snapshot], snapshot_id: int | None) -> int | None:
    """Snapshot.rows, also for a snapshot whose summary has no total: Iceberg leaves total-records out after a
    delete of every file (a Spark Declarative Pipelines refresh truncates, then appends). Then the nearest
    ancestor's total, plus the records each commit since added, less those it deleted; None if none has one."""
    chain: list[Snapshot] = []
    cur = snapshot_id
    total: int | None = None
    while cur is not None and cur in snapshots:
        snap = snapshots[cur]
        if snap.rows is not None:
            total = snap.rows
            break
        chain.append(snap)
        cur = snap.parent_id
    else:
        total = 0 if chain and chain[-1].parent_id is None else None  # the first snapshot starts from nothing
    if total is None:
        return None
    for snap in reversed(chain):
        sm = snap.summary
        total += int(sm.get(ADDED_RECORDS) or 0) - int(sm.get(DELETED_RECORDS) or 0)
        total -= int(sm.get(ADDED_POSITION_DELETES) or 0)
    return total


def snapshots_of(meta: dict[str, Any]) -> dict[int, Snapshot]:
    """The snapshots of a table's metadata as Iceberg writes it (TableMetadataParser's JSON): the one parser of
    it, for Spark's view (Tables) and the catalog's own (wapflow.lakehouse.metadata)."""
    out: dict[int, Snapshot] = {}
    for s in meta.get("snapshots") or []:
        summary = {str(k): str(v) for k, v in (s.get("summary") or {}).items()}
        operation = summary.pop("operation", None)
        sid = int(s["snapshot-id"])
        parent = s.get("parent-snapshot-id")
        when = datetime.fromtimestamp(int(s["timestamp-ms"]) / 1000)  # naive local, as Spark returns it
        seq = s.get("sequence-number")
        out[sid] = Snapshot(
            sid, int(parent) if parent is not None else None, when, operation, summary, int(seq) if seq else None
        )
    return out


def refs_of(meta: dict[str, Any]) -> dict[str, Ref]:
    """The refs of a table's metadata JSON; main from current-snapshot-id when a v1 table has no refs."""
    refs = dict(meta.get("refs") or {})
    current = meta.get("current-snapshot-id")
    if "main" not in refs and current is not None and int(current) != -1:
        refs["main"] = {"snapshot-id": current, "type": "branch"}
    return {
        str(n): Ref(str(n), str(r["type"]).upper(), int(r["snapshot-id"]))
        for n, r in refs.items()
        if r.get("snapshot-id") is not None
    }
