"""Column metrics of the data files snapshots added (and of those live at a branch's head), read from the
manifests with no Spark job, equal to what Spark's `entries` and `files` metadata tables give: on a table of
many types (nulls, NaN, strings, dates, timestamps with and without zone, decimals, a nested struct) written in
several snapshots of several files by plain Spark. The shared session; no new JVM."""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any

import pyiceberg.manifest  # noqa: F401 - PyIceberg's readers loaded, as in a process that has audited before
import pytest

from wapflow.audit.metrics import FileMetrics
from wapflow.lakehouse.tables import Tables
from wapflow.sql.identifiers import TableName

pytestmark = pytest.mark.spark
T = TableName.parse("shop.kinds")

COLUMNS = (
    "id INT, big BIGINT, ratio DOUBLE, score FLOAT, name STRING, born DATE, seen TIMESTAMP, "
    "local_seen TIMESTAMP_NTZ, price DECIMAL(10,2), ok BOOLEAN, address STRUCT<city: STRING, zip: INT>"
)
BATCHES = [
    # (id, big, ratio, score, name, born, seen, local_seen, price, ok, city, zip)
    [
        "(1, 10000000000, 0.5, CAST(1.5 AS FLOAT), 'ann', DATE'2024-01-02', TIMESTAMP'2024-01-02 03:04:05.123456', "
        "TIMESTAMP_NTZ'2024-01-02 03:04:05', 12.34, true, 'Oslo', 150)",
        "(2, NULL, CAST('NaN' AS DOUBLE), NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
    ],
    [
        "(3, -5, -2.25, CAST('NaN' AS FLOAT), 'a name longer than sixteen characters', DATE'1969-12-31', "
        "TIMESTAMP'1969-12-31 23:59:59', TIMESTAMP_NTZ'2030-06-01 00:00:00', -0.01, false, 'Bergen', NULL)",
    ],
    ["(4, 7, 1e300, CAST(3.25 AS FLOAT), 'zoe', DATE'2025-05-05', NULL, NULL, 99999999.99, true, NULL, 9)"],
]


def _values(i: int) -> str:
    return ", ".join(
        row.replace(", 'Oslo', 150)", ", named_struct('city', 'Oslo', 'zip', 150))")
        .replace(", NULL, NULL)", ", named_struct('city', CAST(NULL AS STRING), 'zip', CAST(NULL AS INT)))")
        .replace(", 'Bergen', NULL)", ", named_struct('city', 'Bergen', 'zip', CAST(NULL AS INT)))")
        .replace(", NULL, 9)", ", named_struct('city', CAST(NULL AS STRING), 'zip', 9))")
        for row in BATCHES[i]
    )


@pytest.fixture
def kinds(lakehouse_factory: Any) -> Any:
    lh = lakehouse_factory()
    ident = lh.tables.ident(T)
    lh.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {T.namespace_sql(lh.catalog)}")
    lh.spark.sql(f"CREATE TABLE {ident} ({COLUMNS}) USING iceberg")
    for i in range(len(BATCHES)):  # a snapshot each; the first has two files
        lh.spark.sql(f"INSERT INTO {ident} SELECT /*+ REPARTITION({len(BATCHES[i])}) */ * FROM VALUES {_values(i)}")
    return lh


def typed(fm: FileMetrics) -> dict[str, Any]:
    """Values and their Python types: Decimal('1.50') == 1.5 would hide a wrong type."""
    return {
        "fm": fm,
        "lower": {k: type(v).__name__ for k, v in fm.lower.items()},
        "upper": {k: type(v).__name__ for k, v in fm.upper.items()},
    }


def spark_jobs(lh: Any, fn: Any) -> tuple[Any, int]:
    """fn's result and how many Spark jobs it ran."""
    sc = lh.spark.sparkContext
    group = f"fm-{uuid.uuid4().hex}"
    sc.setJobGroup(group, "counting jobs")
    try:
        return fn(), len(sc.statusTracker().getJobIdsForGroup(group))
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)


def test_manifests_give_the_metadata_tables_metrics_without_a_spark_job(kinds: Any) -> None:
    lh = kinds
    sql = Tables(lh.spark, lh.catalog)  # no manifest reader: the `entries` and `files` metadata tables
    ids = [s.snapshot_id for s in sorted(lh.tables.snapshots(T).values(), key=lambda s: s.committed_at)]
    assert len(ids) == len(BATCHES)
    for chosen in ([ids[0]], [ids[1]], [ids[2]], ids[1:], ids):
        fast, jobs = spark_jobs(lh, lambda c=chosen: lh.tables.added_file_metrics(T, "main", c))
        assert jobs == 0, (chosen, ids)
        slow, jobs = spark_jobs(lh, lambda c=chosen: sql.added_file_metrics(T, "main", c))
        assert jobs > 0 and typed(fast) == typed(slow)
    first = lh.tables.added_file_metrics(T, "main", [ids[1]])
    assert (first.rows, first.nan_counts["score"], first.null_counts["address.zip"]) == (1, 1, 1)
    assert first.lower["price"] == Decimal("-0.01") and first.upper["name"] == "a name longer ti"  # truncated

    live, jobs = spark_jobs(lh, lambda: lh.tables.live_file_metrics(T))
    assert jobs == 0 and live.rows == 4
    assert typed(live) == typed(sql.live_file_metrics(T))
