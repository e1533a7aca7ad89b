"""Several tables' mains moved in one atomic catalog commit: the publish of a multi-table run on table branches.

Each table's change is planned on its current metadata (PyIceberg, no JVM): main fast-forwarded to the
run's branch, or, when main moved since the branch was made, the run's appended files added again on top of
it (what Iceberg's cherry-pick does for an append); the branch ref goes in the same change. Then every
table's change is committed at once, the way the catalog allows:

- a JDBC catalog (the embedded SQLite one, PostgreSQL): each table's new metadata file is written first;
  then one database transaction moves every table's pointer with the condition Iceberg's JdbcCatalog puts
  on one table (`metadata_location` still the one the plan read). A table that moved meanwhile updates no
  row: the transaction rolls back, nothing is visible, and the group is planned again on the new heads;
- an Iceberg REST catalog: one `POST /v1/{prefix}/transactions/commit` carrying every table's updates and
  its requirements (main's snapshot as planned), when the server's `GET /v1/config` lists that endpoint.

A crash before the commit leaves metadata files no pointer names (`wap maintain` removes orphans); after
it, every table's main holds the run and no branch is left. Either way a re-run sees all or nothing.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from wapflow.errors import EnvironmentProblem, PublishConflict, Unreachable, UsageError
from wapflow.faults import crash_point
from wapflow.lakehouse.conflicts import retry_on_conflict
from wapflow.lakehouse.lineage import find_published
from wapflow.lakehouse.metadata import CatalogTables
from wapflow.lakehouse.model import FORMAT_VERSION_PROP, METADATA_PREVIOUS_VERSIONS_MAX_PROP
from wapflow.sql.identifiers import TableName

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

    from wapflow.config import WapConfig
    from wapflow.lakehouse.refs import RunSlice

T = TypeVar("T")
_THREADS = 8  # tables planned and staged side by side
TRANSACTIONS_ENDPOINT = "POST /v1/{prefix}/transactions/commit"


class GroupMoved(Exception):
    """A table of the group moved between its plan and the commit: nothing was committed."""


class MainMovedUnder(PublishConflict):
    """main moved since the branch was made and the run's change cannot be added on top of it (a merge or
    replace): it is applied again on a fresh branch."""


@dataclass
class TableMove:
    """One table's part of the group commit, planned on the metadata `loaded` holds."""

    table: TableName
    loaded: Table
    requirements: tuple[Any, ...]
    updates: tuple[Any, ...]
    head: int | None  # main's snapshot once committed
    method: str  # fast_forward | cherry_pick | already
    # A v3 table's new metadata as Iceberg's JSON, made here from the file as written (PyIceberg 0.12 cannot write
    # v3 metadata): what a JDBC catalog's commit writes instead of PyIceberg's staged metadata.
    raw: dict[str, Any] | None = None


class GroupCommit(Protocol):
    """Commits every table's planned change at once, or none (GroupMoved)."""

    @property
    def catalog(self) -> Catalog: ...

    def where(self) -> str:
        """The catalog, for messages."""
        ...

    def check(self) -> None:
        """Raise UsageError (exit 2) when this catalog cannot commit a group: before anything is written."""
        ...

    def commit(self, moves: Sequence[TableMove]) -> None: ...

    def caveat(self) -> str | None:
        """What the group's report must say of this catalog's commit (None: one atomic commit)."""
        ...


class _Loaded:
    """The metadata PyIceberg loaded, as a source of wapflow's reads of it (find_published)."""

    def __init__(self, metas: Mapping[str, dict[str, Any]]) -> None:
        self.metas = metas

    def load(self, table: TableName) -> dict[str, Any] | None:
        return self.metas.get(table.dotted)

    def list_tables(self) -> list[TableName]:
        return [TableName.parse(t) for t in self.metas]


def _ident(table: TableName) -> tuple[str, ...]:
    return (*table.namespace, table.name)


def plan(catalog: Catalog, branch: str, run_id: str, slices: Sequence[RunSlice]) -> list[TableMove]:
    """Every slice's change on its table's current metadata (nothing committed, nothing written but the
    manifests of a re-applied append), the tables loaded side by side (each is a catalog query and a file read)."""
    return _each(lambda sl: _plan_one(catalog, branch, run_id, sl), slices)


def _each(fn: Callable[[Any], T], items: Sequence[Any]) -> list[T]:
    """fn over items, in order, on a few threads (catalog queries and file I/O); the first failure raises."""
    if len(items) <= 1:
        return [fn(i) for i in items]
    with ThreadPoolExecutor(max_workers=min(_THREADS, len(items))) as pool:
        return list(pool.map(fn, items))


def _plan_one(catalog: Catalog, branch: str, run_id: str, sl: RunSlice) -> TableMove:
    from pyiceberg.table.refs import SnapshotRefType
    from pyiceberg.table.update import (
        AssertRefSnapshotId,
        AssertTableUUID,
        RemoveSnapshotRefUpdate,
        SetSnapshotRefUpdate,
    )

    from wapflow.lakehouse.pyiceberg_client import added_data_files, metadata_json

    tbl = catalog.load_table(_ident(sl.table))
    meta = metadata_json(tbl)
    v3 = int(meta.get(FORMAT_VERSION_PROP, 2)) >= 3
    view = CatalogTables(_Loaded({sl.table.dotted: meta}), catalog.name)
    refs = tbl.metadata.refs
    main = refs["main"].snapshot_id if "main" in refs else None
    guard: tuple[Any, ...] = (
        AssertTableUUID(uuid=tbl.metadata.table_uuid),
        AssertRefSnapshotId(ref="main", snapshot_id=main),
    )
    drop_branch: tuple[Any, ...] = (RemoveSnapshotRefUpdate(ref_name=branch),) if branch in refs else ()
    done_at = find_published(view, sl.table, sl.run_id or run_id) if sl.snapshots else None
    if not sl.snapshots or done_at is not None:
        # Nothing of the run in this table, or its rows on main already: only the branch goes.
        head = done_at if done_at is not None else main
        raw = moved_refs(meta, tbl.metadata_location, None, branch) if v3 and drop_branch else None
        return TableMove(sl.table, tbl, guard if drop_branch else (), drop_branch, head, "already", raw)
    if branch not in refs:
        raise PublishConflict(
            f"branch {branch} of {sl.table} is gone and main does not hold run {sl.run_id or run_id}",
            hint="run the tables again under a new run id",
        )
    head = refs[branch].snapshot_id
    snaps = view.snapshots(sl.table)
    if main is None or main in {s.snapshot_id for s in view.ancestry(snaps, head)}:
        ff = SetSnapshotRefUpdate(
            ref_name="main",
            type=SnapshotRefType.BRANCH,
            snapshot_id=head,
            max_ref_age_ms=None,
            max_snapshot_age_ms=None,
            min_snapshots_to_keep=None,
        )
        raw = moved_refs(meta, tbl.metadata_location, head, branch if drop_branch else None) if v3 else None
        return TableMove(sl.table, tbl, guard, (ff, *drop_branch), head, "fast_forward", raw)
    if v3:
        # Adding the run's files again on top of main is a new snapshot, with v3's row lineage: PyIceberg 0.12
        # cannot write it. The change is applied again on a fresh branch of main (as a merge's is) instead.
        raise MainMovedUnder(
            f"main of {sl.table} moved since branch {branch} was created, and {sl.table} is a format v3 table",
            hint="the run's change is applied again on a fresh branch of main",
        )
    if not sl.cherry_pick:
        raise MainMovedUnder(
            f"main of {sl.table} moved since branch {branch} was created",
            hint="the run's change is applied again on a fresh branch of main",
        )
    not_appends = [s for s in sl.snapshots if s.operation != "append"]
    if not_appends:
        ops = ", ".join(f"{s.snapshot_id} ({s.operation})" for s in not_appends)
        raise PublishConflict(
            f"main of {sl.table} moved since branch {branch} was created, and snapshots {ops} are not "
            "appends, so they cannot be added again on top of it",
            hint="run the tables again under a new run id",
        )
    files = [f for s in sl.snapshots for f in added_data_files(tbl, s.snapshot_id)]
    tx = tbl.transaction()
    with tx.update_snapshot(snapshot_properties=dict(sl.properties), branch="main").fast_append() as fa:
        for f in files:
            fa.append_data_file(f)
    tx._stage(drop_branch)  # staged with the append, committed by the group
    staged = tx.table_metadata
    new_head = staged.refs["main"].snapshot_id
    requirements = tuple({type(r): r for r in (*tx._requirements, *guard)}.values())
    return TableMove(sl.table, tbl, requirements, tuple(tx._updates), new_head, "cherry_pick")


def moved_refs(meta: dict[str, Any], location: str, main: int | None, drop: str | None) -> dict[str, Any]:
    """The table's metadata JSON with main at snapshot `main` (None: where it is) and ref `drop` removed, as
    Iceberg's TableMetadata.Builder records such a change: the snapshot log and the metadata log (the file it
    replaces) grow, last-updated-ms moves on. Every other key stays as Iceberg wrote it (a v3 table's
    next-row-id, encryption keys, statistics): no rows are added, so row lineage has nothing to assign."""
    import time

    new: dict[str, Any] = json.loads(json.dumps(meta))
    now = max(int(time.time() * 1000), int(meta.get("last-updated-ms", 0)) + 1)
    refs = new.setdefault("refs", {})
    if drop is not None:
        refs.pop(drop, None)
    if main is not None:
        refs["main"] = {**refs.get("main", {}), "snapshot-id": main, "type": "branch"}
        if new.get("current-snapshot-id") != main:
            new["current-snapshot-id"] = main
            new.setdefault("snapshot-log", []).append({"timestamp-ms": now, "snapshot-id": main})
    keep = int((new.get("properties") or {}).get(METADATA_PREVIOUS_VERSIONS_MAX_PROP, "100"))
    previous = {"timestamp-ms": int(meta.get("last-updated-ms", now)), "metadata-file": location}
    log = [*new.get("metadata-log", []), previous]
    new["metadata-log"] = log[-keep:] if keep > 0 else []
    new["last-updated-ms"] = now
    return new


def _write_raw(cat: Any, m: TableMove) -> str:
    """m.raw written beside the table's metadata, named as the catalog names its next version; its location."""
    assert m.raw is not None
    version = cat._parse_metadata_version(m.loaded.metadata_location) + 1
    location = str(m.loaded.location_provider().new_table_metadata_file_location(version))
    with m.loaded.io.new_output(location).create(overwrite=False) as f:
        f.write(json.dumps(m.raw).encode())
    return location


def publish_group(
    committer: GroupCommit,
    branch: str,
    run_id: str,
    slices: Sequence[RunSlice],
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Plan and commit the group, planning again on new heads when a table moved during the commit (the one
    retry policy of commit conflicts: wapflow.lakehouse.conflicts). Returns each table's main head after it and
    the method ("fast_forward", "cherry_pick", "already")."""

    def attempt() -> list[TableMove]:
        moves = plan(committer.catalog, branch, run_id, slices)
        crash_point("publish:group-planned")
        committer.commit([m for m in moves if m.updates])
        return moves

    moves = retry_on_conflict(
        attempt,
        what=f"publishing {len(slices)} tables of run {run_id} together (their mains kept moving)",
        is_conflict=lambda e: isinstance(e, GroupMoved),
        on_conflict=(lambda: progress("a table moved during the commit: nothing published; planning again"))
        if progress is not None
        else None,
        hint=f"every main is unchanged by run {run_id}; run it again with the same run id",
    )
    methods = {m.method for m in moves} - {"already"}
    method = "cherry_pick" if "cherry_pick" in methods else next(iter(methods), "already")
    caveat = committer.caveat() if method != "already" else None
    return {"heads": {m.table.dotted: m.head for m in moves}, "method": method, "caveat": caveat}


class _Opened:
    """PyIceberg's client of the catalog, opened on first use: opening a SqlCatalog creates Iceberg's tables in a
    database that has none yet, which must be left to Iceberg's own JdbcCatalog (its schema has more columns)."""

    def __init__(self, catalog: Catalog | Callable[[], Catalog]) -> None:
        self._catalog = catalog

    @property
    def catalog(self) -> Catalog:
        if callable(self._catalog):
            self._catalog = self._catalog()
        return self._catalog


class SqlGroupCommit(_Opened):
    """One database transaction over Iceberg's JdbcCatalog table (`iceberg_tables`), as PyIceberg's SqlCatalog
    reads and writes it: the same conditional UPDATE Iceberg's JdbcTableOperations makes, once per table."""

    def where(self) -> str:
        return "the JDBC catalog"

    def caveat(self) -> str | None:
        return None  # one database transaction

    def check(self) -> None:
        return None

    def commit(self, moves: Sequence[TableMove]) -> None:
        from pyiceberg.catalog.sql import IcebergTables, SqlCatalog
        from sqlalchemy import update

        cat = self.catalog
        assert isinstance(cat, SqlCatalog)

        def stage(m: TableMove) -> tuple[TableMove, str]:
            if m.raw is not None:  # a v3 table: the metadata JSON planned here (PyIceberg cannot write v3's)
                return m, _write_raw(cat, m)
            st = cat._update_and_stage_table(m.loaded, _ident(m.table), m.requirements, m.updates)
            cat._write_metadata(st.metadata, st.io, st.metadata_location)
            return m, st.metadata_location

        staged = _each(stage, moves)
        crash_point("publish:group-staged")
        try:
            with cat.engine.begin() as conn:  # one transaction: every pointer moves, or none
                for m, location in staged:
                    moved = conn.execute(
                        update(IcebergTables)
                        .where(
                            IcebergTables.catalog_name == cat.name,
                            IcebergTables.table_namespace == ".".join(m.table.namespace),
                            IcebergTables.table_name == m.table.name,
                            IcebergTables.metadata_location == m.loaded.metadata_location,
                        )
                        .values(
                            metadata_location=location,
                            previous_metadata_location=m.loaded.metadata_location,
                        )
                    )
                    if moved.rowcount != 1:
                        raise GroupMoved(f"{m.table} was committed to meanwhile")
        except GroupMoved:
            for m, location in staged:  # no pointer names them: gone now, or left to `wap maintain`'s orphans
                with contextlib.suppress(Exception):
                    m.loaded.io.delete(location)
            raise


class RestGroupCommit(_Opened):
    """Iceberg REST's multi-table commit: every table's requirements and updates in one request."""

    def __init__(self, catalog: Catalog | Callable[[], Catalog], uri: str, declared: str | None = None) -> None:
        super().__init__(catalog)
        self.uri = uri
        self.declared = declared  # [lakehouse] rest_group_commit

    def where(self) -> str:
        return f"the REST catalog at {self.uri}"

    def caveat(self) -> str | None:
        return rest_atomicity(self.catalog.properties, self.declared, self.uri)[1]

    def check(self) -> None:
        from pyiceberg.catalog.rest import RestCatalog

        cat = self.catalog
        assert isinstance(cat, RestCatalog)
        listed = {str(e) for e in cat._supported_endpoints}
        if TRANSACTIONS_ENDPOINT not in listed:
            raise UsageError(
                f"{self.where()} does not list the endpoint {TRANSACTIONS_ENDPOINT} in GET /v1/config, so it "
                "cannot publish several tables in one commit",
                hint="use a REST server that offers multi-table commits, a JDBC catalog or Nessie (see "
                "docs/guides/tables-together.md), or run the tables one at a time",
            )

    def commit(self, moves: Sequence[TableMove]) -> None:
        from pyiceberg.catalog.rest import RestCatalog
        from pyiceberg.table import CommitTableRequest, TableIdentifier

        cat = self.catalog
        assert isinstance(cat, RestCatalog)
        changes = [
            CommitTableRequest(
                identifier=TableIdentifier(namespace=list(m.table.namespace), name=m.table.name),
                requirements=m.requirements,
                updates=m.updates,
            ).model_dump_json()
            for m in moves
        ]
        body = '{"table-changes": [' + ", ".join(changes) + "]}"
        crash_point("publish:group-staged")
        try:
            response = cat._session.post(  # the catalog's session: its auth and TLS
                cat.url("transactions/commit"), data=body.encode(), headers={"Content-Type": "application/json"}
            )
        except Exception as e:
            raise Unreachable(
                f"{self.where()} could not be reached to publish the tables: {e}",
                hint="run it again with the same run id: a publish that landed is not made twice",
            ) from e
        if response.status_code in (200, 204):
            return
        said = f"{self.where()} answered {response.status_code} to the multi-table commit: {response.text[:300]}"
        if response.status_code == 409:
            raise GroupMoved(response.text[:300])
        if response.status_code in (401, 403, 419):
            raise EnvironmentProblem(said, hint="check the catalog's token or credential in wap.toml")
        if 400 <= response.status_code < 500:
            raise PublishConflict(said, hint="every main is unchanged; `wap runs` and the server's log say more")
        raise Unreachable(said, hint="run it again with the same run id: a publish that landed is not made twice")


def group_commit_for(cfg: WapConfig) -> GroupCommit | str:
    """How this lakehouse's catalog commits several tables at once, or why it cannot (a sentence). Nessie is
    not asked here: its branches span the catalog (wapflow.lakehouse.nessie publishes with one merge)."""
    from wapflow.lakehouse.pyiceberg_client import open_catalog, rest_properties
    from wapflow.runs.databases import jdbc_catalog_url

    why = "a run over several tables publishes them together"
    kind = cfg.lakehouse.catalog
    rest = rest_properties(cfg)
    if rest is not None:
        return RestGroupCommit(lambda: open_catalog(cfg, why=why), rest.get("uri", ""), cfg.lakehouse.rest_group_commit)
    if jdbc_catalog_url(cfg) is not None:
        return SqlGroupCommit(lambda: open_catalog(cfg, why=why))
    reasons = {
        "hive": "a Hive metastore commits one table at a time (no transaction spans tables)",
        "glue": "AWS Glue commits one table at a time through Iceberg (no transaction spans tables)",
        "hadoop": "a Hadoop catalog commits by renaming one table's metadata file (nothing spans tables)",
    }
    return reasons.get(
        kind,
        f'catalog = "{kind}" offers wapflow no commit spanning tables (a JDBC catalog, a REST catalog with '
        "multi-table commits, or Nessie does)",
    )


# Keys a REST server's GET /v1/config carries that name it as Nessie's Iceberg REST endpoint (one Nessie commit).
NESSIE_CONFIG_PREFIX = "nessie."


def rest_atomicity(properties: Mapping[str, Any], declared: str | None, uri: str) -> tuple[bool | None, str | None]:
    """Whether the REST server at `uri` commits a group atomically (None: not known), and the caveat a group's
    report carries when it does not or may not. `properties`: the client's, with the server's GET /v1/config
    defaults and overrides merged in; `declared`: [lakehouse] rest_group_commit."""
    if declared == "atomic":
        return True, None
    if declared == "table_by_table":
        return False, (
            f"the REST server at {uri} commits a group table by table (rest_group_commit): one that stops between "
            "two tables leaves the tables before it on main"
        )
    if any(str(k).startswith(NESSIE_CONFIG_PREFIX) for k in properties):
        return True, None
    return None, (
        f"the REST server at {uri} is not known to commit a group atomically (Iceberg's reference server validates "
        "every table, then commits them one by one); set [lakehouse] rest_group_commit to say which it does"
    )
