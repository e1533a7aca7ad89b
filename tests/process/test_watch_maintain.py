"""`wap watch`'s scheduled maintenance: a durable DBOS workflow per table and schedule slot, on the ingest
queue partitioned by table (real DBOS on SQLite, real Spark and Iceberg in-process)."""

from __future__ import annotations

import os

import pytest

from support.data import trips_file
from wapflow.config import WatchConfig
from wapflow.outer.durable import Durable
from wapflow.outer.watch import Watcher
from wapflow.runs.maintenance import MaintenanceLog

EAGER = {"expire_older_than": "0s", "revert_window": "0s", "keep_last": 1, "min_input_files": 2}


@pytest.mark.spark
def test_maintenance_runs_as_one_durable_workflow_per_slot(source, landing):
    from dbos import DBOS

    lh, reader = source(max_files_per_run=1)
    lh.config.watch = WatchConfig(interval=0.5, worker="tm")
    lh.config.maintenance = lh.config.maintenance.model_copy(update={**EAGER, "every": "1h"})
    for i in range(5):
        trips_file(landing, f"f{i:02d}.parquet", 20, start_id=1 + 100 * i, seed=i)
        os.utime(landing / f"f{i:02d}.parquet", ns=(10**18 + i * 10**9, 10**18 + i * 10**9))
    watcher = Watcher(lh, ["trips"], once=True)
    assert watcher.maintenance_every == {"nyc.trips": 3600.0}
    res = watcher.run()  # the first maintenance is due an hour after the start: none in this pass
    assert {f.state for f in res.files} == {"published"}
    assert MaintenanceLog(lh.store.engine).list("nyc.trips") == []
    rows = sorted(r["trip_id"] for r in reader.rows("nyc.trips"))
    assert len(rows) == 100

    durable = Durable(lh, worker="tm", concurrency=1)
    try:
        wid = durable.enqueue_maintenance("nyc.trips", 7)
        out = DBOS.retrieve_workflow(wid).get_result()
        assert out["status"] == "done", out
        recs = MaintenanceLog(lh.store.engine).list("nyc.trips")
        compact = next(r for r in recs if r.action == "compact")
        assert compact.status == "done" and compact.figures["rewritten_data_files"] == 5
        # The same slot again (another tick, another worker): the finished workflow, nothing runs twice.
        assert durable.enqueue_maintenance("nyc.trips", 7) == wid
        assert DBOS.retrieve_workflow(wid).get_result() == out
        assert len(MaintenanceLog(lh.store.engine).list("nyc.trips")) == len(recs)
    finally:
        durable.stop(0)
    assert sorted(r["trip_id"] for r in reader.rows("nyc.trips")) == rows
