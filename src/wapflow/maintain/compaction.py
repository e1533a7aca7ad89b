"""The compact action of a maintenance pass: rewrite_data_files, kept clear of the runs within revert_window.

On a v2 table, files of runs published within `revert_window` are never rewritten: the rewrite runs on a branch
made at main's newest snapshot before the window, and the same file swap is then committed on main (Iceberg's
RewriteFiles, through its Java API: a Spark Connect client and Nessie skip it, saying why). A v3 table is
compacted whole (row lineage). TableMaintenance (wapflow.maintain.run) inherits this class.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from wapflow.lakehouse.model import LINEAGE_FROM_VERSION, MAINTENANCE_PROP
from wapflow.maintain.plan import DELETE_RATIO, DataFile, plan_compaction
from wapflow.maintain.table import MaintainedTable
from wapflow.spark import errors as spark_errors
from wapflow.sql.identifiers import quote, sql_string, validate_branch
from wapflow.vocabulary import MAINTAIN_BRANCH_PREFIX


def _iterate(java_iterable: Any) -> Iterator[Any]:
    it = java_iterable.iterator()
    while it.hasNext():
        yield it.next()


class Compaction(MaintainedTable):
    """The compact action (and what it needs: the revert window's edge, main's data files, the swap on main)."""

    def _edge(self) -> tuple[int | None, int | None]:
        """(main's head, main's newest snapshot before the revert window): files added after the edge
        belong to runs that must stay revertable and are not compacted. On a v3 table the edge is the head:
        `wap revert` finds a run's rows by row lineage wherever compaction moved them."""
        tables = self.lh.tables
        snaps = tables.snapshots(self.t)
        head = tables.head(self.t, "main")
        if head is not None and tables.current_format_version(self.t) >= LINEAGE_FROM_VERSION:
            return head, head
        window = timedelta(seconds=self.cfg.seconds("revert_window") or 0)
        start = self.now_local - window
        for s in tables.ancestry(snaps, head):
            if s.committed_at < start or window.total_seconds() == 0:
                return head, s.snapshot_id
        return head, None

    def _data_files(self, as_of: int) -> list[DataFile]:
        """main's data files as of a snapshot: size, partition, rows, and rows its deletion vector deletes (v3:
        a DV names its data file; v2 position delete files may span several and are not counted)."""
        df = self.spark.sql(f"SELECT * FROM {self.t.metadata_sql(self.lh.catalog, 'data_files')} VERSION AS OF {as_of}")
        part = "partition" in df.columns
        cols = ["file_path", "file_size_in_bytes", "record_count"] + (["partition"] if part else [])
        deletes = self.spark.sql(
            f"SELECT * FROM {self.t.metadata_sql(self.lh.catalog, 'delete_files')} VERSION AS OF {as_of}"
        )
        deleted: dict[str, int] = {}
        if "referenced_data_file" in deletes.columns:
            for r in (
                deletes.where("referenced_data_file IS NOT NULL")
                .select("referenced_data_file", "record_count")
                .collect()
            ):
                deleted[str(r[0])] = deleted.get(str(r[0]), 0) + int(r[1])
        return [
            DataFile(
                int(r["file_size_in_bytes"]),
                str(r["partition"]) if part else "",
                rows=int(r["record_count"]),
                deleted=deleted.get(str(r["file_path"]), 0),
            )
            for r in df.select(*cols).collect()
        ]

    def compact(self) -> dict[str, Any]:
        self.lh.tables.refresh(self.t)
        head, edge = self._edge()
        if head is None:
            return {"skipped": "the table has no snapshot yet"}
        if edge is None:
            return {"skipped": "every snapshot of main is within revert_window: its runs stay revertable"}
        strategy = "sort" if "sort-order" in self._table_properties() else "binpack"
        plan = plan_compaction(
            self._data_files(edge), target=self.cfg.target_file_size, min_input_files=self.cfg.min_input_files
        )
        figures: dict[str, Any] = {
            "strategy": strategy,
            "as_of": edge,
            "planned_files": plan["files"],
            "planned_bytes": plan["bytes"],
            "planned_files_after": plan["files_after"],
        }
        if edge != head:
            figures["left_for_revert_window"] = f"files added after snapshot {edge} (runs within revert_window)"
            why_not = self._no_swap_on_main()
            if why_not:
                return {**figures, "skipped": why_not, "rewritten_data_files": 0}
        if plan["files"] == 0:
            return {**figures, "skipped": "no small files to compact", "rewritten_data_files": 0}
        if self.dry_run:
            return figures
        options = {
            "target-file-size-bytes": str(self.cfg.target_file_size),
            "min-input-files": str(self.cfg.min_input_files),
            "delete-ratio-threshold": str(DELETE_RATIO),
        }
        opts = ", ".join(f"{sql_string(k)}, {sql_string(v)}" for k, v in options.items())
        args = f"table => {self._table_arg()}, strategy => {sql_string(strategy)}, options => map({opts})"
        if edge == head:
            row = self._retrying(lambda: self._call("rewrite_data_files", args))[0]
        else:
            row = self._compact_before_window(edge, args)
        figures.update(
            rewritten_data_files=int(row["rewritten_data_files_count"]),
            added_data_files=int(row["added_data_files_count"]),
            rewritten_bytes=int(row["rewritten_bytes_count"]),
            conflicts_retried=self.conflicts,
        )
        return figures

    def _no_swap_on_main(self) -> str | None:
        """Why main's files before the revert window cannot be compacted here (None: they can). That takes
        a rewrite on an Iceberg branch of the table and a file swap on main through Iceberg's Java API."""
        if self.on_nessie:
            how, other = "a rewrite on an Iceberg branch of the table, which wapflow does not make on Nessie", ""
        elif not self.java:
            how = "Iceberg's Java API (a file swap on main), which a Spark Connect client does not have"
            other = " or by `wap maintain` with a local master"
        else:
            return None
        return (
            f"main has runs within revert_window; compacting only the files before them needs {how}: "
            f"compacted once those runs are older than revert_window{other}"
        )

    def _compact_before_window(self, edge: int, args: str) -> Any:
        """Rewrite main's files as of `edge` on a branch of this pass, then swap the same files on main."""
        branch = validate_branch(MAINTAIN_BRANCH_PREFIX + self.pass_id)
        self._short_commit(
            lambda: self.spark.sql(f"ALTER TABLE {self.ident} CREATE BRANCH {quote(branch)} AS OF VERSION {int(edge)}")
        )
        try:
            row = self._call("rewrite_data_files", f"{args}, branch => {sql_string(branch)}")[0]
            self.lh.tables.refresh(self.t)
            rewritten = self.lh.tables.head(self.t, branch)
            if rewritten is not None and rewritten != edge:
                try:
                    self._short_commit(lambda: self._swap_on_main(edge, int(rewritten)))
                except Exception as e:
                    if "Missing required files to delete" not in spark_errors.full_text(e):
                        raise
                    # A file of the rewrite left main meanwhile (a revert): nothing swapped; the rewritten
                    # files are orphans for a later pass, and the next pass compacts again.
                    self.lh.progress(f"{self.t}: main changed under the compaction; nothing swapped")
                    return {**row.asDict(), "added_data_files_count": 0, "rewritten_data_files_count": 0}
            return row
        finally:
            self._drop(branch)

    def _swap_on_main(self, edge: int, rewritten: int) -> None:
        jt = self._jtable()
        snap = jt.snapshot(rewritten)
        op = jt.newRewrite()
        for f in _iterate(snap.removedDataFiles(jt.io())):
            op.deleteFile(f)
        for f in _iterate(snap.addedDataFiles(jt.io())):
            op.addFile(f)
        op.dataSequenceNumber(jt.snapshot(edge).sequenceNumber())  # the rows are as old as the edge's
        op.validateFromSnapshot(edge)
        op.set(MAINTENANCE_PROP, self.pass_id)
        op.commit()
