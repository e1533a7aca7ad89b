"""Spark Declarative Pipelines projects run by `wap pipelines run`: Spark's own engine writes every dataset on the
run's branch, wapflow audits them and publishes all in one commit or none. Read back by PyIceberg's own client of
the embedded catalog (main's pointer and history, which a reader between commits would see)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import wapflow
from support.embedded_reader import reader, rows
from support.sdp_project import TABLES, project
from wapflow.errors import EXIT_BLOCKED, EXIT_REVIEW, EXIT_USAGE, UsageError
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.lakehouse.model import PIPELINE_RUN_PROP
from wapflow.sdp.run import DryRun

pytestmark = pytest.mark.spark


def main_of(lh: Lakehouse, table: str) -> Any:
    return reader(lh).load_table(tuple(table.split(".")))


def refs(lh: Lakehouse, table: str) -> set[str]:
    return set(main_of(lh, table).metadata.refs)


def test_a_pipeline_publishes_every_dataset_in_one_commit_and_a_refresh_never_shows_an_empty_view(
    lakehouse_factory: Any, tmp_path: Path
) -> None:
    lh = lakehouse_factory(TABLES)
    spec = project(tmp_path / "shop")
    res = wapflow.run_pipeline(lh, spec)
    assert not isinstance(res, DryRun)
    assert res.status == "published", res.message
    assert [r.table for r in res.tables] == ["sales.big_orders", "sales.orders"]
    assert len(rows(lh, "sales.orders")) == 20
    assert sorted(r["id"] for r in rows(lh, "sales.big_orders")) == list(range(10, 20))
    assert refs(lh, "sales.orders") == {"main"} and refs(lh, "sales.big_orders") == {"main"}  # branch dropped
    orders = main_of(lh, "sales.orders").current_snapshot()
    assert orders.summary[PIPELINE_RUN_PROP] == res.run_id  # the engine's commit, named by the run

    # The refresh is a delete then an append on the branch; main moves once, from the old rows to the new.
    project(tmp_path / "shop", rows=30)
    again = wapflow.run_pipeline(lh, spec)
    assert again.status == "published", again.message
    assert len(rows(lh, "sales.orders")) == 30 and len(rows(lh, "sales.big_orders")) == 20
    tbl = main_of(lh, "sales.orders")
    heads = [e.snapshot_id for e in tbl.metadata.snapshot_log]  # every snapshot main ever pointed at
    assert heads == [orders.snapshot_id, tbl.current_snapshot().snapshot_id]
    assert tbl.snapshot_by_id(heads[-1]).parent_snapshot_id != heads[0]  # the delete between them: never main
    assert wapflow.run_pipeline(lh, spec, dry=True).datasets[0]["dataset"] in ("sales.orders", "sales.big_orders")


def test_a_failing_expectation_in_the_code_blocks_every_dataset_and_main_stays(
    lakehouse_factory: Any, tmp_path: Path
) -> None:
    lh = lakehouse_factory(TABLES)
    spec = project(tmp_path / "shop")
    assert wapflow.run_pipeline(lh, spec).status == "published"
    before = {t: main_of(lh, t).metadata.current_snapshot_id for t in TABLES}
    project(tmp_path / "shop", shift=3)  # three negative amounts
    res = wapflow.run_pipeline(lh, spec)
    assert res.status == "blocked" and res.exit_code == EXIT_BLOCKED
    orders = next(r for r in res.tables if r.table == "sales.orders")
    failed = [c for c in orders.checks if c["status"] == "failed"]
    assert [(c["name"], c["failing_rows"]) for c in failed] == [("positive_amount", 3)]
    assert {t: main_of(lh, t).metadata.current_snapshot_id for t in TABLES} == before  # neither moved
    assert res.branch in refs(lh, "sales.big_orders")  # kept for `wap diff`, with the passing dataset too


def test_a_broken_project_exits_2_naming_the_file_and_line_and_publishes_nothing(
    lakehouse_factory: Any, tmp_path: Path
) -> None:
    lh = lakehouse_factory(TABLES)
    spec = project(tmp_path / "shop")
    assert wapflow.run_pipeline(lh, spec).status == "published"
    before = {t: main_of(lh, t).metadata.current_snapshot_id for t in TABLES}
    project(tmp_path / "shop", extra_sql="CREATE MATERIALIZED VIEW broken AS SELECT nope FROM orders;\n")
    with pytest.raises(UsageError) as e:
        wapflow.run_pipeline(lh, spec)
    assert e.value.exit_code == EXIT_USAGE
    text = str(e.value)
    assert "big.sql:3" in text and "`nope`" in text and "Traceback" not in text, text
    assert {t: main_of(lh, t).metadata.current_snapshot_id for t in TABLES} == before
    assert refs(lh, "sales.orders") == {"main"}  # what the failed run wrote on its branch is gone
    with pytest.raises(UsageError):
        wapflow.run_pipeline(lh, spec, dry=True)


def test_a_dataset_without_checks_is_refused_and_nothing_is_published(lakehouse_factory: Any, tmp_path: Path) -> None:
    lh = lakehouse_factory({"sales.orders": TABLES["sales.orders"]})  # big_orders has no section
    spec = project(tmp_path / "shop")
    res = wapflow.run_pipeline(lh, spec)
    assert res.status == "failed" and res.exit_code == EXIT_USAGE, res.message
    assert "sales.big_orders" in res.message + str([r.error for r in res.tables]), res.message
    assert rows(lh, "sales.orders") == []


EVENTS_PY = """
from pyspark import pipelines as dp
from pyspark.sql import SparkSession

spark = SparkSession.active()


@dp.table
def events():
    return spark.readStream.format("json").schema("id long, v long").load(spark.conf.get("demo.landing"))
"""
TOTALS_SQL = "CREATE MATERIALIZED VIEW totals AS SELECT count(*) AS n, sum(v) AS v FROM events;\n"


def test_a_streaming_table_is_refused_before_anything_runs(lakehouse_factory: Any, tmp_path: Path) -> None:
    """Iceberg's streaming sink commits to main whatever spark.wap.branch says: refused, nothing written."""
    lh = lakehouse_factory(
        {
            "sales.events": {"checks": [{"check": "not_null", "column": "id"}]},
            "sales.totals": {"checks": [{"check": "row_count", "min": 1}]},
        }
    )
    root, landing = tmp_path / "stream", tmp_path / "landing"
    (root / "transformations").mkdir(parents=True)
    landing.mkdir()
    (root / "transformations" / "events.py").write_text(EVENTS_PY)
    (root / "transformations" / "totals.sql").write_text(TOTALS_SQL)
    spec = root / "spark-pipeline.yml"
    spec.write_text(
        f'name: stream\nstorage: storage\ndatabase: sales\nconfiguration:\n  demo.landing: "{landing}"\n'
        "libraries:\n  - glob:\n      include: transformations/**\n"
    )
    (landing / "a.json").write_text('{"id": 1, "v": 10}\n')
    with pytest.raises(UsageError) as e:
        wapflow.run_pipeline(lh, spec)
    assert e.value.exit_code == EXIT_USAGE and "sales.events (" in str(e.value) and "events.py:" in str(e.value)
    assert not (root / "storage").exists()  # no checkpoint: nothing ran
    assert rows(lh, "sales.events") == [] and rows(lh, "sales.totals") == []
    kinds = {d["dataset"]: d["kind"] for d in wapflow.run_pipeline(lh, spec, dry=True).datasets}
    assert kinds == {"sales.events": "streaming_table", "sales.totals": "materialized_view"}


def test_a_held_pipeline_run_is_approved_or_rejected_as_a_whole(lakehouse_factory: Any, tmp_path: Path) -> None:
    tables = {**TABLES, "sales.orders": {**TABLES["sales.orders"], "review": "always"}}
    lh = lakehouse_factory(tables)
    spec = project(tmp_path / "shop")
    held = wapflow.run_pipeline(lh, spec)
    assert held.status == "awaiting_review" and held.exit_code == EXIT_REVIEW, held.message
    assert rows(lh, "sales.orders") == [] and rows(lh, "sales.big_orders") == []  # neither before the decision
    approved = wapflow.approve(lh, held.run_id, reason="checked the totals", by="ana")
    assert approved.status == "published", approved.message
    assert len(rows(lh, "sales.orders")) == 20 and len(rows(lh, "sales.big_orders")) == 10
    before = {t: main_of(lh, t).metadata.current_snapshot_id for t in TABLES}

    project(tmp_path / "shop", rows=30)
    again = wapflow.run_pipeline(lh, spec)
    assert again.status == "awaiting_review"
    wapflow.reject(lh, again.run_id, reason="not today", by="ana")
    assert {t: main_of(lh, t).metadata.current_snapshot_id for t in TABLES} == before
    assert refs(lh, "sales.orders") == {"main"} and refs(lh, "sales.big_orders") == {"main"}


def test_the_example_project_a_user_copies_publishes(lakehouse_factory: Any, tmp_path: Path) -> None:
    import shutil
    import tomllib

    example = Path(__file__).resolve().parents[2] / "examples" / "sdp"
    shutil.copytree(example, tmp_path / "sdp", ignore=shutil.ignore_patterns("lakehouse", "storage"))
    tables = tomllib.loads((example / "wap.toml").read_text())["tables"]
    lh = lakehouse_factory(tables)
    res = wapflow.run_pipeline(lh, tmp_path / "sdp")  # the folder: its spark-pipeline.yml
    assert res.status == "published", res.message
    assert len(rows(lh, "shop.orders")) == 5 and len(rows(lh, "shop.daily")) == 3


def test_a_stopped_pipeline_session_collected_later_leaves_the_next_runs_session_alone(
    lakehouse_factory: Any,
) -> None:
    """PySpark's Connect session closes its client again when garbage-collected, shutting down the release thread
    pool every session shares; from one of that pool's threads the shutdown waits for itself and the next query
    hangs (the suite hung so on 2026-12-04). A pipeline run's session, once stopped, closes nothing more."""
    from pyspark.sql.connect.client.reattach import ExecutePlanResponseReattachableIterator as Reattach

    from wapflow.sdp import engine

    lh = lakehouse_factory(TABLES)
    first = engine.session(lh, {})
    assert first.sql("SELECT 1 AS one").collect()[0].one == 1
    engine.close(first)
    second = engine.session(lh, {})
    try:
        assert second.sql("SELECT 2 AS two").collect()[0].two == 2
        pool = Reattach._release_thread_pool_instance
        assert pool is not None
        first.__del__()  # what garbage collection does, from whichever thread it runs in
        assert Reattach._release_thread_pool_instance is pool  # not shut down under the live session
        assert second.sql("SELECT 3 AS three").collect()[0].three == 3
    finally:
        engine.close(second)
