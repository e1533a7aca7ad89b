"""A run handed over between processes: what one process left is what the next one sees and builds on.

Two defects found with two `wap watch` workers (tests/process/test_takeover.py kills them at random): a worker's
catalog kept a loaded table for 30 s and missed the other worker's commits, so it audited a run the other had
written against a view without its snapshot ("Cannot find the end snapshot"), or created a branch the other had
created ("Ref ... already exists"); and a step resumed with a state older than the run's branch trusted snapshots
the branch no longer held. Here each is set up exactly, with PyIceberg as the other process.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from support.data import trips_file
from wapflow.pipeline import WapRun
from wapflow.sql.identifiers import TableName

pytestmark = pytest.mark.spark
T = TableName.parse("nyc.trips")
CHECKS = {"nyc.trips": {"checks": [{"check": "not_null", "column": "passenger_count"}]}}


def _pyiceberg(lh):
    from pyiceberg.catalog.sql import SqlCatalog

    wh = lh.config.local_warehouse_path()
    return SqlCatalog(lh.config.lakehouse.catalog_name, uri=f"sqlite:///{wh / 'catalog.db'}", warehouse=f"file://{wh}")


def test_a_commit_of_another_process_is_seen_at_once(lakehouse_factory, landing: Path) -> None:
    lh = lakehouse_factory(CHECKS)
    assert WapRun(lh, T.dotted, [str(trips_file(landing, "a.parquet", 10, start_id=1))]).run().status == "published"
    main = lh.tables.head(T)
    assert "theirs" not in lh.tables.refs(T)  # the table is loaded here now (a cache would keep this view)

    # Another process branches the table and appends to its branch, as another worker's write does.
    other = _pyiceberg(lh).load_table(T.dotted)
    other.manage_snapshots().create_branch(main, "theirs").commit()
    rows = other.scan().to_arrow().slice(0, 3)
    other.append(pa.Table.from_batches(rows.to_batches(), schema=rows.schema), branch="theirs")
    theirs = _pyiceberg(lh).load_table(T.dotted).metadata.refs["theirs"].snapshot_id

    assert lh.tables.refs(T)["theirs"].snapshot_id == theirs
    assert lh.tables.read_increment(T, main, theirs).count() == 3


def test_a_state_older_than_its_branch_writes_again_and_publishes_once(lakehouse_factory, landing: Path) -> None:
    lh = lakehouse_factory(CHECKS)
    f = trips_file(landing, "b.parquet", 25, start_id=100)
    run = WapRun(lh, T.dotted, [str(f)])
    run.prepare()
    written = run.write()  # the state a durable workflow recorded after the write step
    assert written.run_snapshots
    # Meanwhile the run's branch went (another process reset it, as a takeover of an unfinished write does).
    lh.iceberg.reset(T, run.branch, [])
    assert run.branch not in lh.tables.refs(T)

    resumed = WapRun(lh, T.dotted, [str(f)], run_id=run.run_id)
    resumed.state = written  # the recorded state, replayed by whoever resumes the run
    result = resumed.run()
    assert result.status == "published", result.message
    on_main = _pyiceberg(lh).load_table(T.dotted).scan().to_arrow()
    assert sorted(on_main.column("trip_id").to_pylist()) == list(range(100, 125))  # once, not twice, not none
    assert [b for b in _pyiceberg(lh).load_table(T.dotted).metadata.refs if b != "main"] == []
    assert lh.store.get(run.run_id).status == "published"
