"""DataFrames in: `wapflow.write` (one table) and `wapflow.transaction` (several, published together), on the
embedded catalog, read back by PyIceberg's own client of it."""

from __future__ import annotations

from typing import Any

import pytest

import wapflow
from support.embedded_reader import reader, rows
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.pipeline.steps.context import Run

pytestmark = pytest.mark.spark

TABLES = {
    "silver.trips": {"checks": [{"check": "not_null", "column": "fare"}, {"check": "unique", "columns": ["id"]}]},
    "gold.daily": {"checks": [{"check": "not_null", "column": "day"}]},
}


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
    assert "silver.trips" not in {b.table.dotted for b in lh.iceberg.list_branches() if b.table is not None}


def test_a_dataframe_run_resumed_in_another_process_is_told_to_run_the_job_again(lh, spark):
    """The state says the batch is a DataFrame; a process that was not given it cannot write it."""
    from wapflow.pipeline.state import new_state
    from wapflow.pipeline.steps import prepare, write

    run = Run(lh, new_state("silver.trips", [], frame=True))
    prepare.prepare(run)
    with pytest.raises(wapflow.UsageError, match="lives only in the process that gave it"):
        write.write(run)


def test_tx_sql_reads_the_tables_it_wrote_staged_and_the_others_at_main(lh, spark):
    wapflow.write(lh, "silver.trips", trips(spark, [(1, "mon", 9.5)]))
    with wapflow.transaction(lh) as tx:
        assert tx.sql("SELECT count(*) AS n FROM silver.trips").first()["n"] == 1  # not written yet: main
        tx.write("silver.trips", trips(spark, [(2, "mon", 12.0), (3, "tue", 4.0)]))
        daily = tx.sql(
            "WITH t AS (SELECT * FROM silver.trips)\n"
            f"SELECT s.day, sum(s.fare) AS fare FROM t s JOIN {lh.catalog}.silver.trips u ON s.id = u.id GROUP BY s.day"
        )
        assert sorted(daily.collect()) == [("mon", 21.5), ("tue", 4.0)]  # main's row and the staged ones
        assert rows(lh, "gold.daily") == [] and len(rows(lh, "silver.trips")) == 1
        tx.write("gold.daily", daily)
    assert tx.result is not None and tx.result.status == "published", tx.result
    assert [(r["day"], r["fare"]) for r in rows(lh, "gold.daily")] == [("mon", 21.5), ("tue", 4.0)]


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("DELETE FROM silver.trips WHERE id = 1", "DELETE"),
        ("INSERT INTO gold.daily SELECT 'x', 1.0", "INSERT"),
        ("SELECT * FROM silver.trips; DROP TABLE silver.trips", "one"),
        ("SELECT * FROM nope.trips", "nope.trips, which is neither written by the transaction nor a table"),
        ("SELECT tip FROM silver.trips", "tip"),
    ],
)
def test_tx_sql_that_writes_or_reads_an_unknown_table_fails_the_transaction_nothing_published(lh, spark, query, words):
    with pytest.raises(wapflow.ConfigError) as raised, wapflow.transaction(lh) as tx:
        tx.write("silver.trips", trips(spark, [(1, "mon", 9.5)]))
        tx.sql(query)
        tx.write("gold.daily", spark.createDataFrame([("mon", 9.5)], "day string, fare double"))
    err = raised.value
    assert err.exit_code == 2 and words in str(err) and f"transaction {tx.run_id}" in str(err), str(err)
    assert "Traceback" not in str(err)
    assert tx.result is not None and (tx.result.status, tx.result.exit_code) == ("failed", 2), tx.result
    assert rows(lh, "silver.trips") == [] and rows(lh, "gold.daily") == []
    (member,) = lh.store.group(tx.run_id)
    assert member.status == "failed" and words in str(member.error)


def test_a_dataframe_breaking_the_schema_contract_is_blocked_naming_the_column(lh, spark):
    """As a file that does not fit the table: blocked (exit 1) before anything is written, main unchanged."""
    wapflow.write(lh, "silver.trips", trips(spark, [(1, "mon", 9.5)]))
    wrong = spark.createDataFrame([(2, "mon", "twelve")], "id long, day string, fare string")
    res = wapflow.write(lh, "silver.trips", wrong)
    assert (res.status, res.exit_code) == ("blocked", 1), res.message
    assert "fare" in res.message and "string" in res.message, res.message
    assert lh.store.get(res.run_id).status == "blocked"
    with wapflow.transaction(lh) as tx:
        tx.write("gold.daily", spark.createDataFrame([("mon", 9.5)], "day string, fare double"))
        tx.write("silver.trips", wrong.drop("fare"))  # a missing column
    assert tx.result is not None and (tx.result.status, tx.result.exit_code) == ("blocked", 1), tx.result
    assert "silver.trips: schema" in tx.result.message, tx.result.message
    silver = next(t for t in tx.result.tables if t.table == "silver.trips")
    assert "missing column 'fare'" in str(silver.checks), silver.checks
    assert [r["id"] for r in rows(lh, "silver.trips")] == [1] and rows(lh, "gold.daily") == []
    assert {m.status for m in lh.store.group(tx.run_id)} == {"blocked"}


@pytest.mark.parametrize("name", ["silver.tr ips", "trips", "silver.trips'; DROP TABLE x; --"])
def test_a_dataframe_to_an_invalid_table_name_fails_before_any_write(lh, spark, name):
    res = wapflow.write(lh, name, trips(spark, [(1, "mon", 9.5)]))
    assert (res.status, res.exit_code) == ("failed", 2), res.message
    assert "not allowed" in res.message or "needs a namespace" in res.message
    assert lh.store.get(res.run_id).status == "failed"
    with pytest.raises(wapflow.ConfigError) as raised, wapflow.transaction(lh) as tx:
        tx.write("silver.trips", trips(spark, [(1, "mon", 9.5)]))
        tx.write(name, trips(spark, [(2, "mon", 9.5)]))
    assert raised.value.exit_code == 2 and (
        "not allowed" in str(raised.value) or "needs a namespace" in str(raised.value)
    )
    assert tx.result is not None and (tx.result.status, tx.result.exit_code) == ("failed", 2), tx.result
    assert rows(lh, "silver.trips") == []
    assert [m.status for m in lh.store.group(tx.run_id)] == ["failed"]


def test_a_write_after_the_transaction_ended_is_refused_and_changes_nothing(lh, spark):
    with wapflow.transaction(lh) as tx:
        tx.write("silver.trips", trips(spark, [(1, "mon", 9.5)]))
    assert tx.result is not None and tx.result.status == "published"
    with pytest.raises(wapflow.UsageError, match=r"after transaction \S+ ended \(published\)") as raised:
        tx.write("gold.daily", spark.createDataFrame([("mon", 9.5)], "day string, fare double"))
    assert raised.value.exit_code == 2
    with pytest.raises(wapflow.UsageError, match=r"tx.sql\(...\) after transaction \S+ ended"):
        tx.sql("SELECT * FROM silver.trips")
    with pytest.raises(wapflow.UsageError, match=r"tx.read\('silver.trips'\) after transaction \S+ ended"):
        tx.read("silver.trips")
    assert rows(lh, "gold.daily") == [] and len(rows(lh, "silver.trips")) == 1
    assert [(m.table_name, m.status) for m in lh.store.group(tx.run_id)] == [("silver.trips", "published")]


def test_a_transaction_run_again_with_its_run_id_publishes_nothing_twice(lh, spark):
    def job(tx: Any) -> None:
        tx.write("silver.trips", trips(spark, [(1, "mon", 9.5), (2, "tue", 4.0)]))
        tx.write("gold.daily", tx.sql("SELECT day, sum(fare) AS fare FROM silver.trips GROUP BY day"))

    with wapflow.transaction(lh, run_id="nightly-1") as tx:
        job(tx)
    assert tx.result is not None and tx.result.status == "published", tx.result
    heads = {t: reader(lh).load_table(tuple(t.split("."))).metadata.current_snapshot_id for t in TABLES}
    with wapflow.transaction(lh, run_id="nightly-1") as again:
        job(again)
    assert again.result is not None and again.result.status == "published", again.result
    assert "already published" in again.result.message
    assert {r.published_via for r in again.result.tables} == {"already"}
    assert {t: reader(lh).load_table(tuple(t.split("."))).metadata.current_snapshot_id for t in TABLES} == heads
    assert len(rows(lh, "silver.trips")) == 2 and len(rows(lh, "gold.daily")) == 2
