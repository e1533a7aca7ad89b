"""The write's outcome on real Spark and Iceberg: what each case records in the run's state (the audit and
publish read it), and a state stored without one (by an older wapflow) audited and published as before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from support.data import changes_file, write_parquet
from wapflow.pipeline import WapRun, run_wap
from wapflow.pipeline.state import RunState
from wapflow.writing.plan import WriteOutcome

pytestmark = pytest.mark.spark
T = "crm.customers"
MERGE = {"mode": "merge", "key": ["id"], "delete_when": "op = 'D'", "checks": []}


def main_ids(lh: Any) -> list[int]:
    """main's ids, read without Spark (PyIceberg on the SQLite catalog)."""
    from pyiceberg.catalog.sql import SqlCatalog

    wh = Path(lh.config.warehouse_location())
    cat = SqlCatalog(lh.catalog, uri=f"sqlite:///{wh / 'catalog.db'}", warehouse=f"file://{wh}")
    return sorted(cat.load_table(T).scan().to_arrow().column("id").to_pylist())


def outcome(run: WapRun) -> WriteOutcome:
    assert run.state.write_outcome is not None
    return WriteOutcome.from_dict(run.state.write_outcome)


def test_a_merge_records_its_change_and_a_state_without_an_outcome_publishes_the_same(lakehouse_factory, landing):
    lh = lakehouse_factory({T: MERGE})
    seed = run_wap(lh, T, [changes_file(landing, "seed.parquet", [(i, f"n{i}", "I") for i in range(1, 6)])])
    assert seed.status == "published", seed.message
    batch = [(1, "one", "U"), (2, "two", "U"), (3, None, "D"), (6, "six", "I")]
    run = WapRun(lh, T, [changes_file(landing, "b1.parquet", batch)], run_id="merge_outcome")
    run.prepare()
    run.write()
    got = outcome(run)
    assert (got.case, got.mode, got.change, got.keys_after_write, got.staged) == ("change", "merge", True, True, False)
    assert got.changes == {"rows_inserted": 1, "rows_updated": 2, "rows_deleted": 1, "rows_replaced": 0, "main_rows": 5}
    assert got.rows_written == 3 and got.snapshot_id == run.state.run_snapshots[-1]["snapshot_id"]
    # The state as a wapflow stored it before writes recorded their outcome: audit and publish derive it.
    older = run.state.to_dict()
    del older["write_outcome"]
    run.state = RunState.from_dict(older)
    run.audit()
    run.publish()
    res = run.result()
    assert res.status == "published", res.message
    assert "the merge of crm.customers: inserted 1, updated 2, deleted 1" in res.message
    assert res.rows_written == 3
    assert main_ids(lh) == [1, 2, 4, 5, 6]


def test_an_append_and_a_staged_batch_record_what_they_wrote(lakehouse_factory, landing):
    lh = lakehouse_factory({T: {"schema": "add_columns", "checks": []}})
    first = WapRun(lh, T, [changes_file(landing, "a.parquet", [(1, "a", "I"), (2, "b", "I")])])
    first.prepare()
    first.write()
    got = outcome(first)
    # Landed parquet files with the table's columns: adopted as they are.
    assert (got.case, got.mode, got.change, got.rows_added, got.rows_written) == ("adopt", "append", False, 2, 2)
    assert first.run().status == "published"
    wider = pa.table({"id": pa.array([3], pa.int64()), "name": ["c"], "op": ["I"], "tier": ["gold"]})
    staged = WapRun(lh, T, [str(write_parquet(Path(landing) / "wider.parquet", wider))])
    staged.prepare()
    staged.write()
    got = outcome(staged)
    assert (got.case, got.staged, got.staged_columns, got.rows_added) == ("staged", True, ("tier",), 1)
    res = staged.run()
    assert res.status == "published", res.message
    assert main_ids(lh) == [1, 2, 3]
