"""Iceberg table branches: the catalog (wapflow.lakehouse.catalog) of every catalog kind but Nessie.

A table branch sandboxes one table at a time and shares its schema with main; main is moved by fast-forward,
or by cherry-picking a run's appends when main moved meanwhile (a merge or replace is applied again instead).
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from functools import cached_property, partial
from typing import TYPE_CHECKING, TypeVar

from wapflow.errors import PublishConflict
from wapflow.lakehouse.catalog_reads import CatalogReads
from wapflow.lakehouse.conflicts import retry_on_conflict
from wapflow.lakehouse.lineage import find_published
from wapflow.lakehouse.metadata import MetadataSource, source_for
from wapflow.lakehouse.model import Snapshot
from wapflow.lakehouse.refs import AuditView, BranchInfo, Discarded, MainMoved, Published, PublishedRun, RunSlice
from wapflow.spark import errors as spark_errors
from wapflow.spark.kind import is_connect_url
from wapflow.sql.identifiers import TableName, validate_branch

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructField

    from wapflow.config import WapConfig
    from wapflow.lakehouse.group_commit import GroupCommit
    from wapflow.lakehouse.reads import TableMetadata
    from wapflow.lakehouse.tables import Tables
    from wapflow.storage import Storage

_RETRIES = 5
_PUBLISH_RETRIES = 4
T = TypeVar("T")


class TableBranchCatalog(CatalogReads):
    """A catalog of Iceberg table branches (ALTER TABLE ... CREATE BRANCH; main moved by fast_forward or
    cherrypick): every catalog kind but Nessie. A table branch shares its table's schema with main, so new columns
    are staged elsewhere. One table's commit goes through this process's commit layer (Iceberg's Java API, or a
    Spark Connect server's statements: wapflow.lakehouse.commits); several tables' in one commit of the catalog
    where it can make one (a JDBC transaction, a REST `transactions/commit`: wapflow.lakehouse.group_commit)."""

    # Whether one branch holds every table of the catalog (a failed group write drops it only if it made it).
    spans_catalog = False

    def __init__(
        self, cfg: WapConfig, storage: Storage, tables: Callable[[], Tables], *, progress: Callable[[str], None]
    ) -> None:
        super().__init__(cfg, storage, tables)
        self.progress = progress
        self._group: GroupCommit | str | None = None
        # Spark Connect (master sc://): the catalog and warehouse may answer its server only, not this machine.
        self.connect_client = is_connect_url(cfg.lakehouse.master)

    @property
    def spark(self) -> SparkSession:
        return self.tables.spark

    @cached_property
    def catalog_cache(self) -> bool:
        """Spark's catalog keeps loaded tables (cache-enabled): a commit made outside it is followed by a refresh
        of the tables it changed. Read on first need (the catalog's settings make the warehouse folder)."""
        from wapflow.lakehouse.session import catalog_caches_tables

        return catalog_caches_tables(self.cfg)

    def _source(self, ref: str) -> MetadataSource | None:
        return source_for(self.cfg, self.storage)

    def check(self) -> None:
        """Nothing to ask before Spark starts: Spark's catalog reports its own errors."""

    def _group_commit(self) -> GroupCommit | str:
        """How the catalog commits several tables at once (or why not): chosen once, on first need."""
        if self._group is None:
            from wapflow.lakehouse.group_commit import group_commit_for

            self._group = group_commit_for(self.cfg)
        return self._group

    def why_not_together(self) -> str | None:
        group = self._group_commit()
        if isinstance(group, str):
            return group
        group.check()
        return None

    def commit(
        self,
        branch: str,
        run_id: str,
        slices: Sequence[RunSlice],
        *,
        atomic: bool,
        after_each: Callable[[RunSlice], None] | None = None,
    ) -> PublishedRun:
        if atomic:
            return self._commit_together(branch, run_id, slices)
        return self._commit_each(branch, run_id, slices, after_each)

    def _commit_together(self, branch: str, run_id: str, slices: Sequence[RunSlice]) -> PublishedRun:
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
        return PublishedRun(done["method"], done["heads"], caveat=done.get("caveat"))

    def list_branches(self, table: TableName | None = None) -> builtins.list[BranchInfo]:
        view = self.direct()
        if view is None:
            return self.list(table) if table is not None else self.all_branches()
        tables = [table] if table is not None else view.list_tables()
        return [b for t in tables for b in table_branches(view, t)]

    def sandbox_left(self, branch: str, tables: Sequence[TableName], staging: TableName | None) -> bool:
        """Answered False only from the catalog's metadata read with no JVM; a Spark Connect client (its catalog
        may answer its server only), a catalog only Spark reads here, or a direct read that fails: it may be
        left, Spark looks."""
        if self.connect_client:
            return True
        view = self.direct()
        if view is None:
            return True
        try:
            if staging is not None and view.exists(staging):
                return True
            return any(view.exists(t) and branch in view.refs(t) for t in tables)
        except Exception:  # noqa: BLE001 - Spark's view then looks, and reports what is wrong
            return True

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
        return self._committing(table, lambda: self.tables.commits.create_branch(table, branch))

    def exists(self, table: TableName, branch: str) -> bool:
        ref = self.tables.refs(table).get(branch)
        return ref is not None and ref.type == "BRANCH"

    def drop(self, table: TableName, branch: str) -> None:
        self._committing(table, lambda: self.tables.commits.drop_branch(table, branch))

    def write_target(self, table: TableName, branch: str) -> str:
        """The branch in the identifier (`t`.`branch_b`), which must exist. Not `writeTo(t).option("branch", b)`:
        on wapflow's tables, with Spark 4.1 and Iceberg 1.11, that option is ignored and the append lands on
        main (measured 2026-11-27, for an existing branch and a new one alike)."""
        return table.branch_sql(self.name, branch)

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

    def _commit_each(
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
                table, lambda: self.tables.commits.fast_forward(table, branch, drop=True), _PUBLISH_RETRIES
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
        return self.tables.commits.cherry_pick(table, snapshot_id)  # the session's commit layer (lakehouse.commits)

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
