"""Where a run's rows wait for their audit: a branch backend, the run's sandbox.

One seam, because branching really varies: Iceberg table-level branches (this module) sandbox one
table at a time; catalog-level branches (Project Nessie, wapflow.lakehouse.nessie) sandbox the whole
catalog, schema changes included, and publish every table of a run in one commit. The pipeline speaks
only the BranchBackend protocol below; what differs is answered by the backend (where rows are written,
whether new columns fit in the sandbox, how main is moved), never by asking which backend it is.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Protocol, TypeVar

from wapflow.errors import PublishConflict
from wapflow.lakehouse.conflicts import retry_on_conflict
from wapflow.lakehouse.lineage import find_published
from wapflow.lakehouse.model import RUN_ID_PROP, Snapshot
from wapflow.lakehouse.tables import Tables
from wapflow.spark import errors as spark_errors
from wapflow.sql.identifiers import TableName, validate_branch

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructField

    from wapflow.lakehouse.group_commit import GroupCommit
    from wapflow.lakehouse.reads import TableMetadata

_RETRIES = 5
_PUBLISH_RETRIES = 4
T = TypeVar("T")


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


class BranchBackend(Protocol):
    """A run's sandbox: every operation the pipeline and the service need, for either kind of branch."""

    def why_not_together(self) -> str | None:
        """None when several tables can be published in one atomic commit (a multi-table run needs it); else
        why not. Raises UsageError when the catalog was asked and refuses (before anything is written)."""
        ...

    def publish_together(self, branch: str, run_id: str, slices: Sequence[RunSlice]) -> PublishedRun:
        """Move main of every slice's table to the run's audited rows in one atomic commit, or none."""
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

    def publish(
        self,
        branch: str,
        run_id: str,
        slices: Sequence[RunSlice],
        after_each: Callable[[RunSlice], None] | None = None,
    ) -> PublishedRun:
        """Move main to the run's audited rows for every slice (in order), then drop the sandbox."""
        ...

    def audit_view(self, table: TableName, branch: str, base: int | None, group: Sequence[TableName] = ()) -> AuditView:
        """`group`: the other tables of a multi-table run, read as the sandbox holds them."""
        ...

    def list(self, table: TableName) -> list[BranchInfo]:
        """Branches holding changes to this table."""
        ...

    def all_branches(self) -> builtins.list[BranchInfo]: ...


class IcebergTableBranches:
    """Branches of single Iceberg tables (ALTER TABLE ... CREATE BRANCH; main moved by fast_forward or
    cherrypick). A table branch shares its table's schema with main, so new columns are staged elsewhere."""

    def __init__(
        self,
        tables: Tables,
        group: Callable[[], GroupCommit | str] | None = None,
        *,
        catalog_cache: bool = True,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        """`group`: how the catalog commits several tables at once, or why it cannot (asked on first need).
        `catalog_cache`: Spark's catalog keeps loaded tables (cache-enabled), so a commit made outside it is
        followed by a refresh of the tables it changed."""
        self.tables = tables
        self.catalog_cache = catalog_cache
        self.progress = progress
        self.spark = tables.spark
        self.catalog = tables.catalog
        self._group_source = group
        self._group: GroupCommit | str | None = None

    def _group_commit(self) -> GroupCommit | str:
        if self._group is None:
            self._group = self._group_source() if self._group_source is not None else "no catalog client here"
        return self._group

    def why_not_together(self) -> str | None:
        group = self._group_commit()
        if isinstance(group, str):
            return group
        group.check()
        return None

    def publish_together(self, branch: str, run_id: str, slices: Sequence[RunSlice]) -> PublishedRun:
        """Every table's main in one catalog commit (wapflow.lakehouse.group_commit); each table's branch goes in
        it too. A merge or replace on a moved main raises MainMoved: nothing committed."""
        from wapflow.lakehouse.group_commit import MainMovedUnder, publish_group

        group = self._group_commit()
        if isinstance(group, str):
            raise PublishConflict(f"these tables cannot be published together: {group}")
        try:
            done = publish_group(group, branch, run_id, slices, progress=self.progress)
        except MainMovedUnder as e:
            raise MainMoved(e.message, hint=e.hint) from e
        if self.catalog_cache:
            for sl in slices:  # committed outside Spark: a cached table must load the new metadata
                self.tables.refresh(sl.table)
        return PublishedRun(done["method"], done["heads"])

    def _committing(self, table: TableName, fn: Callable[[], T], attempts: int = _RETRIES) -> T:
        """Run a metadata commit; when another process committed to the table since this process cached its
        metadata (Iceberg's CommitFailedException), refresh and try again (wapflow.lakehouse.conflicts)."""
        return retry_on_conflict(
            fn, what=f"a commit to {table}", on_conflict=lambda: self.tables.refresh(table), attempts=attempts
        )

    def describe(self, branch: str) -> str:
        return f"branch {branch}"

    def open(self, branch: str) -> bool:
        """Nothing spans tables: each table's branch is made by create()."""
        validate_branch(branch)
        return False

    def create(self, table: TableName, branch: str) -> int | None:
        """Branch from main's current snapshot; returns that snapshot (the audit's start point)."""
        return self._committing(table, lambda: self.tables.create_branch(table, branch))

    def exists(self, table: TableName, branch: str) -> bool:
        ref = self.tables.refs(table).get(branch)
        return ref is not None and ref.type == "BRANCH"

    def drop(self, table: TableName, branch: str) -> None:
        self._committing(table, lambda: self.tables.drop_branch(table, branch))

    def write_target(self, table: TableName, branch: str) -> str:
        """The branch in the identifier (`t`.`branch_b`), which must exist. Not `writeTo(t).option("branch", b)`:
        on wapflow's tables, with Spark 4.1 and Iceberg 1.11, that option is ignored and the append lands on
        main (measured 2026-11-27, for an existing branch and a new one alike)."""
        return table.branch_sql(self.catalog, branch)

    def tables_for(self, branch: str) -> Tables:
        """Table branches live in the catalog itself."""
        return self.tables

    def iceberg_ref(self, branch: str) -> str:
        return branch

    def add_columns(self, table: TableName, branch: str, columns: list[StructField]) -> bool:
        """A table's schema is shared by all its branches: adding a column here would change main."""
        return False

    def reset(self, table: TableName, branch: str, mine: Sequence[Snapshot]) -> None:
        """The branch holds nothing but this run's unfinished write (the caller checked): drop it."""
        if self.tables.exists(table):
            self.drop(table, branch)

    def discard(self, branch: str, tables: Sequence[TableName]) -> Discarded:
        found = False
        for t in tables:
            if self.tables.exists(t) and self.exists(t, branch):
                self.drop(t, branch)
                found = True
        return Discarded(found=found, whole_branch=False)

    def publish(
        self,
        branch: str,
        run_id: str,
        slices: Sequence[RunSlice],
        after_each: Callable[[RunSlice], None] | None = None,
    ) -> PublishedRun:
        """Per table, in order: fast-forward main to the branch, or re-apply the run's appends on a moved
        main. A table whose rows are already on main (a publish cut short by a crash) is not published twice."""
        heads: dict[str, int | None] = {}
        method = "already"
        dropped: set[str] = set()  # tables whose branch went in the commit that moved main
        for sl in slices:
            if not sl.snapshots:  # nothing of the run in this table (e.g. no row quarantined)
                heads[sl.table.dotted] = self.tables.head(sl.table, "main")
                continue
            done_at = find_published(self.tables, sl.table, sl.run_id or run_id)
            if done_at is None:
                done = self.move_main(sl.table, branch, list(sl.snapshots), cherry_pick=sl.cherry_pick)
                done_at, method = done.snapshot_id, done.method
                if done.branch_dropped:
                    dropped.add(sl.table.dotted)
                if after_each is not None:
                    after_each(sl)
            heads[sl.table.dotted] = done_at
        try:
            for sl in slices:
                if sl.table.dotted not in dropped and self.tables.exists(sl.table):
                    self.drop(sl.table, branch)
        except Exception as e:  # noqa: BLE001 - main has moved: the run is published; a branch left over is clutter
            return PublishedRun(method, heads, f"branch {branch} could not be dropped ({spark_errors.describe(e)})")
        return PublishedRun(method, heads)

    def move_main(
        self, table: TableName, branch: str, run_snapshots: list[Snapshot], *, cherry_pick: bool = True
    ) -> Published:
        """Move main to the audited rows without rewriting data (both ways are metadata-only commits).

        Fast-forward when main has not moved since the branch was created; otherwise re-apply the run's
        append snapshots (run_snapshots: on the branch, oldest first) on top of main (cherry-pick), so a
        concurrent run's rows are kept."""
        try:
            moved_to, dropped = self._committing(
                table, lambda: self.tables.fast_forward(table, branch, drop=True), _PUBLISH_RETRIES
            )
            return Published(moved_to, "fast_forward", branch_dropped=dropped)
        except Exception as e:
            if "not an ancestor" not in str(e):
                # A named condition (commit conflict after the retries, unreachable storage, ...) says what to
                # do; anything else propagates for the caller to report as a bug of this run and step.
                known = spark_errors.classify(e, doing=f"fast-forwarding main of {table} to {branch}")
                if known is not None:
                    raise known from e
                raise
            # main moved since the branch was made. Iceberg says so with a ValidationException, the class of
            # every failed check of a metadata update (a missing or tag ref too): only its message tells this
            # one apart, classic session or Spark Connect alike.
        # main moved since the branch was created: re-apply this run's appends on top of it.
        if not cherry_pick:
            raise MainMoved(
                f"main of {table} moved since branch {branch} was created",
                hint="the run's change is applied again on a fresh branch of main",
            )
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
            try:
                current = self._committing(table, partial(self.cherry_pick, table, s.snapshot_id), _PUBLISH_RETRIES)
            except Exception as e:
                known = spark_errors.classify(e, doing=f"re-applying snapshot {s.snapshot_id} onto main of {table}")
                if known is not None:
                    raise known from e
                raise PublishConflict(
                    f"could not re-apply snapshot {s.snapshot_id} of branch {branch} onto main of {table}: "
                    f"{spark_errors.describe(e)}",
                    hint=f"main is unchanged by this run and the branch {branch} is kept: inspect it "
                    f"(wap query ... --branch {branch}), then re-run the files on a fresh branch",
                ) from e
        assert current is not None
        return Published(current, "cherry_pick")

    def cherry_pick(self, table: TableName, snapshot_id: int) -> int:
        return self.tables.cherry_pick(table, snapshot_id)  # the session's commit layer (lakehouse.commits)

    def audit_view(self, table: TableName, branch: str, base: int | None, group: Sequence[TableName] = ()) -> AuditView:
        """main of any table at its head when first read; the heads are pinned, and publish re-checks
        them (main may move between audit and publish, and fast_forward would not notice a changed key set).
        A table of the same multi-table run (`group`) is read on its branch: main plus what the run adds."""
        tables = self.tables
        pinned: dict[str, int | None] = {}
        staged = {t.dotted for t in group if t != table}

        def read(t: TableName) -> DataFrame:
            if t.dotted in staged and self.exists(t, branch):
                return tables.read(t, branch)
            if t.dotted not in pinned:
                pinned[t.dotted] = tables.head(t, "main")
            head = pinned[t.dotted]
            return tables.read_increment(t, None, head) if head is not None else tables.read(t).limit(0)

        def pin(t: TableName) -> None:
            if t.dotted in staged:
                return  # published in the same commit as this table: the group commit's condition covers it
            pinned.setdefault(t.dotted, tables.head(t, "main") if tables.exists(t) else None)

        return AuditView(f"{tables.ident(table)} VERSION AS OF '{branch}'", read, pin, pinned)

    def list(self, table: TableName) -> builtins.list[BranchInfo]:
        return table_branches(self.tables, table)

    def all_branches(self) -> builtins.list[BranchInfo]:
        return [b for t in self.tables.list_tables() for b in self.list(t)]


def table_branches(tables: TableMetadata, table: TableName) -> list[BranchInfo]:
    """A table's Iceberg branches other than main (from Spark's view or the catalog's: `tables`)."""
    return [
        BranchInfo(table, r.name, r.snapshot_id)
        for r in tables.refs(table).values()
        if r.type == "BRANCH" and r.name != "main"
    ]
