"""Lakehouses made by real WAP runs, shared by the dashboard's tests (AppTest, service, browser).

`build`: two `wap ingest` passes over a `[sources.trips]` folder: a clean file (published: 200 rows on main) and
a file with nulls in passenger_count (blocked by not_null, its branch kept). Built once per test session in
the shared SparkSession; the tests then read it without Spark, as the dashboard does.

`build_trends`: ten runs of nyc.trips, each status a trend shows: published runs, one warned by the anomaly
check on mean(fare_amount) (its fares four times the others', published with the warning), one blocked by
not_null, and a last one held for review (`review = "always"` from then on). The runs are then placed two
hours apart, the last five minutes ago (their times in the run store and the metric history), as a schedule
would have made them. docs/screenshots.py shows this lakehouse too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq

from support.data import make_config, trips_file, write_parquet
from wapflow.config import SourceConfig
from wapflow.demo.generate import generate_trips
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.outer.ingest import ingest

CHECKS = [
    {"check": "not_null", "column": "passenger_count"},
    {"check": "null_rate", "column": "fare_amount", "max": 0.9, "severity": "warn"},
    {"check": "unique", "columns": ["trip_id"]},
]
CLEAN_ROWS, DIRTY_ROWS = 200, 120


@dataclass(frozen=True)
class Lake:
    config: Path
    catalog: str
    published_run: str
    blocked_run: str
    branch: str
    dirty_nulls: dict[str, int]  # nulls per column of the blocked file, counted with pyarrow


_built: Lake | None = None


def build(spark: Any, folder: Path) -> Lake:
    """The lakehouse (once per session): a published ingest, then a blocked one."""
    global _built
    if _built is not None:
        return _built
    landing = folder / "landing"
    landing.mkdir(parents=True)
    cfg = make_config(folder, {"nyc.trips": {"checks": CHECKS}})
    cfg.sources["trips"] = SourceConfig(table="nyc.trips", location=str(landing), settle_seconds=0)
    lh = Lakehouse(cfg, spark=spark)
    trips_file(landing, "f0.parquet", CLEAN_ROWS, start_id=1, seed=1)
    first = ingest(lh, "trips")
    assert first.exit_code == 0, first.message()
    dirty = trips_file(landing, "f1.parquet", DIRTY_ROWS, null_rate=0.2, start_id=10_000, seed=2)
    second = ingest(lh, "trips")
    assert second.exit_code == 1, second.message()
    (published,) = first.runs
    (blocked,) = second.runs
    assert blocked.status == "blocked" and blocked.branch, blocked
    data = pq.read_table(dirty)
    lake = folder / "lakehouse"
    config = folder / "wap.toml"
    config.write_text(
        f'[lakehouse]\nwarehouse = "{lake}"\ncatalog_name = "{cfg.lakehouse.catalog_name}"\nmaster = "local[2]"\n\n'
        f'[tables."nyc.trips"]\nchecks = {json.dumps(CHECKS).replace(":", "=")}\n\n'
        f'[sources.trips]\ntable = "nyc.trips"\nlocation = "{landing}"\nsettle_seconds = 0\n'
    )
    _built = Lake(
        config=config,
        catalog=cfg.lakehouse.catalog_name,
        published_run=published.run_id,
        blocked_run=blocked.run_id,
        branch=blocked.branch,
        dirty_nulls={c: data.column(c).null_count for c in data.column_names},
    )
    return _built


# The anomaly check a trend's picker must start on (not the alphabetically first metric).
WATCHED = "mean(fare_amount)"
TREND_CHECKS = [
    {"check": "not_null", "column": "passenger_count"},
    {
        "check": "anomaly",
        "metric": "mean",
        "column": "fare_amount",
        "min_history": 3,
        "severity": "warn",
        "on_short_history": "pass",
    },
]
# The runs in order: (status, rows); "warned" is published with the anomaly's warning.
TREND_RUNS = [
    ("published", 200),
    ("published", 210),
    ("published", 195),
    ("published", 205),
    ("warned", 215),
    ("published", 200),
    ("blocked", 190),
    ("published", 220),
    ("published", 205),
    ("held", 210),
]
TREND_SPACING = timedelta(hours=2)


@dataclass(frozen=True)
class TrendLake:
    config: Path
    runs: dict[str, str]  # run id -> the status a trend shows it with (published, warned, blocked, held)

    def of(self, status: str) -> list[str]:
        return [r for r, s in self.runs.items() if s == status]


_trends: TrendLake | None = None


def _toml(lake: Path, catalog: str, review: bool) -> str:
    checks = ",\n  ".join("{ " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in c.items()) + " }" for c in TREND_CHECKS)
    held = 'review = "always"\n' if review else ""
    return (
        f'[lakehouse]\nwarehouse = "{lake}"\ncatalog_name = "{catalog}"\nmaster = "local[2]"\n\n'
        f'[tables."nyc.trips"]\n{held}checks = [\n  {checks},\n]\n'
    )


def build_trends(spark: Any, folder: Path, catalog: str | None = None) -> TrendLake:
    """The trend lakehouse in `folder` (once per session with the shared SparkSession; `spark` None: this
    process starts its own, as docs/screenshots.py does)."""
    global _trends
    if _trends is not None and spark is not None:
        return _trends
    from wapflow.config import load_config
    from wapflow.pipeline import run_wap
    from wapflow.runs.metrics import metrics_table
    from wapflow.runs.store import RunStore, runs_table

    landing = folder / "landing"
    landing.mkdir(parents=True, exist_ok=True)
    name = catalog or make_config(folder).lakehouse.catalog_name
    config = folder / "wap.toml"
    runs: dict[str, str] = {}
    lh: Lakehouse | None = None
    start = 1
    for i, (status, rows) in enumerate(TREND_RUNS):
        held = status == "held"
        if lh is None or held:  # review = "always" from the held run on
            config.write_text(_toml(folder / "lakehouse", name, review=held))
            lh = Lakehouse(load_config(config), spark=spark or (lh.spark if lh is not None else None))
        data = generate_trips(rows, null_rate=0.2 if status == "blocked" else 0.0, seed=100 + i, start_id=start)
        if status == "warned":
            fares = data.column("fare_amount")
            data = data.set_column(data.schema.get_field_index("fare_amount"), "fare_amount", pc.multiply(fares, 4.0))
        path = write_parquet(landing / f"trips_{i:02d}.parquet", data)
        res = run_wap(lh, "nyc.trips", [str(path)])
        expected = {"warned": "published", "held": "awaiting_review"}.get(status, status)
        assert res.status == expected, (status, res.status, res.message)
        if status == "warned":
            assert any(c.get("status") == "warned" for c in res.checks), res.checks
        runs[res.run_id] = status
        start += rows
    assert lh is not None
    store = RunStore(lh.config.run_store_url())
    last = datetime.now(UTC) - timedelta(minutes=5)
    with store.engine.begin() as conn:
        for i, run_id in enumerate(runs):
            rec = store.get(run_id)
            assert rec is not None
            at = last - TREND_SPACING * (len(runs) - 1 - i)
            took = (rec.finished_at - rec.started_at) if rec.finished_at else timedelta(seconds=5)
            r = runs_table.c
            conn.execute(runs_table.update().where(r.run_id == run_id).values(started_at=at, finished_at=at + took))
            conn.execute(metrics_table.update().where(metrics_table.c.run_id == run_id).values(run_at=at))
    store.close()
    lake = TrendLake(config=config, runs=runs)
    if spark is not None:
        _trends = lake
    return lake
