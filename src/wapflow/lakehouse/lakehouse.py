"""The Lakehouse: config + lazily started Spark + the catalog's tables and branches + the run store."""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING

from wapflow.config import WapConfig, load_config
from wapflow.lakehouse.branches import IcebergTableBranches
from wapflow.lakehouse.session import build_session
from wapflow.lakehouse.tables import Tables
from wapflow.runs.store import RunStore

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _quiet(_: str) -> None:
    return None


class Lakehouse:
    def __init__(
        self,
        config: WapConfig | None = None,
        *,
        spark: "SparkSession | None" = None,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.config = config if config is not None else load_config()
        self.progress = progress or _quiet
        self._spark = spark

    @classmethod
    def from_file(cls, path: str | None = None, **kw: object) -> "Lakehouse":
        return cls(load_config(path), **kw)  # type: ignore[arg-type]

    @property
    def catalog(self) -> str:
        return self.config.lakehouse.catalog_name

    @property
    def spark(self) -> "SparkSession":
        if self._spark is None:
            self._spark = build_session(self.config, progress=self.progress)
        else:
            from wapflow.lakehouse.session import register_catalog

            register_catalog(self._spark, self.config)
        return self._spark

    @cached_property
    def tables(self) -> Tables:
        return Tables(self.spark, self.catalog)

    @cached_property
    def branches(self) -> IcebergTableBranches:
        return IcebergTableBranches(self.tables)

    @cached_property
    def store(self) -> RunStore:
        return RunStore(self.config.run_store_url())
