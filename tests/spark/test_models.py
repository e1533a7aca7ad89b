"""Models in wap.toml (SQL and Python) run upstream first on one branch, audited, published together; read back
by PyIceberg's own client of the embedded catalog."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import wapflow
from support.embedded_reader import reader, rows
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.lakehouse.model import MODEL_INPUT_PROP_PREFIX

pytestmark = pytest.mark.spark

SILVER_SQL = "SELECT id, day, fare FROM raw.trips WHERE fare > 0"
GOLD_SQL = "SELECT day, count(*) AS trips, sum(fare) AS fare FROM silver.trips GROUP BY day"
TABLES = {
    "raw.trips": {"checks": [{"check": "not_null", "column": "id"}]},
    "silver.trips": {"checks": [{"check": "unique", "columns": ["id"]}]},
    "gold.daily": {"checks": [{"check": "not_null", "column": "day"}], "mode": "merge", "key": ["day"]},
}


def raw(spark: Any, data: list[tuple[int, str, float]]) -> Any:
    return spark.createDataFrame(data, "id long, day string, fare double")


def lakehouse(factory: Any, models: dict[str, Any], tables: dict[str, Any] = TABLES) -> Lakehouse:
    return with_models(factory(tables), models)


def with_models(lh: Lakehouse, models: dict[str, Any]) -> Lakehouse:
    cfg = lh.config.model_copy(update={"models": lh.config.model_validate({"models": models}).models})
    return Lakehouse(cfg, spark=lh.spark)


def test_sql_models_run_upstream_first_and_publish_in_one_commit(lakehouse_factory, spark):
    lh = lakehouse(
        lakehouse_factory,
        {"gold.daily": {"sql": GOLD_SQL}, "silver.trips": {"sql": SILVER_SQL, "incremental": True}},
    )
    assert (
        wapflow.write(lh, "raw.trips", raw(spark, [(1, "mon", 9.5), (2, "mon", -1.0), (3, "tue", 4.0)])).exit_code == 0
    )
    res = wapflow.run_models(lh)
    assert res.status == "published", res.message
    assert [r.table for r in res.tables] == ["silver.trips", "gold.daily"]
    assert [r["id"] for r in rows(lh, "silver.trips")] == [1, 3]
    # gold read silver as staged by the same run (main had no silver yet)
    assert [(r["day"], r["trips"]) for r in rows(lh, "gold.daily")] == [("mon", 1), ("tue", 1)]
    raw_head = reader(lh).load_table(("raw", "trips")).metadata.current_snapshot_id
    silver = reader(lh).load_table(("silver", "trips")).current_snapshot()
    assert silver is not None and silver.summary[f"{MODEL_INPUT_PROP_PREFIX}raw.trips"] == str(raw_head)

    # Incremental: the next run reads only what raw gained since; silver is not appended twice.
    wapflow.write(lh, "raw.trips", raw(spark, [(4, "tue", 2.0)]))
    again = wapflow.run_models(lh)
    assert again.status == "published", again.message
    assert [r["id"] for r in rows(lh, "silver.trips")] == [1, 3, 4]
    assert [(r["day"], r["trips"]) for r in rows(lh, "gold.daily")] == [("mon", 1), ("tue", 2)]
    # Nothing new in raw: silver adds nothing (and its unique check does not see old rows twice).
    third = wapflow.run_models(lh, ["silver.trips"])
    assert third.status == "published", third.message
    assert [r["id"] for r in rows(lh, "silver.trips")] == [1, 3, 4]


def test_a_model_failing_its_checks_blocks_every_model(lakehouse_factory, spark):
    lh = lakehouse(
        lakehouse_factory,
        {
            "silver.trips": {
                "sql": "SELECT id, day, fare FROM raw.trips UNION ALL SELECT id, day, fare FROM raw.trips"
            },
            "gold.daily": {"sql": GOLD_SQL},
        },
    )
    wapflow.write(lh, "raw.trips", raw(spark, [(1, "mon", 9.5)]))
    res = wapflow.run_models(lh)
    assert res.status == "blocked" and res.exit_code == 1, res.message
    assert rows(lh, "silver.trips") == [] and rows(lh, "gold.daily") == []


def test_python_models_their_errors_name_the_model_and_publish_nothing(lakehouse_factory, spark, tmp_path: Path):
    pkg = tmp_path / "mymodels.py"
    pkg.write_text(
        textwrap.dedent(
            """
            def silver(spark, inputs):
                return inputs["raw.trips"].where("fare > 0")

            def not_a_frame(spark, inputs):
                return [1, 2]

            def broken(spark, inputs):
                raise ValueError("fares feed is down")

            def wider(spark, inputs):
                return inputs["raw.trips"].selectExpr("*", "fare * 0.1 AS tip")
            """
        )
    )
    sys.path.insert(0, str(tmp_path))
    base = lakehouse_factory(TABLES)
    wapflow.write(base, "raw.trips", raw(spark, [(1, "mon", 9.5), (2, "mon", -1.0)]))
    try:
        for fn, status, code, words in (
            ("silver", "published", 0, None),
            ("not_a_frame", "failed", 2, "returned list, not a DataFrame"),
            ("broken", "failed", 3, "raised ValueError: fares feed is down"),
            ("wider", "blocked", 1, "tip"),  # a column silver does not have: its schema contract (strict)
        ):
            lh = with_models(base, {"silver.trips": {"python": f"mymodels:{fn}", "depends_on": ["raw.trips"]}})
            res = wapflow.run_models(lh)
            assert (res.status, res.exit_code) == (status, code), res.message
            if words is not None:
                assert words in res.message and "silver.trips" in res.message, res.message
        assert [r["id"] for r in rows(lh, "silver.trips")] == [1]  # the failed runs published nothing more
    finally:
        sys.path.remove(str(tmp_path))


def test_sql_naming_an_unknown_column_fails_naming_the_model(lakehouse_factory, spark):
    lh = lakehouse(lakehouse_factory, {"silver.trips": {"sql": "SELECT id,\n  day,\n  tip\nFROM raw.trips"}})
    wapflow.write(lh, "raw.trips", raw(spark, [(1, "mon", 9.5)]))
    res = wapflow.run_models(lh)
    assert res.status == "failed" and res.exit_code == 2, res.message
    assert "model silver.trips" in res.message and "tip" in res.message
    assert "line 3 pos 2" in res.message  # as the model's sql is written
    assert rows(lh, "silver.trips") == []


def test_lineage_events_of_a_model_name_its_input_tables(lakehouse_factory, spark, tmp_path: Path):
    import json

    from wapflow.config import LineageConfig

    lh = lakehouse(lakehouse_factory, {"silver.trips": {"sql": SILVER_SQL}})
    events = tmp_path / "events.jsonl"
    lh = Lakehouse(
        lh.config.model_copy(update={"lineage": LineageConfig(transport="file", path=str(events))}), spark=lh.spark
    )
    wapflow.write(lh, "raw.trips", raw(spark, [(1, "mon", 9.5)]))
    assert wapflow.run_models(lh).status == "published"
    model_events = [e for e in map(json.loads, events.read_text().splitlines()) if e["job"]["name"] == "silver.trips"]
    assert [e["eventType"] for e in model_events] == ["START", "COMPLETE"]
    assert {i["name"] for i in model_events[-1]["inputs"]} == {"raw.trips"}
