"""The wap.toml's catalog through PyIceberg: table commits that need no JVM in this process.

A Spark Connect client has no gateway to Iceberg's Java API, and Spark SQL cannot name the data files a
commit should remove. PyIceberg commits to the same catalog directly: the one wap.toml names, which is also
the catalog a Connect server writes to (the client registers it in its session). It opens the JDBC
catalogs (the embedded SQLite one, `catalog = "jdbc"` on PostgreSQL or SQLite) with PyIceberg's SqlCatalog,
which reads and writes Iceberg's JdbcCatalog tables, and an Iceberg REST catalog with PyIceberg's RestCatalog
(the same properties Spark's REST client gets: uri, warehouse, token or credential, headers; `ca_bundle`'s
CAs besides the public ones); other catalog kinds are refused with what to do instead.
The dashboard opens the embedded catalog through here too.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from wapflow.errors import EnvironmentProblem, UsageError
from wapflow.lakehouse.conflicts import retry_on_conflict
from wapflow.spark.errors import commit_conflict
from wapflow.sql.identifiers import TableName

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table

    from wapflow.config import WapConfig

# Missing files fail the commit with this text, in Iceberg's Java API and PyIceberg alike.
MISSING_FILES = "Missing required files to delete"
# The REST catalog properties PyIceberg's RestCatalog understands as Iceberg's Java client does.
_REST_KEYS = ("uri", "warehouse", "token", "credential", "oauth2-server-uri", "scope", "prefix", "audience")


def s3_properties(cfg: WapConfig) -> dict[str, str]:
    """[s3] as PyIceberg FileIO properties; keys only when wap.toml names them (else the AWS chain)."""
    if cfg.s3 is None:
        return {}
    props = {"s3.path-style-access": str(cfg.s3.uses_path_style()).lower()}
    return props | {f"s3.{k.replace('_', '-')}": v for k, v in cfg.s3.connection().items()}


def open_catalog(cfg: WapConfig, *, why: str) -> Catalog:
    """PyIceberg's client of wap.toml's catalog. `why`: what needs it, for the error when it cannot be opened."""
    from wapflow.runs.databases import jdbc_catalog_url

    url = jdbc_catalog_url(cfg)
    rest = rest_properties(cfg)
    if rest is not None:
        return _open_rest(cfg, rest, why=why)
    if url is None:
        raise UsageError(
            f"{why} through PyIceberg, which wapflow opens for the JDBC and REST catalogs only (catalog = "
            f'"sqlite", "jdbc" or "rest"), not catalog = "{cfg.lakehouse.catalog}"',
            hint="run this command with a copy of wap.toml whose master is local[*] (same catalog and warehouse)",
        )
    try:
        from pyiceberg.catalog.sql import SqlCatalog
    except ImportError:
        raise EnvironmentProblem(
            f"{why} through PyIceberg, which is not installed",
            hint="pip install 'wapflow[connect]'",
        ) from None
    local = cfg.local_warehouse_path()
    warehouse = f"file://{local}" if local is not None else cfg.warehouse_location()
    return SqlCatalog(cfg.lakehouse.catalog_name, uri=url, warehouse=warehouse, **s3_properties(cfg))


def rest_properties(cfg: WapConfig) -> dict[str, str] | None:
    """Spark's catalog properties of a REST catalog (catalog = "rest", or "custom" naming Iceberg's REST client)."""
    if cfg.lakehouse.catalog not in ("rest", "custom"):
        return None
    from wapflow.lakehouse.catalog_props import catalog_properties

    props = catalog_properties(cfg)
    if props.get("type") != "rest" and props.get("catalog-impl") != "org.apache.iceberg.rest.RESTCatalog":
        return None
    return props


def _open_rest(cfg: WapConfig, props: Mapping[str, str], *, why: str) -> Catalog:
    from wapflow.lakehouse.tls import ca_bundle, trusted_pem_file

    try:
        from pyiceberg.catalog.rest import RestCatalog
    except ImportError:
        raise EnvironmentProblem(
            f"{why} through PyIceberg, which is not installed", hint="pip install 'wapflow[connect]'"
        ) from None
    kept: dict[str, Any] = {k: v for k, v in props.items() if k in _REST_KEYS or k.startswith("header.")}
    if ca_bundle(cfg) is not None:
        kept["ssl"] = {"cabundle": str(trusted_pem_file(cfg))}
    return RestCatalog(cfg.lakehouse.catalog_name, **kept, **s3_properties(cfg))


def added_data_files(tbl: Table, snapshot_id: int) -> Iterator[DataFile]:
    """The data files a snapshot added (as Iceberg's Snapshot.addedDataFiles: its own manifests' ADDED entries)."""
    from wapflow.lakehouse.manifests import added_entries

    snap = tbl.snapshot_by_id(snapshot_id)
    if snap is None:
        return
    yield from added_entries(tbl.io, snap.manifest_list, snapshot_id)


def remove_added_files(
    catalog: Catalog, table: TableName, snapshot_ids: Sequence[int], properties: Mapping[str, str]
) -> int:
    """One new snapshot on main deleting exactly the data files these snapshots added, carrying `properties`
    (what JvmCommits.remove_added_files does through Java). Returns its id. A file no longer on main fails with
    MISSING_FILES; a commit that lands on main meanwhile is kept: the removal is planned again on the new head."""
    from pyiceberg.exceptions import ValidationException

    ident = (*table.namespace, table.name)

    def remove() -> int:  # planned on the table as loaded now: after a conflict, on the new head
        tbl = catalog.load_table(ident)
        check_writable(tbl, table, "remove a run's files from main (wap revert)")
        files = [f for sid in snapshot_ids for f in added_data_files(tbl, int(sid))]
        with tbl.transaction() as tx, tx.update_snapshot(snapshot_properties=dict(properties)).overwrite() as ov:
            for f in files:
                ov.delete_data_file(f)
        snap = tbl.current_snapshot()
        assert snap is not None  # the commit just made one
        return int(snap.snapshot_id)

    def conflict(e: BaseException) -> bool:
        # PyIceberg's own validation refuses a concurrent change too; a file already gone is no conflict.
        if isinstance(e, ValidationException):
            return MISSING_FILES not in str(e)
        return commit_conflict(e)

    return retry_on_conflict(
        remove,
        what=f"removing files from main of {table}",
        is_conflict=conflict,
        hint="main is unchanged by this command; run it again",
    )


def check_writable(tbl: Table, table: TableName, doing: str) -> None:
    """PyIceberg (0.12) reads format v3 tables, deletion vectors included, but writes neither their manifests
    nor their metadata: a commit through it to a v3 table is refused here, before anything is written."""
    import pyiceberg

    version = int(tbl.metadata.format_version)
    if version >= 3:
        raise UsageError(
            f"{table} is an Iceberg format v{version} table, and PyIceberg {pyiceberg.__version__}, which a "
            f"Spark Connect client uses to {doing}, cannot write to v{version} tables",
            hint="run the command with a local or cluster master (Iceberg's Java API in the process), or keep "
            "the table at format version 2 (see the Format v3 guide)",
        )


def table_metadata(catalog: Catalog, table: TableName) -> dict[str, Any]:
    """The table's current metadata as Iceberg's JSON (the keys Iceberg's Java parser writes)."""
    return metadata_json(catalog.load_table((*table.namespace, table.name)))


def metadata_json(tbl: Table) -> dict[str, Any]:
    """The metadata file `tbl` was loaded from, as written (every key, of any format version: PyIceberg 0.12
    refuses to serialize a v3 table's metadata, and a key its model lacks would be lost by a round trip)."""
    import gzip
    import json

    with tbl.io.new_input(tbl.metadata_location).open() as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":  # write.metadata.compression-codec = gzip
        raw = gzip.decompress(raw)
    meta: dict[str, Any] = json.loads(raw)
    return meta


def data_locations(catalog: Catalog, table: TableName, names: Sequence[str]) -> list[str]:
    """Where the table's location provider puts new data files of these names (unpartitioned, as Java's)."""
    provider = catalog.load_table((*table.namespace, table.name)).location_provider()
    return [provider.new_data_location(n) for n in names]


def add_files(
    catalog: Catalog, table: TableName, ref: str, locations: Sequence[str], properties: Mapping[str, str]
) -> None:
    """Commit parquet files already at these locations to `ref` in one append carrying `properties` (what
    JvmCommits.append_files does through Java): PyIceberg reads each footer for the file's metrics and
    partition, and gives the table a name mapping when it has none. A concurrent commit on the table (another
    run's branch) is kept: the append is made again on the new head. The files' names are the run's own, so
    they are not looked for among the table's files first (a scan of every manifest)."""
    ident = (*table.namespace, table.name)

    def add() -> None:  # on the table as loaded now: after a conflict, on the new head
        tbl = catalog.load_table(ident)
        check_writable(tbl, table, "add landed parquet files to a branch as they are")
        tbl.add_files(list(locations), snapshot_properties=dict(properties), check_duplicate_files=False, branch=ref)

    retry_on_conflict(
        add, what=f"adding files to branch {ref} of {table}", hint="main is unchanged by this run; run it again"
    )
