"""The Spark progress a person watches during a long write or audit (wapflow.lakehouse.progress): real jobs on
the shared session, the meter recording what a Rich bar would show."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.data import trips_file
from wapflow.lakehouse.progress import Tick, watching

pytestmark = pytest.mark.spark


class Recorder:
    def __init__(self) -> None:
        self.ticks: list[Tick] = []
        self.closed = 0

    def update(self, tick: Tick) -> None:
        self.ticks.append(tick)

    def close(self) -> None:
        self.closed += 1


def test_a_long_read_reports_tasks_and_rows_until_all_are_done(spark, tmp_path: Path) -> None:
    folder = tmp_path / "many"
    folder.mkdir()
    files = [trips_file(folder, f"f{i}.parquet", 20_000, start_id=1 + 20_000 * i, seed=i) for i in range(8)]
    meter = Recorder()
    with watching(spark, meter, "auditing nyc.trips", delay=0.0, every=0.02):
        df = spark.read.parquet(*[str(f) for f in files]).repartition(4)
        total = df.selectExpr("count(*) AS n", "sum(trip_id) AS s").collect()[0]["n"]
    assert total == 160_000
    assert meter.ticks, "no progress was shown for a job of several stages"
    last = meter.ticks[-1]
    assert last.label == "auditing nyc.trips" and last.tasks_done == last.tasks >= 2
    assert last.rows is not None and last.rows >= 160_000  # every row read (each stage counts what it read)
    assert all(a.tasks_done <= b.tasks_done for a, b in zip(meter.ticks, meter.ticks[1:], strict=False))
    assert meter.closed == 1


def test_a_short_block_shows_nothing(spark) -> None:
    meter = Recorder()
    with watching(spark, meter, "writing nyc.trips", delay=2.0):
        spark.range(10).count()
    assert meter.ticks == [] and meter.closed == 1
