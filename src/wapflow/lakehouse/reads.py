"""What every reader of a table's metadata asks: refs, snapshots, heads and ancestry.

Two readers answer it: Spark's view (wapflow.lakehouse.tables.Tables) and the catalog's own, without a JVM
(wapflow.lakehouse.metadata.CatalogTables). History, lineage and branch listings take either as a
TableMetadata; both derive heads and ancestry from their refs and snapshots through SnapshotReads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from wapflow.lakehouse.model import Ref, Snapshot

if TYPE_CHECKING:
    from wapflow.audit.metrics import FileMetrics
    from wapflow.sql.identifiers import TableName


class TableMetadata(Protocol):
    """The read-only part of wapflow.lakehouse.tables.Tables: what history and branch listings need."""

    catalog: str

    def exists(self, table: TableName) -> bool: ...

    def snapshots(self, table: TableName) -> dict[int, Snapshot]: ...

    def refs(self, table: TableName) -> dict[str, Ref]: ...

    def head(self, table: TableName, branch: str = "main") -> int | None: ...

    def ancestry(self, snapshots: dict[int, Snapshot], head: int | None, stop: int | None = None) -> list[Snapshot]: ...

    def list_tables(self) -> list[TableName]: ...

    def added_file_metrics(self, table: TableName, branch: str, snapshot_ids: list[int]) -> FileMetrics: ...


class SnapshotReads:
    """What every reader of table metadata derives from refs and snapshots: heads and ancestry."""

    def refs(self, table: TableName) -> dict[str, Ref]:
        raise NotImplementedError

    def head(self, table: TableName, branch: str = "main") -> int | None:
        ref = self.refs(table).get(branch)
        return ref.snapshot_id if ref else None

    def ancestry(self, snapshots: dict[int, Snapshot], head: int | None, stop: int | None = None) -> list[Snapshot]:
        """Snapshots from head back to (not including) stop, newest first."""
        out: list[Snapshot] = []
        cur = head
        while cur is not None and cur != stop and cur in snapshots:
            out.append(snapshots[cur])
            cur = snapshots[cur].parent_id
        return out
