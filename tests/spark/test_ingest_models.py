"""`wap ingest` of a source whose table models read: each landed batch and every model downstream of it are
written on one branch, audited, and published in one commit, or none. Read back by PyIceberg."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import wapflow
from support.cli_harness import LazyReader
from support.data import trips_file
from support.ingest import CHECKS
from wapflow.config import SourceConfig
from wapflow.errors import ConfigError
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.outer.ingest import ingest

pytestmark = pytest.mark.spark

SILVER = "SELECT trip_id, passenger_count, fare_amount FROM nyc.trips WHERE fare_amount > 0"
GOLD = "SELECT passenger_count, count(*) AS trips FROM silver.trips GROUP BY passenger_count"
TABLES: dict[str, Any] = {
    "nyc.trips": {"checks": CHECKS},
    # Silver is computed from all of raw's rows (replaced each batch): more than 350 rows block it.
    "silver.trips": {"checks": [{"check": "row_count", "max": 350}]},
    "gold.by_passengers": {
        "checks": [{"check": "not_null", "column": "passenger_count"}],
        "mode": "merge",
        "key": ["passenger_count"],
    },
}
MODELS = {"silver.trips": {"sql": SILVER}, "gold.by_passengers": {"sql": GOLD}}


def lakehouse(
    factory: Any,
    landing: Path,
    tmp_path: Path,
    *,
    tables: dict[str, Any] = TABLES,
    model_defs: dict[str, Any] = MODELS,
    **src: Any,
) -> tuple[Lakehouse, LazyReader]:
    lh = factory(tables)
    cfg = lh.config.model_copy(update={"models": lh.config.model_validate({"models": model_defs}).models})
    cfg.sources["trips"] = SourceConfig(table="nyc.trips", location=str(landing), settle_seconds=0, **src)
    return Lakehouse(cfg, spark=lh.spark), LazyReader(tmp_path, cfg.lakehouse.catalog_name)


def test_a_batch_and_its_models_publish_in_one_commit_and_a_blocking_model_holds_the_batch_back(
    lakehouse_factory, landing, tmp_path
):
    lh, reader = lakehouse(lakehouse_factory, landing, tmp_path)
    trips_file(landing, "day1.parquet", rows=200)

    first = ingest(lh, "trips")
    assert first.exit_code == 0, first.message
    assert [f.state for f in first.files] == ["published"]
    raw = reader.rows("nyc.trips")
    silver = reader.rows("silver.trips")
    gold = reader.rows("gold.by_passengers")
    assert len(raw) == 200
    assert sorted(r["trip_id"] for r in silver) == sorted(r["trip_id"] for r in raw if r["fare_amount"] > 0)
    assert sum(r["trips"] for r in gold) == len(silver)
    # One commit: every table's new main snapshot carries the batch's run as its group.
    run_id = first.runs[0].run_id
    group = lh.store.group(run_id.rsplit("-", 1)[0])
    assert [r.table_name for r in group] == ["nyc.trips", "silver.trips", "gold.by_passengers"]
    assert {r.status for r in group} == {"published"}
    assert {r.snapshot_id for r in group} == {reader.main(t) for t in TABLES}
    mains = {t: reader.main(t) for t in TABLES}

    # 400 new rows: the raw table's checks pass, silver's row_count (600 rows) does not; no table moves, the file is
    # blocked, and no branch of the batch is left behind (on_failure drops them when nothing asks to keep).
    trips_file(landing, "day2.parquet", rows=400, start_id=1000, seed=1)
    second = ingest(lh, "trips")
    assert second.exit_code == 1, second.message
    assert [f.state for f in second.files] == ["blocked"]
    assert "silver.trips" in (second.files[0].reason or "")
    rep = wapflow.report(lh, second.files[0].run_id.rsplit("-", 1)[0])  # the batch's whole run, from Python
    assert (rep["status"], rep["blocked_by"]) == ("blocked", ["silver.trips"]), rep
    assert rep["tables"] == ["nyc.trips", "silver.trips", "gold.by_passengers"]
    assert {t: reader.main(t) for t in TABLES} == mains
    assert len(reader.rows("nyc.trips")) == 200

    # Again: known files are not run twice.
    again = ingest(lh, "trips")
    assert again.runs == [] and again.exit_code == 0

    # A third day: silver is all of raw's rows again (replaced, not appended twice), gold counts them.
    trips_file(landing, "day3.parquet", rows=100, start_id=5000, seed=3)
    third = ingest(lh, "trips")
    assert third.exit_code == 0, third.message
    raw = reader.rows("nyc.trips")
    silver = reader.rows("silver.trips")
    assert len(raw) == 300
    assert sorted(r["trip_id"] for r in silver) == sorted(r["trip_id"] for r in raw if r["fare_amount"] > 0)
    assert sum(r["trips"] for r in reader.rows("gold.by_passengers")) == len(silver)


def test_models_false_publishes_the_batch_alone(lakehouse_factory, landing, tmp_path):
    lh, reader = lakehouse(lakehouse_factory, landing, tmp_path, models=False)
    trips_file(landing, "day1.parquet", rows=50)
    res = ingest(lh, "trips")
    assert res.exit_code == 0, res.message
    assert len(reader.rows("nyc.trips")) == 50
    assert not reader.exists("silver.trips")


def test_a_model_table_without_checks_is_refused_before_any_file_is_claimed(lakehouse_factory, landing, tmp_path):
    tables = {k: v for k, v in TABLES.items() if k != "gold.by_passengers"}
    lh, reader = lakehouse(lakehouse_factory, landing, tmp_path, tables=tables)
    trips_file(landing, "day1.parquet", rows=50)
    with pytest.raises(ConfigError) as e:
        ingest(lh, "trips")
    assert "gold.by_passengers" in e.value.message
    assert e.value.exit_code == 2
    assert lh.ledger.rows("trips") == []  # nothing claimed, nothing recorded
    assert not reader.exists("nyc.trips")


def test_wap_watch_runs_a_batch_and_its_models_as_one_durable_workflow(lakehouse_factory, landing, tmp_path):
    from wapflow.config import WatchConfig
    from wapflow.outer.watch import Watcher

    lh, reader = lakehouse(lakehouse_factory, landing, tmp_path, max_files_per_run=2)
    lh.config.watch = WatchConfig(interval=0.5, worker="t1")
    trips_file(landing, "a.parquet", rows=60)
    trips_file(landing, "b.parquet", rows=60, start_id=500, seed=2)

    res = Watcher(lh, ["trips"], once=True).run()
    assert {f.state for f in res.files} == {"published"}, [f.reason for f in res.files]
    assert len(reader.rows("nyc.trips")) == 120
    positive = {r["trip_id"] for r in reader.rows("nyc.trips") if r["fare_amount"] > 0}
    assert {r["trip_id"] for r in reader.rows("silver.trips")} == positive
    assert sum(r["trips"] for r in reader.rows("gold.by_passengers")) == len(positive)
    again = Watcher(lh, ["trips"], once=True).run()
    assert again.files == []


def test_a_batch_a_model_blocks_is_split_and_the_good_file_published_with_its_models(
    lakehouse_factory, landing, tmp_path
):
    """Two files in one batch; one makes silver's check fail (a passenger count of 9). The batch is split like a
    blocked file batch: the good file is published with the models, the bad one ends blocked, no branch left."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from support.data import write_parquet
    from wapflow.demo.generate import generate_trips

    tables = {**TABLES, "silver.trips": {"checks": [{"check": "expression", "sql": "passenger_count < 9"}]}}
    lh, reader = lakehouse(lakehouse_factory, landing, tmp_path, tables=tables, max_files_per_run=2)
    trips_file(landing, "a.parquet", rows=30)
    bad = generate_trips(30, start_id=900, seed=4)
    bad = bad.set_column(4, "passenger_count", pc.add(bad["passenger_count"], pa.scalar(3, pa.int32())))
    write_parquet(landing / "b.parquet", bad)

    res = ingest(lh, "trips")
    states = {Path(f.uri).name: f.state for f in res.files}
    assert states == {"a.parquet": "published", "b.parquet": "blocked"}, [f.reason for f in res.files]
    assert sorted(r["trip_id"] for r in reader.rows("nyc.trips")) == list(range(1, 31))
    assert sorted(r["trip_id"] for r in reader.rows("silver.trips")) == list(range(1, 31))
    # The split batch's branches are gone; the blocked file's run keeps its rows on every table for inspection.
    blocked = next(f for f in res.files if f.state == "blocked")
    kept = [reader.branches(t) for t in ("nyc.trips", "silver.trips", "gold.by_passengers")]
    assert kept == [[f"wap_{blocked.run_id.rsplit('-', 1)[0]}"]] * 3, kept
    assert res.exit_code == 1


def test_a_model_whose_sql_does_not_run_fails_its_files_with_exit_2_and_says_how_to_go_on(
    lakehouse_factory, landing, tmp_path
):
    """A misspelt column in a model's SQL under ingest: the batch's file fails with the run's own exit code 2
    (wap.toml is the cause), its message names the model and Spark's suggestion; main is unchanged; the next
    ingest says the file failed and the command that puts it back in line."""
    broken = {**MODELS, "gold.by_passengers": {"sql": GOLD.replace("count(*) AS trips", "count(fare_amout) AS trips")}}
    lh, reader = lakehouse(lakehouse_factory, landing, tmp_path, model_defs=broken)
    trips_file(landing, "day1.parquet", rows=50)
    res = ingest(lh, "trips")
    (row,) = res.files
    assert row.state == "failed" and res.exit_code == 2 and res.status == "failed", res.to_dict()
    assert row.error is not None and "model gold.by_passengers" in row.error["message"], row.error
    assert "fare_amount" in row.error["message"] and row.error["message"].count("UNRESOLVED_COLUMN") == 1
    assert not reader.exists("nyc.trips") or reader.rows("nyc.trips") == []  # main unchanged
    again = ingest(lh, "trips")
    assert again.files == [] and f"`wap retry {row.uri}`" in again.message(), again.message()
