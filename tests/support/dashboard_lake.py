"""One lakehouse made by real WAP runs, shared by the dashboard's tests (AppTest, service, browser).

Two `wap ingest` passes over a `[sources.trips]` folder: a clean file (published: 200 rows on main) and a
file with nulls in passenger_count (blocked by not_null, its branch kept). Built once per test session in
the shared SparkSession; the tests then read it without Spark, as the dashboard does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from support.data import make_config, trips_file
from wapflow.config import SourceConfig
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
