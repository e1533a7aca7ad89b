"""The Lakehouse: config + lazily started Spark + its Iceberg catalog (wapflow.lakehouse.catalog) + the run store."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from functools import cached_property
from typing import TYPE_CHECKING

from wapflow.config import WapConfig, load_config
from wapflow.lakehouse import spark_s3 as s3_spark
from wapflow.lakehouse.session import build_session, gateway_nodelay
from wapflow.lakehouse.tables import Tables
from wapflow.runs.ledger import Ledger
from wapflow.runs.store import RunStore
from wapflow.spark.kind import is_connect_url
from wapflow.storage import Storage

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog as PyIcebergCatalog
    from pyspark.sql import SparkSession

    from wapflow.lakehouse.catalog import Catalog
    from wapflow.lakehouse.nessie import NessieClient
    from wapflow.lakehouse.progress import Meter
    from wapflow.lakehouse.reads import TableMetadata


def _quiet(_: str) -> None:
    return None


class Lakehouse:
    """One configured lakehouse: its Iceberg catalog (`iceberg`) and Spark's view of its tables, storage, run
    store and ledger. Spark starts on first use of `spark` (or `tables`, or a catalog operation that needs it)."""

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
        self._pyiceberg: PyIcebergCatalog | None = None

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
    def connect_client(self) -> bool:
        """Spark Connect (master sc://): its catalog and warehouse may answer its server only, not this machine."""
        return is_connect_url(self.config.lakehouse.master)

    @property
    def spark(self) -> SparkSession:
        self.check_storage()
        self.iceberg.check()
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

    def _pyiceberg_catalog(self) -> PyIcebergCatalog:
        """The catalog through PyIceberg, for what a Spark Connect session cannot commit (Commits.remove_added_files);
        opened once."""
        from wapflow.lakehouse.pyiceberg_client import open_catalog

        if self._pyiceberg is None:
            self._pyiceberg = open_catalog(self.config, why="a Spark Connect client removes a run's files")
        return self._pyiceberg

    @cached_property
    def iceberg(self) -> Catalog:
        """The lakehouse's Iceberg catalog, chosen once (wapflow.lakehouse.catalog): a run's sandbox, the commit
        that publishes it, and table metadata reads. Spark starts only when one of its operations needs it."""
        from wapflow.lakehouse.catalog import open_catalog

        return open_catalog(
            self.config,
            self.storage,
            tables=lambda: self.tables,
            nessie=lambda: self.nessie,
            progress=lambda message: self.progress(message),
        )

    @property
    def metadata(self) -> TableMetadata:
        """Read-only table metadata (the catalog's, with no JVM, where it can be read so; else Spark's view): a
        new view on every access (each loads a table once), so later commits show."""
        return self.iceberg.metadata()

    @cached_property
    def store(self) -> RunStore:
        return RunStore(self.config.run_store_url())

    @cached_property
    def ledger(self) -> Ledger:
        """The file ledger, in the run store's database."""
        return Ledger(self.store.engine)
