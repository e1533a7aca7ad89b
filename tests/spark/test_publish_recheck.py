"""Audits hold at the moment of publish: checks that read main are re-checked if main moved since.

Two runs are driven step by step in a fixed interleaving (both audit against the same main, then
both publish), so the outcome does not depend on timing.
"""

from __future__ import annotations

import pytest

from support.data import trips_file
from wapflow.pipeline import WapRun
from wapflow.sql.identifiers import TableName

pytestmark = pytest.mark.spark
T = TableName.parse("nyc.trips")


def _interleave(lh, a_file, b_file):
    a = WapRun(lh, "nyc.trips", [str(a_file)])
    b = WapRun(lh, "nyc.trips", [str(b_file)])
    for step in ("prepare", "write", "audit"):
        getattr(a, step)()
        getattr(b, step)()
    assert a.report.passed and b.report.passed  # each alone is fine against the main it read
    a.publish()
    b.publish()
    return a, b


def test_overlapping_keys_cannot_both_land(lakehouse_factory, landing):
    lh = lakehouse_factory({"nyc.trips": {"checks": [{"check": "unique_in_table", "columns": ["trip_id"]}]}})
    seed = trips_file(landing, "seed.parquet", 10, start_id=1)
    first = WapRun(lh, "nyc.trips", [str(seed)]).run()
    assert first.status == "published"
    a, b = _interleave(
        lh, trips_file(landing, "a.parquet", 20, start_id=100), trips_file(landing, "b.parquet", 20, start_id=110)
    )
    assert a.rec.status == "published"
    assert b.rec.status == "blocked", b.message
    failed = [c for c in b.report.checks if c.status == "failed"]
    assert [c.check for c in failed] == ["unique_in_table"]
    assert failed[0].failing_rows == 10  # ids 110..119 landed with run a
    assert "re-checked at publish" in failed[0].threshold
    assert lh.tables.head(T) == a.rec.snapshot_id
    rows = [r["trip_id"] for r in lh.tables.read(T).select("trip_id").collect()]
    assert len(rows) == len(set(rows)) == 30
    stored = lh.store.get(b.run_id)
    assert stored.status == "blocked" and any("re-checked" in c["threshold"] for c in stored.checks)


def test_disjoint_keys_both_land_after_the_recheck(lakehouse_factory, landing):
    lh = lakehouse_factory({"nyc.trips": {"checks": [{"check": "unique_in_table", "columns": ["trip_id"]}]}})
    assert (
        WapRun(lh, "nyc.trips", [str(trips_file(landing, "seed.parquet", 10, start_id=1))]).run().status == "published"
    )
    a, b = _interleave(
        lh, trips_file(landing, "a.parquet", 20, start_id=100), trips_file(landing, "b.parquet", 20, start_id=200)
    )
    assert (a.rec.status, b.rec.status) == ("published", "published")
    assert lh.tables.row_count(T) == 50
    # b re-checked (main moved under it) and passed: the report says so.
    recheck = [c for c in b.report.checks if "re-checked at publish" in c.threshold]
    assert [c.status for c in recheck] == ["passed"]


def test_checks_that_do_not_read_main_are_not_rechecked(lakehouse_factory, landing):
    lh = lakehouse_factory({"nyc.trips": {"checks": [{"check": "not_null", "column": "passenger_count"}]}})
    a, b = _interleave(
        lh, trips_file(landing, "a.parquet", 20, start_id=100), trips_file(landing, "b.parquet", 20, start_id=100)
    )
    assert (a.rec.status, b.rec.status) == ("published", "published")
    assert not any("re-checked" in c.threshold for c in b.report.checks)
    assert lh.tables.row_count(T) == 40
