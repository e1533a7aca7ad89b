"""The public Python API (wapflow.*): what a script does, with real Spark and Iceberg, read back with PyIceberg."""

from __future__ import annotations

from pathlib import Path

import pytest

import wapflow
from support.cli_harness import LazyReader
from support.data import trips_file
from wapflow import checks as C
from wapflow.errors import ConfigError
from wapflow.pipeline.state import RunState

_n = iter(range(1000))


@pytest.fixture
def lh(spark, tmp_path: Path):
    catalog = f"api{next(_n)}"
    return wapflow.connect(
        None,
        warehouse=str(tmp_path / "lakehouse"),
        catalog_name=catalog,
        master="local[2]",
        tables={"nyc.trips": {"on_failure": "keep"}},
        sources={"trips": {"table": "nyc.trips", "location": str(tmp_path / "source"), "settle_seconds": 0}},
        spark=spark,
    ), LazyReader(tmp_path, catalog)


@pytest.mark.spark
def test_run_steps_result_report_read(lh, tmp_path):
    lh, reader = lh
    landing = tmp_path / "landing"
    res = wapflow.run(lh, "nyc.trips", [trips_file(landing, "a.parquet", 30)], checks=[C.not_null("passenger_count")])
    assert res.status == "published" and res.exit_code == 0 and reader.main("nyc.trips") == res.snapshot_id
    assert wapflow.read(lh, "nyc.trips").count() == 30

    # One step at a time, through JSON, as an orchestrator passing state between tasks would.
    state = wapflow.start(
        "nyc.trips",
        [trips_file(landing, "b.parquet", 20, null_rate=0.2, start_id=100)],
        checks=[C.not_null("passenger_count")],
    )
    for step in wapflow.steps.ALL:
        state = RunState.from_json(step(lh, state).to_json())
    res = wapflow.result(lh, state)
    assert res.status == "blocked" and res.exit_code == 1 and res.branch_kept
    assert reader.branches("nyc.trips") == [res.branch] and len(reader.rows("nyc.trips")) == 30
    rep = wapflow.report(lh, res.run_id)
    assert rep["status"] == "blocked" and [c["name"] for c in rep["checks"] if c["status"] == "failed"]
    assert wapflow.read(lh, "nyc.trips", branch=res.branch).count() == 50

    # A replayed step changes nothing; a source through the API publishes each new file once.
    assert wapflow.steps.publish(lh, state) == state
    trips_file(tmp_path / "source", "c.parquet", 10, start_id=1000)
    trips_file(tmp_path / "source", "d.parquet", 10, start_id=2000)
    # The source's table declares no checks: ingest refuses before listing (nothing claimed, nothing failed)...
    with pytest.raises(ConfigError, match=r"nyc\.trips has no checks"):
        wapflow.ingest(lh, "trips")
    ing = wapflow.ingest(lh, "trips", no_checks=True)  # ...unless the caller says it may publish without
    assert ing.exit_code == 0, ing.message()
    assert all(r.message.endswith("without checks (--no-checks)") for r in ing.runs), [r.message for r in ing.runs]
    assert {Path(f.uri).name: f.state for f in ing.files} == {"c.parquet": "published", "d.parquet": "published"}
    assert len(reader.rows("nyc.trips")) == 50
