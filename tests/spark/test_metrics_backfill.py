"""Issue 49: `wap metrics TABLE --backfill` on a table wapflow created. Creating a table commits an empty
snapshot (the base of the first run's branch); backfill must not record it as a published 0-row run, or an
anomaly band learns a batch that never was. Real Spark, Iceberg and run store; the CLI in this process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from support.data import trips_file
from wapflow.api import approve
from wapflow.cli import app
from wapflow.lakehouse.lineage import picked_from, run_of
from wapflow.pipeline import run_wap
from wapflow.runs.metrics import MetricHistory, metrics_table
from wapflow.sql.identifiers import TableName

pytestmark = pytest.mark.spark
T = TableName.parse("nyc.trips")
ROW_COUNT = {"check": "anomaly", "metric": "row_count", "min_history": 2}


def _config(lh, folder: Path) -> Path:
    """A wap.toml on the lakehouse of `lh` (its warehouse, catalog and run store), for the CLI."""
    cfg = folder / "wap.toml"
    lake = lh.config.lakehouse
    cfg.write_text(
        f'[lakehouse]\nwarehouse = "{lake.warehouse}"\ncatalog_name = "{lh.catalog}"\nmaster = "local[2]"\n'
        f'run_store = "{lh.config.run_store_url()}"\n'
    )
    return cfg


def _backfill(cfg: Path) -> dict:
    got = CliRunner().invoke(
        app, ["metrics", "nyc.trips", "--backfill", "--metric", "row_count", "--json", "--config", str(cfg)]
    )
    assert got.exit_code == 0, got.output
    return json.loads(got.stdout)


def test_backfill_leaves_out_the_empty_snapshot_that_created_the_table(lakehouse_factory, landing: Path):
    lh = lakehouse_factory({"nyc.trips": {"checks": [ROW_COUNT]}})
    ids = []
    for day, rows in enumerate([100, 104]):  # the first run creates the table (an empty snapshot), then appends
        res = run_wap(lh, "nyc.trips", [str(trips_file(landing, f"d{day}.parquet", rows, start_id=1000 * day + 1))])
        assert res.status == "published", res.message
        ids.append(res.run_id)
    main = lh.metadata.ancestry(lh.metadata.snapshots(T), lh.metadata.head(T, "main"))
    assert [s.added_records for s in main] == [104, 100, 0]  # the create snapshot is main's first

    # A table of a wapflow before the metric history: its runs recorded none.
    with lh.store.engine.begin() as conn:
        conn.execute(metrics_table.delete().where(metrics_table.c.table_name == "nyc.trips"))

    doc = _backfill(_config(lh, landing))
    assert doc["backfill"] == {"table": "nyc.trips", "recorded": 2, "already": 0, "columns": 2}
    assert [(r["run_id"], r["value"], r["status"]) for r in doc["metrics"]] == [
        (ids[1], 104.0, "published"),
        (ids[0], 100.0, "published"),
    ]
    assert _backfill(_config(lh, landing))["backfill"]["recorded"] == 0  # again: nothing new
    assert MetricHistory(lh.store.engine).published("nyc.trips", "row_count", "", 30) == [104.0, 100.0]

    # The band of the next run learns the two batches, not a third of 0 rows.
    res = run_wap(lh, "nyc.trips", [str(trips_file(landing, "d2.parquet", 102, start_id=5001))])
    assert res.status == "published", res.message
    band = res.checks[0]
    assert band["name"] == "anomaly(row_count)" and band["observed"]["history"] == 2, band


def test_backfill_of_a_table_with_only_its_create_snapshot_records_nothing(lakehouse_factory, landing: Path):
    """A first run blocked: the table exists, main holds only the empty snapshot that created it."""
    lh = lakehouse_factory({"nyc.trips": {"checks": [{"check": "not_null", "column": "passenger_count"}]}})
    res = run_wap(lh, "nyc.trips", [str(trips_file(landing, "dirty.parquet", 50, null_rate=0.2))])
    assert res.status == "blocked", res.message
    doc = _backfill(_config(lh, landing))
    assert doc["backfill"] == {"table": "nyc.trips", "recorded": 0, "already": 0, "columns": 0}
    assert [(r["run_id"], r["status"]) for r in doc["metrics"]] == [(res.run_id, "blocked")]
    with lh.store.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(metrics_table)).scalar() > 0
        assert not conn.execute(
            sa.select(metrics_table.c.run_id).where(metrics_table.c.run_id.like("snapshot-%"))
        ).all()


def test_backfill_knows_a_cherry_picked_run_whose_branch_snapshot_has_expired(lakehouse_factory, landing: Path):
    """A run held for review is approved after main moved (cherry-picked: main's snapshot names its run only
    through the branch snapshot it was picked from), then snapshot expiry removes that branch snapshot. The run
    recorded its metrics itself: backfill must not record its rows a second time as another writer's."""
    warn = {"check": "not_null", "column": "passenger_count", "severity": "warn"}
    lh = lakehouse_factory({"nyc.trips": {"checks": [warn], "review": "on_warn"}})
    held = run_wap(lh, "nyc.trips", [str(trips_file(landing, "held.parquet", 60, null_rate=0.1))])
    assert held.status == "awaiting_review", held.message
    other = run_wap(lh, "nyc.trips", [str(trips_file(landing, "other.parquet", 40, start_id=1001))])
    assert other.status == "published", other.message
    res = approve(lh, held.run_id, reason="expected", by="carol")
    assert res.status == "published" and res.published_via == "cherry_pick", res.message

    ident = lh.tables.ident(T)
    lh.spark.sql(
        f"CALL {lh.catalog}.system.expire_snapshots(table => {T.procedure_arg(lh.catalog)}, "
        "older_than => current_timestamp(), retain_last => 10)"
    ).collect()
    snaps = lh.metadata.snapshots(T)
    main = lh.metadata.ancestry(snaps, lh.metadata.head(T, "main"))
    # Newest first: the approval's empty commit and the run's rows, both picked from snapshots now gone, the
    # other run's rows (its own snapshot), the table's create snapshot.
    assert [(s.added_records, picked_from(s.summary) is not None, run_of(snaps, s)) for s in main] == [
        (0, True, None),
        (60, True, None),
        (40, False, other.run_id),
        (0, False, None),
    ]
    assert lh.spark.table(ident).count() == 100

    doc = _backfill(_config(lh, landing))
    assert doc["backfill"] == {"table": "nyc.trips", "recorded": 0, "already": 2, "columns": 0}
    assert sorted((r["run_id"], r["value"]) for r in doc["metrics"]) == sorted(
        [(held.run_id, 60.0), (other.run_id, 40.0)]
    )
