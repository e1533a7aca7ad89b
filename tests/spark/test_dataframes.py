"""DataFrames in: `wapflow.write` (one table) and `wapflow.transaction` (several, published together), on the
embedded catalog, read back by PyIceberg's own client of it."""

from __future__ import annotations

from typing import Any

import pytest

import wapflow
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.pipeline.steps.context import Run

pytestmark = pytest.mark.spark

TABLES = {
    "silver.trips": {"checks": [{"check": "not_null", "column": "fare"}, {"check": "unique", "columns": ["id"]}]},
    "gold.daily": {"checks": [{"check": "not_null", "column": "day"}]},
}


def reader(lh: Lakehouse) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog(lh.catalog, uri=f"sqlite:///{lh.config.embedded_catalog_path()}", warehouse="file:///unused")


def rows(lh: Lakehouse, table: str) -> list[dict[str, Any]]:
    ns, name = table.split(".")
    tbl = reader(lh).load_table((ns, name))
    return [] if tbl.current_snapshot() is None else sorted(tbl.scan().to_arrow().to_pylist(), key=str)


@pytest.fixture
def lh(lakehouse_factory: Any) -> Lakehouse:
    return lakehouse_factory(TABLES)


def trips(spark: Any, data: list[tuple[int, str, float | None]]) -> Any:
    return spark.createDataFrame(data, "id long, day string, fare double")


def test_a_dataframe_is_written_audited_and_published_like_a_file(lh, spark):
    res = wapflow.write(lh, "silver.trips", trips(spark, [(1, "mon", 9.5), (2, "mon", 12.0)]))
    assert res.status == "published" and res.exit_code == 0, res.message
    assert res.rows_written == 2
    assert [r["id"] for r in rows(lh, "silver.trips")] == [1, 2]
    assert {c["status"] for c in res.checks} == {"passed"} and len(res.checks) == 2
    snap = reader(lh).load_table(("silver", "trips")).current_snapshot()
    assert snap is not None and snap.summary["wapflow.run-id"] == res.run_id
    # The same run id again: already published, nothing twice.
    again = wapflow.write(lh, "silver.trips", trips(spark, [(1, "mon", 9.5), (2, "mon", 12.0)]), run_id=res.run_id)
    assert again.status == "published" and "already published" in again.message
    assert len(rows(lh, "silver.trips")) == 2


def test_a_dataframe_failing_its_checks_is_blocked_and_main_unchanged(lh, spark):
    wapflow.write(lh, "silver.trips", trips(spark, [(1, "mon", 9.5)]))
    res = wapflow.write(lh, "silver.trips", trips(spark, [(2, "tue", None), (3, "tue", 4.0)]))
    assert res.status == "blocked" and res.exit_code == 1, res.message
    assert "not_null" in res.message
    assert [r["id"] for r in rows(lh, "silver.trips")] == [1]


def test_a_merge_of_a_dataframe_updates_by_key(lh, spark):
    wapflow.write(lh, "silver.trips", trips(spark, [(1, "mon", 9.5), (2, "mon", 12.0)]))
    res = wapflow.write(lh, "silver.trips", trips(spark, [(2, "mon", 13.0), (3, "tue", 7.0)]), mode="merge", key=["id"])
    assert res.status == "published", res.message
    assert [(r["id"], r["fare"]) for r in rows(lh, "silver.trips")] == [(1, 9.5), (2, 13.0), (3, 7.0)]


def test_a_transaction_reads_what_it_wrote_and_publishes_every_table_in_one_commit(lh, spark):
    with wapflow.transaction(lh, name="nightly") as tx:
        tx.write("silver.trips", trips(spark, [(1, "mon", 9.5), (2, "mon", 12.0), (3, "tue", 4.0)]))
        silver = tx.read("silver.trips")  # staged: main has nothing yet
        assert silver.count() == 3 and rows(lh, "silver.trips") == []
        tx.write("gold.daily", silver.groupBy("day").sum("fare").withColumnRenamed("sum(fare)", "fare"))
    assert tx.result is not None and tx.result.status == "published", tx.result
    assert tx.run_id.startswith("nightly_")
    assert [r["day"] for r in rows(lh, "gold.daily")] == ["mon", "tue"]
    assert len(rows(lh, "silver.trips")) == 3
    members = lh.store.group(tx.run_id)
    assert [(m.table_name, m.status) for m in members] == [("silver.trips", "published"), ("gold.daily", "published")]


def test_a_transaction_blocked_by_one_table_publishes_none(lh, spark):
    with wapflow.transaction(lh) as tx:
        tx.write("silver.trips", trips(spark, [(1, "mon", 9.5)]))
        tx.write("gold.daily", spark.createDataFrame([(None, 9.5)], "day string, fare double"))
    assert tx.result is not None and tx.result.status == "blocked", tx.result
    assert tx.result.exit_code == 1
    assert rows(lh, "silver.trips") == [] and rows(lh, "gold.daily") == []


def test_an_exception_in_the_block_publishes_nothing_and_records_the_run_failed(lh, spark):
    with pytest.raises(ZeroDivisionError), wapflow.transaction(lh) as tx:
        tx.write("silver.trips", trips(spark, [(1, "mon", 9.5)]))
        _ = 1 / 0
    assert tx.result is not None and tx.result.status == "failed"
    assert "ZeroDivisionError" in tx.result.message
    assert rows(lh, "silver.trips") == []
    (member,) = lh.store.group(tx.run_id)
    assert member.status == "failed" and "ZeroDivisionError" in str(member.error)
    assert "silver.trips" not in {b.table.dotted for b in lh.list_branches() if b.table is not None}


def test_a_dataframe_run_resumed_in_another_process_is_told_to_run_the_job_again(lh, spark):
    """The state says the batch is a DataFrame; a process that was not given it cannot write it."""
    from wapflow.pipeline.state import new_state
    from wapflow.pipeline.steps import prepare, write

    run = Run(lh, new_state("silver.trips", [], frame=True))
    prepare.prepare(run)
    with pytest.raises(wapflow.UsageError, match="lives only in the process that gave it"):
        write.write(run)
