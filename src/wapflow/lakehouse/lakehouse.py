"""The Lakehouse: config + lazily started Spark + the catalog's tables and branches + the run store."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from functools import cached_property
from typing import TYPE_CHECKING

from wapflow.config import WapConfig, load_config
from wapflow.lakehouse import spark_s3 as s3_spark
from wapflow.lakehouse.branches import BranchBackend, BranchInfo, IcebergTableBranches, table_branches
from wapflow.lakehouse.metadata import CatalogTables, MetadataSource, TableMetadata, direct_reads, source_for
from wapflow.lakehouse.session import build_session, gateway_nodelay
from wapflow.lakehouse.tables import Tables
from wapflow.runs.ledger import Ledger
from wapflow.runs.store import RunStore
from wapflow.spark.kind import is_connect_url
from wapflow.sql.identifiers import TableName
from wapflow.storage import Storage

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyspark.sql import SparkSession

    from wapflow.lakehouse.group_commit import GroupCommit
    from wapflow.lakehouse.nessie import NessieClient
    from wapflow.lakehouse.progress import Meter


def _quiet(_: str) -> None:
    return None


class Lakehouse:
    """One configured lakehouse: its catalog and tables, branch backend, storage, run store and ledger.
    Spark starts on first use of `spark` (or `tables`, `branches`), never before."""

    def __init__(
        self,
        config: WapConfig | None = None,
        *,
        spark: SparkSession | None = None,
        progress: Callable[[str], None] | None = None,
        meter: Meter | None = None,
    ) -> None:
        self.config = config if config is not None else load_config()
        self.progress = progress or _quiet
        self.meter = meter  # a progress bar for long Spark work (the CLI's, on a terminal); None: lines only
        self._spark = spark
        self._storage_checked = False
        self._catalog_checked = False
        self._pyiceberg: Catalog | None = None
        self._group: GroupCommit | str | None = None

    def tracked(self, label: str) -> AbstractContextManager[None]:
        """The block's Spark jobs on the meter (if any), once it has run for a couple of seconds."""
        from wapflow.lakehouse.progress import watching

        if self.meter is None:
            return contextlib.nullcontext()
        return watching(self.spark, self.meter, label)

    @property
    def catalog(self) -> str:
        return self.config.lakehouse.catalog_name

    @cached_property
    def storage(self) -> Storage:
        """Local folders, and S3 with the [s3] settings when the config uses S3."""
        return Storage(s3_spark.s3_settings(self.config), s3_enabled=s3_spark.uses_s3(self.config))

    def check_storage(self) -> None:
        """An s3:// warehouse must exist and be writable: checked once, before Spark touches a table."""
        if self._storage_checked or not s3_spark.warehouse_on_s3(self.config):
            return
        s3_spark.check_master(self.config)
        self.progress(f"checking access to {self.config.warehouse_location()}")
        self.storage.s3.check_write(self.config.warehouse_location())
        self._storage_checked = True

    @cached_property
    def nessie(self) -> NessieClient:
        """The Nessie REST client (catalog = "nessie"); needs no Spark."""
        from wapflow.lakehouse.nessie import NessieClient

        return NessieClient.for_config(self.config)

    @property
    def _on_nessie(self) -> bool:
        return self.config.lakehouse.catalog == "nessie"

    @property
    def connect_client(self) -> bool:
        """Spark Connect (master sc://): its catalog and warehouse may answer its server only, not this machine."""
        return is_connect_url(self.config.lakehouse.master)

    def check_catalog(self) -> None:
        """Nessie down, wrong URL or token: one clear error before Spark starts or anything is written."""
        if self._catalog_checked or not self._on_nessie:
            return
        self.nessie.config()
        self._catalog_checked = True

    @property
    def spark(self) -> SparkSession:
        self.check_storage()
        self.check_catalog()
        if self._spark is None:
            self._spark = build_session(self.config, progress=self.progress)
        else:
            from wapflow.lakehouse.session import register_catalog

            register_catalog(self._spark, self.config)
        s3_spark.apply_to_session(self._spark, self.config)
        gateway_nodelay(self._spark)  # once per thread: 40 ms less per py4j reply of 8-64 KB
        return self._spark

    def on_this_thread(self) -> None:
        """Spark calls from this thread without the gateway's 40 ms delays (see gateway_nodelay): for
        code that reaches Spark through `tables` or `branches` on a new thread (DBOS runs steps on its own).
        Nothing before Spark has started: the first `spark` access does it then."""
        if self._spark is not None:
            gateway_nodelay(self._spark)

    @cached_property
    def tables(self) -> Tables:
        from wapflow.lakehouse.manifests import ManifestMetrics

        return Tables(
            self.spark,
            self.catalog,
            catalog_client=self._pyiceberg_catalog,
            manifests=ManifestMetrics(self.storage),
            format_version=lambda t: self.config.format_version_for(t.dotted),
        )

    def _pyiceberg_catalog(self) -> Catalog:
        """The catalog through PyIceberg, for what a Spark Connect session cannot commit (Tables.remove_added_files);
        opened once."""
        from wapflow.lakehouse.pyiceberg_client import open_catalog

        if self._pyiceberg is None:
            self._pyiceberg = open_catalog(self.config, why="a Spark Connect client removes a run's files")
        return self._pyiceberg

    def _metadata_source(self, ref: str = "main") -> MetadataSource | None:
        """The catalog read without Spark (None: only Spark reads this catalog here, or WAP_METADATA=spark)."""
        if not direct_reads():
            return None
        if self._on_nessie:
            self.check_catalog()  # Nessie down, wrong URL or token: the same error as before Spark starts
            return source_for(self.config, self.storage, nessie=self.nessie, ref=ref)
        return source_for(self.config, self.storage)

    def catalog_metadata(self, ref: str = "main") -> CatalogTables | None:
        """The catalog's table metadata read directly, with no JVM (a new view: each loads a table once), or None
        where only Spark reads this catalog (wapflow.lakehouse.metadata.source_for). Never starts Spark."""
        from wapflow.lakehouse.manifests import ManifestMetrics

        source = self._metadata_source(ref)
        return None if source is None else CatalogTables(source, self.catalog, ManifestMetrics(self.storage))

    @property
    def metadata(self) -> TableMetadata:
        """Read-only table metadata (snapshots, refs, the catalog's tables) for commands that read no data:
        from the catalog itself, with no JVM, where wapflow.lakehouse.metadata can read it; else Spark's view.
        A new view on every access (each loads a table once), so later commits show."""
        direct = self.catalog_metadata()
        return self.tables if direct is None else direct

    @property
    def file_metrics(self) -> TableMetadata:
        """Where the column metrics of the data files snapshots added are read (added_file_metrics): from the
        catalog and the manifests with no JVM where the catalog is read directly and PyIceberg is installed;
        else Spark's view (Tables: the manifests through the gateway's metadata, or the metadata tables)."""
        from wapflow.lakehouse.manifests import pyiceberg_installed

        direct = self.catalog_metadata() if pyiceberg_installed() else None
        return self.tables if direct is None else direct

    def list_branches(self, table: TableName | None = None) -> list[BranchInfo]:
        """Branches other than main (of one table, or all), as the branch backend's list/all_branches give
        them, without Spark where the catalog is read directly."""
        view = self.catalog_metadata()
        if view is None:
            return self.branches.list(table) if table is not None else self.branches.all_branches()
        if self._on_nessie:
            from wapflow.lakehouse.nessie import branches_changing, catalog_branches

            if table is None:
                return catalog_branches(self.nessie)

            def at(ref: str) -> TableMetadata:
                found = self.catalog_metadata(ref)
                assert found is not None
                return found

            return branches_changing(self.nessie, view, at, table)
        tables = [table] if table is not None else view.list_tables()
        return [b for t in tables for b in table_branches(view, t)]

    def sandbox_left(self, branch: str, tables: Sequence[TableName], staging: TableName) -> bool:
        """Whether a run's sandbox may hold anything to drop: the branch on one of its tables, or its staging
        table. Answered False only from the catalog's metadata read with no JVM (table branches); a
        catalog-level branch (Nessie), a Spark Connect client (its catalog may answer its server only), a
        catalog only Spark reads here, or a direct read that fails: it may be left, Spark looks."""
        if self._on_nessie or self.connect_client:
            return True
        view = self.catalog_metadata()
        if view is None:
            return True
        try:
            return view.exists(staging) or any(view.exists(t) and branch in view.refs(t) for t in tables)
        except Exception:  # noqa: BLE001 - Spark's view then looks, and reports what is wrong
            return True

    @cached_property
    def branches(self) -> BranchBackend:
        """The one place that knows which branch backend the config chose."""
        if self._on_nessie:
            from wapflow.lakehouse.nessie import NessieBranches

            return NessieBranches(self.config, self.tables, self.nessie)
        from wapflow.lakehouse.session import catalog_caches_tables

        return IcebergTableBranches(
            self.tables,
            group=self._group_commit,
            catalog_cache=catalog_caches_tables(self.config),
            progress=lambda message: self.progress(message),
        )

    def _group_commit(self) -> GroupCommit | str:
        """How the catalog commits several tables at once (or why not): chosen once, on first need."""
        if self._group is None:
            from wapflow.lakehouse.group_commit import group_commit_for

            self._group = group_commit_for(self.config)
        return self._group

    def why_not_together(self) -> str | None:
        """None when this lakehouse can publish several tables in one atomic commit, else why not; raises
        UsageError when the catalog, asked, refuses (a REST server without multi-table commits). No JVM."""
        if self._on_nessie:
            return None
        group = self._group_commit()
        if isinstance(group, str):
            return group
        group.check()
        return None

    @cached_property
    def store(self) -> RunStore:
        return RunStore(self.config.run_store_url())

    @cached_property
    def ledger(self) -> Ledger:
        """The file ledger, in the run store's database."""
        return Ledger(self.store.engine)
