"""A table's time_column through real runs: each run records its batch's own day with its metrics (the day the
added files' bounds fall on, else the median day of its rows), whatever day it runs; a time column the batch
lacks or that holds no dates fails the run before publish with one clear error (exit 2), main unchanged. Real
Spark, Iceberg and run store."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pyarrow as pa
import pytest

from support.data import write_parquet
from wapflow.pipeline import run_wap
from wapflow.runs.metrics import MetricHistory
from wapflow.sql.identifiers import TableName

pytestmark = pytest.mark.spark
T = TableName.parse("t.events")
CHECKS = [{"check": "anomaly", "metric": "row_count"}]


def batch(days: list[date]) -> pa.Table:
    return pa.table({"n": pa.array(range(len(days)), pa.int64()), "day": pa.array(days, pa.date32())})


def test_each_run_records_its_batchs_day_and_a_wrong_time_column_stops_it(lakehouse_factory, landing: Path):
    lh = lakehouse_factory({"t.events": {"checks": CHECKS, "time_column": "DAY"}})  # any case, as columns
    late = [date(2013, 7, 3)] * 2 + [date(2013, 7, 4)] * 5 + [date(2013, 7, 5)]  # mostly the 4th, two late rows
    saturday = [date(2013, 7, 6)] * 4
    for name, rows in (("late.parquet", late), ("saturday.parquet", saturday)):
        res = run_wap(lh, "t.events", [str(write_parquet(landing / name, batch(rows)))])
        assert res.status == "published", res.message
    recorded = MetricHistory(lh.store.engine).read("t.events", metric="row_count")
    assert [r.batch_at.date() if r.batch_at else None for r in recorded] == [date(2013, 7, 6), date(2013, 7, 4)]
    on_main = lh.tables.row_count(T)

    for column, words in (("dya", "'dya' is not a column of the batch (did you mean 'day'?)"), ("n", "'n' is bigint")):
        wrong = lakehouse_factory(
            {"t.events": {"checks": CHECKS, "time_column": column}}, catalog_name=lh.config.lakehouse.catalog_name
        )
        res = run_wap(wrong, "t.events", [str(write_parquet(landing / f"{column}.parquet", batch(saturday)))])
        assert res.status == "failed" and res.exit_code == 2, res.message
        assert words in res.message and "time_column" in res.message, res.message
        assert lh.tables.row_count(T) == on_main
