"""How this process commits to a table's metadata, chosen once per lakehouse: refs moved, files added or removed.

Two implementations of one protocol, as pyiceberg's load_catalog chooses a catalog once and callers never ask
which they got (Tables picks one in its constructor, from the session's kind):

- JvmCommits, on a classic session: Iceberg's Java API in the driver's JVM through PySpark's gateway, on the
  table object Spark's catalog plugin caches, so Spark's next read sees the commit without a refresh (and no
  SQL plan is made: ~10 ms a commit of a small run);
- ConnectCommits, on a Spark Connect client (no gateway to a JVM): refs through the server's statements and
  procedures (CREATE/DROP BRANCH, fast_forward, cherrypick_snapshot); data files, which Spark SQL cannot name,
  through PyIceberg on the same catalog (wapflow.lakehouse.pyiceberg_client), after which the server's cached
  table is refreshed to see a commit it did not make.

A commit that meets a concurrent one is retried by the caller, through wapflow.lakehouse.conflicts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from wapflow.errors import UsageError
from wapflow.lakehouse.model import NAME_MAPPING_PROP
from wapflow.sql.identifiers import TableName, quote, sql_string, validate_branch

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyspark.sql import SparkSession

# Up to this many files, an append's manifests are written without Iceberg's worker pool (see append_files).
_DIRECT_COMMIT_FILES = 100


class Commits(Protocol):
    """Commit-level operations on one catalog's tables."""

    def create_branch(self, table: TableName, branch: str) -> int | None:
        """Branch at main's current head; returns that snapshot (None: a table without snapshots, whose branch
        starts at a new empty one)."""
        ...

    def drop_branch(self, table: TableName, branch: str) -> None:
        """Drop the branch if it exists."""
        ...

    def fast_forward(self, table: TableName, branch: str, *, drop: bool) -> tuple[int, bool]:
        """Move main to `branch`'s head (refused unless main is its ancestor); returns main's new head and
        whether the branch went in the same commit (asked with `drop`, where one commit can do both)."""
        ...

    def cherry_pick(self, table: TableName, snapshot_id: int) -> int:
        """Apply an append snapshot again on top of main; returns main's new head."""
        ...

    def append_files(
        self,
        table: TableName,
        ref: str,
        locations: Sequence[str],
        properties: Mapping[str, str],
        *,
        spec_id: int | None = None,
        partitions: Sequence[Sequence[str | None]] = (),
    ) -> None:
        """Commit parquet files already at these locations to `ref` in one append carrying `properties`."""
        ...

    def remove_added_files(self, table: TableName, snapshot_ids: list[int], properties: dict[str, str]) -> int:
        """One new snapshot on main deleting exactly the data files these snapshots added; returns its id."""
        ...

    def data_locations(self, table: TableName, names: Sequence[str]) -> list[str]:
        """Where the table's location provider puts new data files of these names."""
        ...

    def commit_metadata(self, table: TableName) -> dict[str, Any] | None:
        """The table's current metadata as Iceberg's JSON, where files can be committed to it from here."""
        ...

    def check_remove_files(self) -> None:
        """Raise (UsageError, EnvironmentProblem) when files cannot be removed from here: before any change."""
        ...


class IcebergGateway:
    """Iceberg's Java API and Spark's catalog plugin in the driver's JVM, through PySpark's gateway (a classic
    session only), with what each lookup costs paid once."""

    def __init__(self, spark: SparkSession, catalog: str) -> None:
        self.spark = spark
        self.catalog = catalog
        # Java classes and catalog identifiers reached through PySpark's gateway, by name (see jclass).
        self._jclasses: dict[str, Any] = {}
        self._jidents: dict[str, Any] = {}
        self._plugin: Any = None

    def jclass(self, name: str) -> Any:
        """A Java class through PySpark's gateway, looked up once: each lookup walks its package path in gateway
        round trips (~4.5 ms, more than most calls made on the class)."""
        cls = self._jclasses.get(name)
        if cls is None:
            cls = self.spark.sparkContext._jvm
            assert cls is not None
            for part in name.split("."):
                cls = getattr(cls, part)
            self._jclasses[name] = cls
        return cls

    def catalog_plugin(self) -> Any:
        """Spark's catalog plugin of this catalog (Iceberg's SparkCatalog), as Spark's own statements reach it."""
        if self._plugin is None:
            session = self.spark._jsparkSession
            # Spark loads a catalog from the conf of the session active on the calling JVM thread, and a Python
            # thread new to the gateway (DBOS runs steps on its own) has none: without this, a catalog
            # registered on the running session would not be found.
            self.jclass("org.apache.spark.sql.SparkSession").setActiveSession(session)
            self._plugin = session.sessionState().catalogManager().catalog(self.catalog)
        return self._plugin

    def jident(self, table: TableName) -> Any:
        """The table's catalog Identifier (namespace array and name), built once per table."""
        key = table.dotted
        found = self._jidents.get(key)
        if found is None:
            gateway = self.spark.sparkContext._gateway
            assert gateway is not None
            namespace = gateway.new_array(self.jclass("java.lang.String"), len(table.namespace))
            for i, part in enumerate(table.namespace):
                namespace[i] = part
            found = self.jclass("org.apache.spark.sql.connector.catalog.Identifier").of(namespace, table.name)
            self._jidents[key] = found
        return found

    def spark_table(self, table: TableName) -> Any:
        """The catalog plugin's Spark table (Iceberg's SparkTable), as Spark's own reads load it."""
        return self.catalog_plugin().loadTable(self.jident(table))

    def java_table(self, table: TableName) -> Any:
        """The table in Iceberg's Java API: the object the catalog's table cache holds, when it keeps one, so a
        commit made on it is what Spark's reads see next."""
        return self.spark_table(table).table()


class JvmCommits:
    """Commits through Iceberg's Java API on a classic session (see the module's docstring)."""

    def __init__(
        self,
        gateway: IcebergGateway,
        *,
        refresh: Callable[[TableName], None],
        metadata: Callable[[TableName], dict[str, Any] | None],
    ) -> None:
        self.gateway = gateway
        self._refresh = refresh  # Spark's cached table forgotten (Tables.refresh)
        self._metadata = metadata  # the table's metadata JSON as this session sees it (Tables.metadata)

    def create_branch(self, table: TableName, branch: str) -> int | None:
        """As CREATE BRANCH does, without its SQL's plan, on the table refreshed first: this process's catalog
        may cache it from before another process's commit, and the head the branch starts at is the audit's
        base."""
        validate_branch(branch)
        tbl = self.gateway.java_table(table)
        tbl.refresh()
        empty = tbl.currentSnapshot() is None
        tbl.manageSnapshots().createBranch(branch).commit()  # at the current snapshot, or a new empty one
        return None if empty else int(tbl.refs().get(branch).snapshotId())

    def drop_branch(self, table: TableName, branch: str) -> None:
        """No commit when there is no such branch."""
        validate_branch(branch)
        tbl = self.gateway.java_table(table)
        if tbl.refs().containsKey(branch):
            tbl.manageSnapshots().removeBranch(branch).commit()

    def fast_forward(self, table: TableName, branch: str, *, drop: bool) -> tuple[int, bool]:
        """One commit moves main and, with `drop`, removes the branch."""
        validate_branch(branch)
        tbl = self.gateway.java_table(table)
        refs = tbl.manageSnapshots().fastForwardBranch("main", branch)
        if drop:
            refs = refs.removeBranch(branch)
        refs.commit()
        return int(tbl.refs().get("main").snapshotId()), drop

    def cherry_pick(self, table: TableName, snapshot_id: int) -> int:
        tbl = self.gateway.java_table(table)
        tbl.manageSnapshots().cherrypick(int(snapshot_id)).commit()
        return int(tbl.currentSnapshot().snapshotId())

    def append_files(
        self,
        table: TableName,
        ref: str,
        locations: Sequence[str],
        properties: Mapping[str, str],
        *,
        spec_id: int | None = None,
        partitions: Sequence[Sequence[str | None]] = (),
    ) -> None:
        """As Iceberg's add_files procedure does (which cannot target a branch): each file's metrics come from
        its footer, and columns are found by name through the table's name mapping (set from the table's
        schema first when it has none), since such files carry no Iceberg field ids."""
        iceberg = "org.apache.iceberg."
        cls = self.gateway.jclass
        tbl = self.gateway.java_table(table)
        mapping_json = tbl.properties().get(NAME_MAPPING_PROP)
        if mapping_json is None:
            mapping = cls(iceberg + "mapping.MappingUtil").create(tbl.schema())
            mapping_text = cls(iceberg + "mapping.NameMappingParser").toJson(mapping)
            tbl.updateProperties().set(NAME_MAPPING_PROP, mapping_text).commit()
        else:
            mapping = cls(iceberg + "mapping.NameMappingParser").fromJson(mapping_json)
        metrics_config = cls(iceberg + "MetricsConfig").forTable(tbl)
        parquet = cls(iceberg + "FileFormat").PARQUET
        op = tbl.newAppend().toBranch(ref)
        if len(locations) <= _DIRECT_COMMIT_FILES:
            # A few files' manifests are written on this thread: Iceberg's worker pool polls its tasks every
            # 10 ms, which cost a small run's commit ~30 ms of waiting (measured: 92 -> 58 ms per commit).
            direct = cls(iceberg + "relocated.com.google.common.util.concurrent.MoreExecutors")
            op.scanManifestsWith(direct.newDirectExecutorService())
        spec = tbl.spec() if spec_id is None else tbl.specs().get(spec_id)
        if spec is None:
            raise ValueError(f"{table} has no partition spec {spec_id}")
        for i, location in enumerate(locations):
            file = tbl.io().newInputFile(location)
            builder = cls(iceberg + "DataFiles").builder(spec)
            if spec.isPartitioned():
                values = cls("java.util.ArrayList")()
                for value in partitions[i]:
                    values.add(value)
                builder = builder.withPartitionValues(values)
            data_file = (
                builder.withPath(location)
                .withFormat(parquet)
                .withFileSizeInBytes(file.getLength())
                .withMetrics(cls(iceberg + "parquet.ParquetUtil").fileMetrics(file, metrics_config, mapping))
                .build()
            )
            op.appendFile(data_file)
        for k, v in properties.items():
            op.set(k, v)
        op.commit()  # on the table object Spark's next read loads (see java_table): no refresh needed

    def remove_added_files(self, table: TableName, snapshot_ids: list[int], properties: dict[str, str]) -> int:
        tbl = self.gateway.java_table(table)
        op = tbl.newDelete()
        for sid in snapshot_ids:
            it = tbl.snapshot(int(sid)).addedDataFiles(tbl.io()).iterator()
            while it.hasNext():
                op.deleteFile(it.next())  # by DataFile: Iceberg's delete-by-path form matched nothing here
        for k, v in properties.items():
            op.set(k, v)
        op.validateFilesExist()
        op.commit()
        self._refresh(table)
        return int(tbl.currentSnapshot().snapshotId())

    def data_locations(self, table: TableName, names: Sequence[str]) -> list[str]:
        provider = self.gateway.java_table(table).locationProvider()
        return [str(provider.newDataLocation(n)) for n in names]

    def commit_metadata(self, table: TableName) -> dict[str, Any] | None:
        return self._metadata(table)

    def check_remove_files(self) -> None:
        """Iceberg's Java API removes files on any catalog Spark opens."""


class ConnectCommits:
    """Commits from a Spark Connect client (see the module's docstring). `catalog_client`: PyIceberg's client
    of the same catalog, opened on first need (None: not one PyIceberg is opened for)."""

    def __init__(
        self,
        spark: SparkSession,
        catalog: str,
        catalog_client: Callable[[], Catalog] | None,
        *,
        refresh: Callable[[TableName], None],
        head: Callable[[TableName, str], int | None],
    ) -> None:
        self.spark = spark
        self.catalog = catalog
        self.catalog_client = catalog_client
        self._refresh = refresh
        self._head = head

    def _ident(self, table: TableName) -> str:
        return table.sql(self.catalog)

    def _pyiceberg(self) -> Catalog:
        if self.catalog_client is None:
            raise UsageError(
                "removing a run's files needs Iceberg's Java API or PyIceberg on the catalog, and this Spark "
                "Connect session has neither",
                hint="run this command with a config whose master is local (same catalog and warehouse)",
            )
        return self.catalog_client()

    def create_branch(self, table: TableName, branch: str) -> int | None:
        validate_branch(branch)
        base = self._head(table, "main")
        self.spark.sql(f"ALTER TABLE {self._ident(table)} CREATE BRANCH {quote(branch)}")
        return base

    def drop_branch(self, table: TableName, branch: str) -> None:
        validate_branch(branch)
        self.spark.sql(f"ALTER TABLE {self._ident(table)} DROP BRANCH IF EXISTS {quote(branch)}")

    def fast_forward(self, table: TableName, branch: str, *, drop: bool) -> tuple[int, bool]:
        """The fast_forward procedure, which keeps the branch: the caller drops it after."""
        validate_branch(branch)
        row = self.spark.sql(
            f"CALL {quote(self.catalog)}.system.fast_forward("
            f"table => {table.procedure_arg(self.catalog)}, branch => 'main', to => {sql_string(branch)})"
        ).collect()[0]
        return int(row["updated_ref"]), False

    def cherry_pick(self, table: TableName, snapshot_id: int) -> int:
        row = self.spark.sql(
            f"CALL {quote(self.catalog)}.system.cherrypick_snapshot("
            f"table => {table.procedure_arg(self.catalog)}, snapshot_id => {int(snapshot_id)})"
        ).collect()[0]
        return int(row["current_snapshot_id"])

    def append_files(
        self,
        table: TableName,
        ref: str,
        locations: Sequence[str],
        properties: Mapping[str, str],
        *,
        spec_id: int | None = None,
        partitions: Sequence[Sequence[str | None]] = (),
    ) -> None:
        """PyIceberg's add_files, which reads the same footers for the metrics and partitions."""
        from wapflow.lakehouse.pyiceberg_client import add_files

        add_files(self._pyiceberg(), table, ref, locations, properties)
        self._refresh(table)

    def remove_added_files(self, table: TableName, snapshot_ids: list[int], properties: dict[str, str]) -> int:
        from wapflow.lakehouse.pyiceberg_client import remove_added_files

        sid = remove_added_files(self._pyiceberg(), table, snapshot_ids, properties)
        self._refresh(table)  # the server's cached table must see the commit it did not make
        return sid

    def data_locations(self, table: TableName, names: Sequence[str]) -> list[str]:
        from wapflow.lakehouse.pyiceberg_client import data_locations

        return data_locations(self._pyiceberg(), table, names)

    def commit_metadata(self, table: TableName) -> dict[str, Any] | None:
        """None when PyIceberg does not reach the catalog: no commit of files either."""
        if self.catalog_client is None:
            return None
        from wapflow.lakehouse.pyiceberg_client import table_metadata

        try:
            return table_metadata(self.catalog_client(), table)
        except Exception:  # noqa: BLE001 - a catalog PyIceberg does not open here, or cannot load: no commit either
            return None

    def check_remove_files(self) -> None:
        self._pyiceberg()


def commits_for(
    spark: SparkSession,
    catalog: str,
    *,
    gateway: IcebergGateway | None,
    catalog_client: Callable[[], Catalog] | None,
    refresh: Callable[[TableName], None],
    head: Callable[[TableName, str], int | None],
    metadata: Callable[[TableName], dict[str, Any] | None],
) -> Commits:
    """The one choice: Iceberg's Java API where a gateway reaches the driver's JVM, else the Connect client's
    statements and PyIceberg."""
    if gateway is not None:
        return JvmCommits(gateway, refresh=refresh, metadata=metadata)
    return ConnectCommits(spark, catalog, catalog_client, refresh=refresh, head=head)
