"""What every catalog kind reads the same way: its tables' metadata from the catalog itself, with no JVM, where a
MetadataSource reads it (wapflow.lakehouse.metadata), else through Spark's view (wapflow.lakehouse.tables.Tables).

A catalog kind (wapflow.lakehouse.catalog) says where its metadata is read (`_source`, None: only Spark reads it
here); the views below follow from that, and callers never ask which they got. Spark is started only by a caller
that needs Spark's view, never by a read the catalog answers directly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from wapflow.lakehouse.metadata import CatalogTables, MetadataSource, direct_reads

if TYPE_CHECKING:
    from wapflow.config import WapConfig
    from wapflow.lakehouse.manifests import ManifestMetrics
    from wapflow.lakehouse.reads import TableMetadata
    from wapflow.lakehouse.tables import Tables
    from wapflow.storage import Storage


class CatalogReads:
    """Metadata reads of one catalog: `direct` (no JVM, or None), `metadata` (direct, else Spark's), `file_metrics`."""

    def __init__(self, cfg: WapConfig, storage: Storage, tables: Callable[[], Tables]) -> None:
        self.cfg = cfg
        self.storage = storage
        self._tables = tables
        self.name = cfg.lakehouse.catalog_name  # the Spark catalog's name

    @property
    def tables(self) -> Tables:
        """The catalog's tables through Spark (started on first use)."""
        return self._tables()

    def _source(self, ref: str) -> MetadataSource | None:
        """Where this catalog's metadata is read without Spark, at `ref`; None: only Spark reads it here."""
        raise NotImplementedError

    def _manifests(self) -> ManifestMetrics:
        from wapflow.lakehouse.manifests import ManifestMetrics

        return ManifestMetrics(self.storage)

    def direct(self, ref: str = "main") -> CatalogTables | None:
        """The catalog's table metadata read directly, with no JVM (a new view: each loads a table once), or None
        where only Spark reads this catalog (or WAP_METADATA=spark). Never starts Spark."""
        if not direct_reads():
            return None
        source = self._source(ref)
        return None if source is None else CatalogTables(source, self.name, self._manifests())

    def metadata(self, ref: str = "main") -> TableMetadata:
        """Read-only table metadata (snapshots, refs, the catalog's tables) for commands that read no data: from
        the catalog itself, with no JVM, where it can be read so; else Spark's view. A new view on every call
        (each loads a table once), so later commits show."""
        direct = self.direct(ref)
        return self.tables if direct is None else direct

    def file_metrics(self) -> TableMetadata:
        """Where the column metrics of the data files snapshots added are read (added_file_metrics): from the
        catalog and the manifests with no JVM where the catalog is read directly and PyIceberg is installed;
        else Spark's view (the manifests through the gateway's metadata, or the metadata tables)."""
        from wapflow.lakehouse.manifests import pyiceberg_installed

        direct = self.direct() if pyiceberg_installed() else None
        return self.tables if direct is None else direct
