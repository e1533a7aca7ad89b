"""Uses of a SparkSession's shared state that must not interleave: one at a time in this process, and in every
process forked from it that uses the same session (the engine's commands, wapflow.engine.server).

The session's runtime conf, temp views and current catalog are one per session. Iceberg reads a SQL write's
snapshot properties (the run id its commit carries) only from the conf, a custom_sql check names the new rows
as the view `batch`, `wap query` resolves names in a current catalog: two commands doing so at once would
use each other's. Held from setting such state until Spark has analysed the statement (its plan keeps what it
resolved). POSIX record locks belong to a process, so the children sharing one inherited descriptor exclude
each other, and a child killed while it holds the lock releases it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import threading
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_in_process = threading.Lock()
_across: int | None = None  # a descriptor forked children inherit, once share_with_children() ran


def share_with_children() -> None:
    """This process's session will be used by children forked from it from now on (at once, possibly)."""
    global _across
    if _across is None:
        fd, name = tempfile.mkstemp(prefix="wapflow-conf-", suffix=".lock")
        os.unlink(name)  # only the descriptor is needed
        _across = fd


@contextlib.contextmanager
def session_change() -> Iterator[None]:
    """Hold while setting such state and having Spark analyse (or run) what reads it."""
    with _in_process:
        if _across is None:
            yield
            return
        fcntl.lockf(_across, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.lockf(_across, fcntl.LOCK_UN)


# Spark's storage-partitioned join, for a MERGE into a table whose partitions are a function of the merge key
# (bucket(N, id) merged on id): the table's files are joined where they lie, grouped by partition, and only the
# batch is shuffled (Iceberg's documented settings for MERGE). Measured by benchmarks/bench_merge.py: the
# MERGE's jobs of a 1M-row change into 10M rows ~7 s -> ~2.3 s, into 100M rows 50 s -> 27 s.
CO_PARTITIONED_JOIN = {
    "spark.sql.sources.v2.bucketing.enabled": "true",
    "spark.sql.sources.v2.bucketing.shuffle.enabled": "true",
    "spark.sql.iceberg.planning.preserve-data-grouping": "true",
    "spark.sql.requireAllClusterKeysForCoPartition": "false",
}


def sql_with_confs(spark: SparkSession, sql: str, confs: Mapping[str, str]) -> None:
    """Run one SQL statement with these Spark settings for it alone (each put back as it was after it): a write's
    snapshot properties (lakehouse.model.snapshot_property_confs), join settings. One such statement at a time."""
    with session_change():
        before = {k: spark.conf.get(k, None) for k in confs}
        for k, v in confs.items():
            spark.conf.set(k, v)
        try:
            spark.sql(sql)
        finally:
            for k, old in before.items():
                if old is None:
                    spark.conf.unset(k)
                else:
                    spark.conf.set(k, old)
