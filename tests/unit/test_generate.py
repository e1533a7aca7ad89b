"""The demo data generator (no Spark)."""

from __future__ import annotations

import pyarrow.compute as pc
import pyarrow.parquet as pq

from wapflow.demo.generate import generate_trips, write_trips


def test_clean_and_dirty_files(tmp_path):
    clean = pq.read_table(write_trips(tmp_path / "c.parquet", 5000, seed=1))
    dirty = pq.read_table(write_trips(tmp_path / "d.parquet", 5000, null_rate=0.02, seed=2, start_id=5001))
    assert clean.num_rows == dirty.num_rows == 5000
    assert clean.column("passenger_count").null_count == 0
    assert dirty.column("passenger_count").null_count == 100
    assert pc.min(dirty.column("trip_id")).as_py() == 5001
    assert pc.all(pc.greater_equal(clean.column("dropoff_at"), clean.column("pickup_at"))).as_py()
    assert set(clean.column("payment_type").to_pylist()) <= {1, 2, 3, 4}


def test_tiny_null_rate_still_yields_one_null():
    assert generate_trips(10, null_rate=0.001).column("passenger_count").null_count == 1


def test_chunked_write_keeps_ids_unique(tmp_path):
    t = pq.read_table(write_trips(tmp_path / "big.parquet", 1_000_050))
    ids = t.column("trip_id")
    assert t.num_rows == 1_000_050
    assert pc.count_distinct(ids).as_py() == 1_000_050
    assert not (tmp_path / "big.parquet.tmp").exists()
