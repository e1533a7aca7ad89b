"""Iceberg table operations through Spark SQL and metadata tables."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wapflow.audit.metrics import FileMetrics, summed_file_metrics
from wapflow.errors import UsageError, WapError
from wapflow.lakehouse.commits import Commits, IcebergGateway, commits_for
from wapflow.lakehouse.lineage import runs_on_main
from wapflow.lakehouse.model import (
    DEFAULT_FORMAT_VERSION,
    FORMAT_VERSION_PROP,
    LINEAGE_FROM_VERSION,
    METADATA_DELETE_AFTER_COMMIT_PROP,
    METADATA_PREVIOUS_VERSIONS_MAX_PROP,
    WAP_ENABLED_PROP,
    Ref,
    Snapshot,
    refs_of,
    row_change_properties,
    rows_at,
    snapshot_property_confs,
    snapshots_of,
)
from wapflow.lakehouse.reads import SnapshotReads
from wapflow.spark.shared_session import sql_with_confs
from wapflow.sql.identifiers import TableName, quote, sql_string, validate_branch, validate_part

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructField, StructType

    from wapflow.lakehouse.manifests import ManifestMetrics


class Tables(SnapshotReads):
    """Reads and DDL for Iceberg tables in one Spark catalog. Commits to their metadata (refs, files) go through
    `commits`, the implementation chosen once for this session's kind (wapflow.lakehouse.commits)."""

    def __init__(
        self,
        spark: SparkSession,
        catalog: str,
        catalog_client: Callable[[], Catalog] | None = None,
        manifests: ManifestMetrics | None = None,
        format_version: Callable[[TableName], int] | None = None,
    ) -> None:
        self.spark = spark
        self.catalog = catalog
        # The Iceberg format version a new table is created with (WapConfig.format_version_for); unset: 2.
        self.format_version = format_version or (lambda _t: DEFAULT_FORMAT_VERSION)
        # PyIceberg's client of the same catalog (wapflow.lakehouse.pyiceberg_client.open_catalog), opened on
        # first need: what a Spark Connect session commits through where Spark SQL has no statement for it.
        self.catalog_client = catalog_client
        # Column metrics of data files read from the manifests (no Spark job); None: the metadata tables only.
        self.manifests = manifests
        # The last metadata JSON read per table, by its metadata file location (see _metadata); callers only read it.
        self._metadata_seen: dict[str, tuple[str, dict[str, Any]]] = {}
        # The snapshots parsed from the metadata above, while it is the same object (a run asks ~7 times; with
        # a long history kept for revert_window the parse grew each run's time, benchmarks/bench_maintain.py).
        self._snapshots_seen: dict[str, tuple[dict[str, Any], dict[int, Snapshot]]] = {}
        # Iceberg's Java API in the driver's JVM: a classic session only (Spark Connect has no gateway to one).
        self._gateway = IcebergGateway(spark, catalog) if _has_gateway(spark) else None
        # How this process commits to table metadata (refs moved, files added or removed), chosen once for the
        # session's kind (wapflow.lakehouse.commits): the catalog's commits go through it.
        self.commits: Commits = commits_for(
            spark,
            catalog,
            gateway=self._gateway,
            catalog_client=catalog_client,
            refresh=self.refresh,
            head=self.head,
            metadata=self._metadata,
        )

    def ident(self, table: TableName) -> str:
        return table.sql(self.catalog)

    def exists(self, table: TableName) -> bool:
        """Asked about six times a run: on a classic session, of the catalog plugin itself (~0.3 ms, where
        `spark.catalog.tableExists` resolves the name through the session's analyzer: ~8 ms)."""
        if self._gateway is not None:
            return bool(self._gateway.catalog_plugin().tableExists(self._gateway.jident(table)))
        return bool(self.spark.catalog.tableExists(self.ident(table)))

    def ensure_namespace(self, table: TableName) -> None:
        self.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {table.namespace_sql(self.catalog)}")

    def namespace_exists(self, table: TableName) -> bool:
        try:
            self.spark.sql(f"DESCRIBE NAMESPACE {table.namespace_sql(self.catalog)}").collect()
        except Exception:  # noqa: BLE001 - Spark's "no such namespace" has several classes across versions
            return False
        return True

    def create_like(
        self,
        table: TableName,
        df: DataFrame,
        partitioned_by: Sequence[str] = (),
        properties: Mapping[str, str] | None = None,
    ) -> None:
        """Create an empty table with the batch's schema; its first (empty) snapshot gives branches a base.

        `partitioned_by`: Spark DDL of the partition fields (wapflow.sql.layout's PartitionField.sql(),
        names quoted); `properties`: more table properties (the write distribution mode). Its format version
        is `format_version`'s for it (wap.toml's `format_version`); a v3 table is made merge-on-read
        (model.row_change_properties)."""
        version = self.format_version(table)
        props = {
            FORMAT_VERSION_PROP: str(version),
            **row_change_properties(version),
            WAP_ENABLED_PROP: "true",
            # Old metadata.json files go after each commit (a WAP run adds ~4); `wap maintain` sets the
            # number kept from [maintenance] metadata_versions_max.
            METADATA_DELETE_AFTER_COMMIT_PROP: "true",
            METADATA_PREVIOUS_VERSIONS_MAX_PROP: "100",
            **(properties or {}),
        }
        if not partitioned_by:
            writer = df.limit(0).writeTo(self.ident(table)).using("iceberg")
            for k, v in props.items():
                writer = writer.tableProperty(k, v)
            writer.create()
            return
        # DataFrameWriterV2.partitionedBy has no truncate(); CREATE TABLE ... AS SELECT takes every transform.
        view = f"wap_create_{uuid.uuid4().hex}"
        df.limit(0).createOrReplaceTempView(view)
        try:
            tblprops = ", ".join(f"{sql_string(k)} = {sql_string(v)}" for k, v in props.items())
            self.spark.sql(
                f"CREATE TABLE {self.ident(table)} USING iceberg PARTITIONED BY ({', '.join(partitioned_by)}) "
                f"TBLPROPERTIES ({tblprops}) AS SELECT * FROM {quote(view)}"
            )
        finally:
            self.spark.catalog.dropTempView(view)

    def refresh(self, table: TableName) -> None:
        """Forget cached metadata (Iceberg's catalog cache keeps a table for 30 s): see other processes' commits."""
        self.spark.catalog.refreshTable(self.ident(table))

    def drop(self, table: TableName) -> None:
        self.spark.sql(f"DROP TABLE IF EXISTS {self.ident(table)} PURGE")

    def add_columns(self, table: TableName, columns: list[StructField]) -> None:
        """ALTER TABLE ... ADD COLUMNS for validated names and Spark's own type strings."""
        parts = []
        for f in columns:
            validate_part(f.name, what="new column name")
            parts.append(f"{quote(f.name)} {f.dataType.simpleString()}")
        self.spark.sql(f"ALTER TABLE {self.ident(table)} ADD COLUMNS ({', '.join(parts)})")

    def current_format_version(self, table: TableName) -> int:
        """The table's Iceberg format version: its metadata JSON's, or Spark's `format-version` property."""
        meta = self._metadata(table)
        if meta is not None:
            return int(meta.get(FORMAT_VERSION_PROP, 1))
        rows = self.spark.sql(f"SHOW TBLPROPERTIES {self.ident(table)} ({sql_string(FORMAT_VERSION_PROP)})").collect()
        value = str(rows[0]["value"]) if rows else "1"
        return int(value) if value.isdigit() else 1

    def runs_lineage(
        self, table: TableName, run_ids: Collection[str], head: int | None = None
    ) -> dict[str, dict[str, Any]]:
        """On a v3 table, what row lineage says of each run's commits on main (main at `head`, when the caller
        just moved it): their sequence numbers and rows (RunRecord.lineage), by which `wap revert` finds the
        rows once the snapshots are expired. Empty on an older format; runs main holds nothing of, and merges or
        replaces (reverted by rollback), are left out."""
        if not run_ids or self.current_format_version(table) < LINEAGE_FROM_VERSION:
            return {}
        if head is not None and self.head(table, "main") != head:
            self.refresh(table)
        known = self.snapshots(table)
        return {
            run: {
                "sequence_numbers": sorted({self.sequence_number(table, s) for s in mine}),
                "rows": sum(known[s].added_records for s in mine if s in known),
            }
            for run, mine in runs_on_main(self, table, run_ids).items()
            # An append's rows are its own; a merge's commit also rewrites rows it did not change.
            if all(s in known and known[s].operation in (None, "append") for s in mine)
        }

    def sequence_number(self, table: TableName, snapshot_id: int) -> int:
        """A commit's sequence number, the `_last_updated_sequence_number` of the rows it wrote on a v3 table:
        from the table's metadata, or (a Spark Connect client, no metadata JSON) from the entries it added, as
        Iceberg's `all_entries` metadata table lists them."""
        known = self.snapshots(table).get(snapshot_id)
        if known is not None and known.sequence_number is not None:
            return known.sequence_number
        rows = self.spark.sql(
            f"SELECT max(sequence_number) FROM {table.metadata_sql(self.catalog, 'all_entries')} "
            f"WHERE snapshot_id = {int(snapshot_id)} AND status = 1"
        ).collect()
        if not rows or rows[0][0] is None:
            raise UsageError(
                f"the sequence number of snapshot {snapshot_id} of {table} is not found: its rows cannot be told apart",
                hint=f"main is unchanged; see `wap history {table.dotted}`",
            )
        return int(rows[0][0])

    def delete_by_lineage(
        self, table: TableName, sequence_numbers: Sequence[int], properties: Mapping[str, str]
    ) -> int:
        """One new snapshot on main deleting the rows whose row lineage says these commits last wrote them
        (`_last_updated_sequence_number`, a v3 table's: kept through compaction, so the rows are found after
        their files were rewritten). Rows a later commit updated carry its number and stay. On a merge-on-read
        table only deletion vectors are written. Returns the new head.

        Iceberg cannot bind a filter on a metadata column, so the condition names the rows by `_row_id` (unique
        and stable in v3) through a subquery, which Spark evaluates itself."""
        ident = self.ident(table)
        seqs = ", ".join(str(int(n)) for n in sequence_numbers)
        sql_with_confs(
            self.spark,
            f"DELETE FROM {ident} WHERE _row_id IN "
            f"(SELECT _row_id FROM {ident} WHERE _last_updated_sequence_number IN ({seqs}))",
            snapshot_property_confs(properties),
        )
        self.refresh(table)
        head = self.head(table, "main")
        assert head is not None
        return head

    def roll_back(self, table: TableName, snapshot_id: int) -> None:
        """Make `snapshot_id` (an ancestor of the current one) the table's current snapshot again."""
        self.spark.sql(
            f"CALL {quote(self.catalog)}.system.rollback_to_snapshot("
            f"table => {table.procedure_arg(self.catalog)}, snapshot_id => {int(snapshot_id)})"
        )

    def metadata(self, table: TableName) -> dict[str, Any] | None:
        """The table's current metadata as Iceberg's JSON (schemas, specs, sort orders, properties, location);
        None where no gateway reaches Iceberg's Java API (Spark Connect)."""
        return self._metadata(table)

    def java_table(self, table: TableName) -> Any:
        """The table in Iceberg's Java API, through PySpark's gateway (a classic session only): the object the
        catalog's table cache holds, when it keeps one, so a commit made on it is what Spark's reads see next."""
        if self._gateway is None:
            raise UsageError(
                f"{table} is reached through Iceberg's Java API here, which a Spark Connect session has no gateway to",
                hint="run this command with a config whose master is local (same catalog and warehouse)",
            )
        return self._gateway.java_table(table)

    def schema(self, table: TableName) -> StructType:
        """The table's columns as Spark reads them. From the catalog's table object on a classic session (the
        schema Spark's relation is built from, without the analysis of `spark.table`: ~12 ms of a small run);
        through Spark where that fails (no such table: Spark's own error) and on Spark Connect."""
        if self._gateway is not None:
            from py4j.protocol import Py4JError  # type: ignore[import-untyped]  # py4j ships no types
            from pyspark.sql.types import StructType

            try:
                text = self._gateway.spark_table(table).schema().json()
            except Py4JError:
                pass
            else:
                return StructType.fromJson(json.loads(text))
        return self.spark.table(self.ident(table)).schema

    def read(self, table: TableName, branch: str | None = None) -> DataFrame:
        if branch:
            return self.spark.table(table.branch_sql(self.catalog, branch))
        return self.spark.table(self.ident(table))

    def read_increment(self, table: TableName, start_exclusive: int | None, end_inclusive: int) -> DataFrame:
        """Rows appended after one snapshot up to another: the audit reads only what a run added."""
        reader = self.spark.read.format("iceberg")
        if start_exclusive is None:
            return reader.option("versionAsOf", str(end_inclusive)).load(self.ident(table))
        return (
            reader.option("start-snapshot-id", str(start_exclusive))
            .option("end-snapshot-id", str(end_inclusive))
            .load(self.ident(table))
        )

    def _metadata(self, table: TableName) -> dict[str, Any] | None:
        """The table's current metadata as Iceberg's own JSON, in one gateway call and no Spark job (a
        metadata-table query is a Spark job: ~50 ms each, most of a small run's time). The same cached
        table object the metadata tables read, so the view is the same. None on Spark Connect (no gateway)
        or if the gateway call fails: the metadata tables answer then, and raise their usual errors."""
        if self._gateway is None:
            return None
        from py4j.protocol import Py4JError  # py4j ships no types (the ignore is on the first import)

        ident = self.ident(table)
        try:
            current = self._gateway.java_table(table).operations().current()
            # A metadata file is never rewritten: while the table's is the same, so is its JSON (a run asks
            # about ten times, and the JSON grows with the table's history).
            location = current.metadataFileLocation()
            seen = self._metadata_seen.get(ident)
            if location is not None and seen is not None and seen[0] == location:
                return seen[1]
            text = self._gateway.jclass("org.apache.iceberg.TableMetadataParser").toJson(current)
        except Py4JError:
            return None
        meta: dict[str, Any] = json.loads(text)
        if location is not None:
            self._metadata_seen[ident] = (str(location), meta)
        return meta

    def snapshots(self, table: TableName) -> dict[int, Snapshot]:
        meta = self._metadata(table)
        if meta is not None:
            ident = self.ident(table)
            seen = self._snapshots_seen.get(ident)
            if seen is None or seen[0] is not meta:
                seen = self._snapshots_seen[ident] = (meta, snapshots_of(meta))
            return dict(seen[1])  # the caller's own mapping of the same (frozen) snapshots
        source = table.metadata_sql(self.catalog, "snapshots")
        rows = self.spark.sql(
            f"SELECT snapshot_id, parent_id, committed_at, operation, summary FROM {source}"
        ).collect()
        return {
            r["snapshot_id"]: Snapshot(
                r["snapshot_id"], r["parent_id"], r["committed_at"], r["operation"], dict(r["summary"] or {})
            )
            for r in rows
        }

    def refs(self, table: TableName) -> dict[str, Ref]:
        meta = self._metadata(table)
        if meta is not None:
            return refs_of(meta)
        rows = self.spark.sql(
            f"SELECT name, type, snapshot_id FROM {table.metadata_sql(self.catalog, 'refs')}"
        ).collect()
        return {r["name"]: Ref(r["name"], r["type"], r["snapshot_id"]) for r in rows}

    def unreferenced_local_files(self, table: TableName, since: float) -> list[Path]:
        """Files under a local table's data folder written at or after `since` (epoch seconds) that no snapshot
        of any ref refers to: what a write cut short left behind (a file whose close failed on a full disk is
        not one Iceberg's abort knows of). Empty for a table not on a local filesystem."""
        meta = self._metadata(table)
        table_root = local_location(str((meta or {}).get("location") or ""))
        if table_root is None:
            return []
        root = table_root / "data"
        if not root.is_dir():
            return []
        fresh = [p for p in root.rglob("*") if p.is_file() and p.stat().st_mtime >= since]
        if not fresh:
            return []
        rows = self.spark.sql(f"SELECT file_path FROM {table.metadata_sql(self.catalog, 'all_files')}").collect()
        referenced = {str(local_location(str(r["file_path"])) or r["file_path"]) for r in rows}
        left: list[Path] = []
        for p in fresh:
            data = p.with_name(p.name[1:].removesuffix(".crc")) if p.name.startswith(".") else p  # Hadoop's .crc
            if str(data) not in referenced:
                left.append(p)
        return left

    def _manifest_metadata(self, table: TableName) -> dict[str, Any] | None:
        """The table's metadata when its manifests can be read here (classic session, PyIceberg installed,
        files where wapflow's Storage reads them), else None: the metadata tables answer, a Spark job each.
        The one place that chooses between the two."""
        from wapflow.lakehouse.manifests import worth_loading

        if self.manifests is None or not worth_loading():
            return None
        meta = self._metadata(table)
        return meta if self.manifests.available(meta) else None

    def added_file_metrics(self, table: TableName, branch: str, snapshot_ids: list[int]) -> FileMetrics:
        """Column metrics summed over the data files the given snapshots added (no data file is read): from
        the manifests where they can be read here (~5 ms), else the `entries` metadata table (~0.1 s)."""
        if branch != "main":
            validate_branch(branch)
        ids = [int(i) for i in snapshot_ids]
        meta = self._manifest_metadata(table)
        if meta is not None and self.manifests is not None:
            try:
                return self.manifests.added(meta, ids)
            except (OSError, WapError):  # a manifest this process cannot read: Spark's own reading may
                pass
        rows = self.spark.sql(
            f"SELECT data_file.record_count AS rc, readable_metrics AS m "
            f"FROM {table.metadata_sql(self.catalog, 'entries')} VERSION AS OF {sql_string(branch)} "
            f"WHERE status = 1 AND data_file.content = 0 AND snapshot_id IN ({', '.join(map(str, ids))})"
        ).collect()
        return summed_file_metrics((int(r["rc"]), r["m"].asDict() if r["m"] is not None else {}) for r in rows)

    def live_file_metrics(self, table: TableName, branch: str = "main") -> FileMetrics:
        """Column metrics summed over every data file live at a branch's head (what `wap diff` compares a batch
        with), no data file is read: from the manifests where they can be read here, else the `files` metadata
        table. Delete files are not counted."""
        if branch != "main":
            validate_branch(branch)
        meta = self._manifest_metadata(table)
        if meta is not None and self.manifests is not None:
            ref = refs_of(meta).get(branch)
            if ref is None:
                return FileMetrics(rows=0)
            try:
                return self.manifests.live(meta, ref.snapshot_id)
            except (OSError, WapError):  # a manifest this process cannot read: Spark's own reading may
                pass
        head = self.head(table, branch)
        if head is None:
            return FileMetrics(rows=0)
        rows = self.spark.sql(
            f"SELECT record_count AS rc, readable_metrics AS m "
            f"FROM {table.metadata_sql(self.catalog, 'files')} VERSION AS OF {sql_string(branch)} WHERE content = 0"
        ).collect()
        fm = summed_file_metrics((int(r["rc"]), r["m"].asDict() if r["m"] is not None else {}) for r in rows)
        fm.reader_rows = rows_at(self.snapshots(table), head)
        return fm

    def list_tables(self) -> list[TableName]:
        found: list[TableName] = []

        def walk(ns: tuple[str, ...]) -> None:
            prefix = ".".join(quote(p) for p in (self.catalog, *ns))
            for row in self.spark.sql(f"SHOW NAMESPACES IN {prefix}").collect():
                child = tuple(str(row[0]).split("."))
                walk(child)
            if ns:
                for row in self.spark.sql(f"SHOW TABLES IN {prefix}").collect():
                    if not row["isTemporary"]:
                        found.append(TableName(ns, row["tableName"]))

        walk(())
        return sorted(set(found), key=lambda t: t.dotted)

    def row_count(self, table: TableName, branch: str | None = None) -> int:
        return int(self.read(table, branch).count())


def _has_gateway(spark: SparkSession) -> bool:
    """A session with a gateway to its JVM, where Iceberg's Java API answers in-process (not Spark Connect)."""
    from wapflow.spark.kind import is_connect

    return not is_connect(spark) and getattr(spark, "_jsparkSession", None) is not None


def local_location(location: str) -> Path | None:
    """A data file location on this machine's file system (file:/..., file:///..., or a bare path), else None."""
    if location.startswith("file:"):
        return Path(location.removeprefix("file://").removeprefix("file:"))
    if location.startswith("/"):
        return Path(location)
    return None
