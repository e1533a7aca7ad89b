"""Test data and configs without Spark: parquet files of generated trips, a parsed config per test, the
README's six checks, and the `landing` folder fixture (a pytest plugin, see tests/conftest.py)."""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from wapflow.config import WapConfig, parse_config
from wapflow.demo.generate import generate_trips

_counter = itertools.count()

TRIPS_CHECKS = [
    {"check": "not_null", "column": "passenger_count"},
    {"check": "between", "column": "fare_amount", "min": 0, "max": 1000, "severity": "warn"},
    {"check": "accepted_values", "column": "payment_type", "values": [1, 2, 3, 4, 5, 6]},
    {"check": "unique", "columns": ["trip_id"]},
    {"check": "row_count", "min": 1},
    {"check": "expression", "sql": "dropoff_at >= pickup_at"},
]


def make_config(tmp: Path, tables: dict[str, Any] | None = None, **lakehouse: Any) -> WapConfig:
    """A config of its own Spark catalog name: tests on the one shared session never see each other's tables."""
    name = f"t{next(_counter)}_{os.getpid()}"
    lh = {"warehouse": str(tmp / "lakehouse"), "catalog_name": name, "master": "local[2]"}
    lh.update(lakehouse)
    cfg = parse_config({"lakehouse": lh, "tables": tables or {}})
    cfg.base_dir = tmp
    return cfg


@pytest.fixture
def landing(tmp_path: Path) -> Path:
    d = tmp_path / "landing"
    d.mkdir()
    return d


def write_parquet(path: Path, table: pa.Table) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path


def trips_file(
    landing: Path, name: str, rows: int = 200, *, null_rate: float = 0.0, start_id: int = 1, seed: int = 0
) -> Path:
    return write_parquet(landing / name, generate_trips(rows, null_rate=null_rate, start_id=start_id, seed=seed))


def changes_file(landing: Path, name: str, rows: list[tuple[Any, ...]], *, seq: bool = False) -> str:
    """A change feed file for merge tests: id, name, op (I/U/D) and, with seq, the change's sequence number."""
    cols: dict[str, Any] = {
        "id": pa.array([r[0] for r in rows], pa.int64()),
        "name": pa.array([r[1] for r in rows], pa.string()),
        "op": pa.array([r[2] for r in rows], pa.string()),
    }
    if seq:
        cols["seq"] = pa.array([r[3] for r in rows], pa.int64())
    return str(write_parquet(landing / name, pa.table(cols)))
