"""The lakehouse's Iceberg catalog, chosen once: one object that owns a run's sandbox (refs), the commit that
publishes it, and the reads of table metadata, as pyiceberg's load_catalog hands back a Catalog and nobody asks
which. `open_catalog` is the one place that reads the catalog's kind:

- Iceberg table branches (wapflow.lakehouse.branches.TableBranchCatalog: the embedded SQLite catalog, JDBC on
  PostgreSQL or SQLite, REST, Hive, Glue, Hadoop, custom): a table's commit through Iceberg's Java API in this
  process (or a Spark Connect server's statements), several tables in one JDBC transaction or one REST
  `transactions/commit` (wapflow.lakehouse.group_commit), metadata read from the JDBC tables or the REST API;
- Project Nessie's catalog-level branches (wapflow.lakehouse.nessie.NessieCatalog): one merge publishes every
  table, metadata read through Nessie's content API.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from pyspark.sql.types import StructField

    from wapflow.config import WapConfig
    from wapflow.lakehouse.metadata import CatalogTables
    from wapflow.lakehouse.model import Snapshot
    from wapflow.lakehouse.nessie import NessieClient
    from wapflow.lakehouse.reads import TableMetadata
    from wapflow.lakehouse.refs import AuditView, BranchInfo, Discarded, PublishedRun, RunSlice
    from wapflow.lakehouse.tables import Tables
    from wapflow.sql.identifiers import TableName
    from wapflow.storage import Storage


class Catalog(Protocol):
    """The lakehouse's Iceberg catalog: a run's sandbox (its branches), the commit that publishes it, and the
    reads of table metadata. Every operation the pipeline and the service need, for any catalog kind."""

    name: str  # the Spark catalog's name

    @property
    def spans_catalog(self) -> bool:
        """Whether one branch holds every table of the catalog (Nessie), not each table a branch of its own."""
        ...

    def why_not_together(self) -> str | None:
        """None when several tables can be published in one atomic commit (a multi-table run needs it); else
        why not. Raises UsageError when the catalog was asked and refuses (before anything is written)."""
        ...

    def check(self) -> None:
        """The catalog answers (a server down, a wrong URL or token: one clear error before Spark starts)."""
        ...

    def describe(self, branch: str) -> str:
        """How messages name the branch ("branch x", "Nessie branch x")."""
        ...

    def open(self, branch: str) -> bool:
        """Make sure the sandbox exists before anything is written in it; True when this call created it."""
        ...

    def exists(self, table: TableName, branch: str) -> bool: ...

    def create(self, table: TableName, branch: str) -> int | None:
        """The table's branch, ready for the run's appends; returns the snapshot they go on top of."""
        ...

    def tables_for(self, branch: str) -> Tables:
        """The tables as the sandbox sees them."""
        ...

    def iceberg_ref(self, branch: str) -> str:
        """The Iceberg ref of a table, inside tables_for(branch), that holds the run's rows."""
        ...

    def write_target(self, table: TableName, branch: str) -> str: ...

    def add_columns(self, table: TableName, branch: str, columns: list[StructField]) -> bool:
        """Add columns inside the sandbox only; False when the backend cannot (the caller stages the batch)."""
        ...

    def reset(self, table: TableName, branch: str, mine: Sequence[Snapshot]) -> None:
        """Take an unfinished write's snapshots `mine` (maybe none) of `table` out of the sandbox."""
        ...

    def discard(self, branch: str, tables: Sequence[TableName]) -> Discarded:
        """Drop the sandbox of these tables (a catalog-level branch goes with every table on it)."""
        ...

    def commit(
        self,
        branch: str,
        run_id: str,
        slices: Sequence[RunSlice],
        *,
        atomic: bool,
        after_each: Callable[[RunSlice], None] | None = None,
    ) -> PublishedRun:
        """Move every slice's table's main to the run's audited rows, then drop the sandbox: `atomic`, in one
        commit of every table or none (a JVM commit can move one table only: a JDBC transaction, a REST
        `transactions/commit` or a Nessie merge); else table by table in the slices' order. A merge or replace
        on a moved main raises MainMoved: nothing committed."""
        ...

    def audit_view(self, table: TableName, branch: str, base: int | None, group: Sequence[TableName] = ()) -> AuditView:
        """`group`: the other tables of a multi-table run, read as the sandbox holds them."""
        ...

    def list(self, table: TableName) -> list[BranchInfo]:
        """Branches holding changes to this table."""
        ...

    def all_branches(self) -> builtins.list[BranchInfo]: ...

    # --- metadata reads (wapflow.lakehouse.catalog_reads) ------------------------------------------

    def direct(self, ref: str = "main") -> CatalogTables | None:
        """Table metadata read from the catalog with no JVM (None where only Spark reads it here)."""
        ...

    def metadata(self, ref: str = "main") -> TableMetadata:
        """Table metadata: direct where it can be, else Spark's view."""
        ...

    def file_metrics(self) -> TableMetadata:
        """Where the column metrics of added data files are read."""
        ...

    def list_branches(self, table: TableName | None = None) -> builtins.list[BranchInfo]:
        """Branches other than main (of one table, or all), without Spark where the catalog is read directly."""
        ...

    def sandbox_left(self, branch: str, tables: Sequence[TableName], staging: TableName | None) -> bool:
        """Whether a run's sandbox may hold anything to drop (False only when the catalog's metadata, read
        with no JVM, shows nothing): its branch on one of its tables, or its staging table."""
        ...


def open_catalog(
    cfg: WapConfig,
    storage: Storage,
    *,
    tables: Callable[[], Tables],
    nessie: Callable[[], NessieClient],
    progress: Callable[[str], None],
) -> Catalog:
    """This lakehouse's catalog (`tables`: Spark's view, started on first need; `nessie`: the Nessie client)."""
    if cfg.lakehouse.catalog == "nessie":
        from wapflow.lakehouse.nessie import NessieCatalog

        return NessieCatalog(cfg, storage, tables, nessie())
    from wapflow.lakehouse.branches import TableBranchCatalog

    return TableBranchCatalog(cfg, storage, tables, progress=progress)
