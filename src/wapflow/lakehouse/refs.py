"""What a run's sandbox and its publish are made of, as data: branches, a table's slice of a run, what a
publish did, what a discard found, and how an audit sees the sandbox. Every catalog kind (wapflow.lakehouse.catalog)
takes and returns these."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from wapflow.errors import PublishConflict
from wapflow.lakehouse.model import RUN_ID_PROP, Snapshot

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from wapflow.sql.identifiers import TableName


@dataclass(frozen=True)
class BranchInfo:
    """A branch other than main. table None: a catalog-level branch (it may hold any table)."""

    table: TableName | None
    name: str
    head: int | None
    hash: str | None = None  # the Nessie commit hash of a catalog-level branch


@dataclass(frozen=True)
class RunSlice:
    """One table's part of a run on its branch: what publishing moves onto main."""

    table: TableName
    base: int | None  # the table's snapshot the run's rows were written on top of
    snapshots: tuple[Snapshot, ...]  # the run's snapshots on the branch, oldest first (may be none)
    properties: Mapping[str, str] = field(default_factory=dict)  # snapshot properties of the run's commits
    # False for a merge or replace: on a moved main it is applied again, never cherry-picked (MainMoved)
    cherry_pick: bool = True

    @property
    def run_id(self) -> str:
        return self.properties.get(RUN_ID_PROP, "")


class MainMoved(PublishConflict):
    """main moved since the branch was made, and the run's change must be applied again on a fresh branch of
    it (a merge or replace), not cherry-picked."""


@dataclass(frozen=True)
class Published:
    """One table's main moved to a run's rows."""

    snapshot_id: int
    method: str  # "fast_forward" | "cherry_pick"
    branch_dropped: bool = False  # the branch went in the same commit (a fast-forward through the Java API)


@dataclass(frozen=True)
class PublishedRun:
    method: str  # fast_forward | cherry_pick | merge | merge_reapplied | already
    heads: dict[str, int | None]  # main's snapshot of each table of the run, after the publish
    leftover: str | None = None  # main moved, but cleaning the sandbox up failed: what is left and why
    caveat: str | None = None  # what a reader of the report must know of how the catalog committed (not atomic)


@dataclass(frozen=True)
class Discarded:
    found: bool  # the sandbox existed
    whole_branch: bool  # every table of the branch went with it (catalog-level), not only the named ones


class AuditView:
    """How an audit sees the world from a run's sandbox: SQL naming the run's table on its branch, and
    `main` of any table. Heads of main read here and `pin`ned are re-checked under the publish lock when
    the backend's publish would not notice main moving by itself (table branches)."""

    def __init__(
        self,
        branch_sql: str,
        read_main: Callable[[TableName], DataFrame],
        pin: Callable[[TableName], None] | None = None,
        pinned: dict[str, int | None] | None = None,
    ) -> None:
        self.branch_sql = branch_sql
        self.read_main = read_main
        self._pin = pin
        self.pinned: dict[str, int | None] = pinned if pinned is not None else {}

    def pin(self, table: TableName) -> None:
        if self._pin is not None:
            self._pin(table)
