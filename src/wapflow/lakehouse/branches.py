"""Where a run's rows wait for their audit: a branch backend.

One seam, because branching really varies: Iceberg table-level branches (this module) sandbox one
table; catalog-level branches (Project Nessie, wapflow.lakehouse.nessie) sandbox the whole catalog.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

from wapflow.lakehouse import spark_errors
from wapflow.lakehouse.identifiers import TableName, quote, sql_string, validate_branch
from wapflow.lakehouse.tables import Tables

if TYPE_CHECKING:
    pass

_RETRIES = 5
T = TypeVar("T")


@dataclass(frozen=True)
class BranchInfo:
    table: TableName
    name: str
    head: int


class BranchBackend(Protocol):
    def create(self, table: TableName, branch: str) -> int | None: ...
    def exists(self, table: TableName, branch: str) -> bool: ...
    def head(self, table: TableName, branch: str) -> int | None: ...
    def drop(self, table: TableName, branch: str) -> None: ...
    def write_target(self, table: TableName, branch: str) -> str: ...
    def fast_forward(self, table: TableName, branch: str) -> int: ...
    def cherry_pick(self, table: TableName, snapshot_id: int) -> int: ...
    def list(self, table: TableName) -> list[BranchInfo]: ...
    # Where a run's rows live: a Tables view for the branch, and the Iceberg ref inside it.
    def tables_for(self, branch: str) -> Tables: ...
    def iceberg_ref(self, branch: str) -> str: ...


class IcebergTableBranches:
    """Branches of a single Iceberg table (ALTER TABLE ... CREATE BRANCH, fast_forward, cherrypick)."""

    catalog_level = False

    def __init__(self, tables: Tables) -> None:
        self.tables = tables
        self.spark = tables.spark
        self.catalog = tables.catalog

    def _committing(self, table: TableName, fn: Callable[[], T]) -> T:
        """Run a metadata commit; when another process committed to the table since this process cached its
        metadata (Iceberg's CommitFailedException), refresh and try again."""
        for attempt in range(_RETRIES):
            try:
                return fn()
            except Exception as e:
                if "CommitFailedException" not in spark_errors.full_text(e) or attempt == _RETRIES - 1:
                    raise
                self.tables.refresh(table)
                time.sleep(0.2 * (attempt + 1))
        raise AssertionError("unreachable")

    def create(self, table: TableName, branch: str) -> int | None:
        """Branch from main's current snapshot; returns that snapshot (the audit's start point)."""
        validate_branch(branch)

        def create() -> int | None:
            base = self.tables.head(table, "main")
            self.spark.sql(f"ALTER TABLE {self.tables.ident(table)} CREATE BRANCH {quote(branch)}")
            return base

        return self._committing(table, create)

    def exists(self, table: TableName, branch: str) -> bool:
        ref = self.tables.refs(table).get(branch)
        return ref is not None and ref.type == "BRANCH"

    def head(self, table: TableName, branch: str) -> int | None:
        return self.tables.head(table, branch)

    def drop(self, table: TableName, branch: str) -> None:
        validate_branch(branch)
        self._committing(
            table,
            lambda: self.spark.sql(f"ALTER TABLE {self.tables.ident(table)} DROP BRANCH IF EXISTS {quote(branch)}"),
        )

    def write_target(self, table: TableName, branch: str) -> str:
        return table.branch_sql(self.catalog, branch)

    def tables_for(self, branch: str) -> Tables:
        """Table branches live in the catalog itself."""
        return self.tables

    def iceberg_ref(self, branch: str) -> str:
        return branch

    def fast_forward(self, table: TableName, branch: str) -> int:
        validate_branch(branch)
        row = self.spark.sql(
            f"CALL {quote(self.catalog)}.system.fast_forward("
            f"table => {sql_string(table.dotted)}, branch => 'main', to => {sql_string(branch)})"
        ).collect()[0]
        return int(row["updated_ref"])

    def cherry_pick(self, table: TableName, snapshot_id: int) -> int:
        row = self.spark.sql(
            f"CALL {quote(self.catalog)}.system.cherrypick_snapshot("
            f"table => {sql_string(table.dotted)}, snapshot_id => {int(snapshot_id)})"
        ).collect()[0]
        return int(row["current_snapshot_id"])

    def list(self, table: TableName) -> list[BranchInfo]:
        return [
            BranchInfo(table, r.name, r.snapshot_id)
            for r in self.tables.refs(table).values()
            if r.type == "BRANCH" and r.name != "main"
        ]
