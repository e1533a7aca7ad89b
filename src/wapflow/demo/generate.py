"""Synthetic taxi-trip parquet files, like the reference implementations' data loader but shaped like NYC trips."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

_COLUMNS: list[tuple[str, pa.DataType]] = [
    ("trip_id", pa.int64()),
    ("vendor_id", pa.int32()),
    ("pickup_at", pa.timestamp("us")),
    ("dropoff_at", pa.timestamp("us")),
    ("passenger_count", pa.int32()),
    ("trip_distance", pa.float64()),
    ("fare_amount", pa.float64()),
    ("payment_type", pa.int32()),
]
SCHEMA = pa.schema(_COLUMNS)


def generate_trips(rows: int, *, null_rate: float = 0.0, seed: int = 0, start_id: int = 1) -> pa.Table:
    """`rows` trips; a `null_rate` fraction of passenger_count is null (at least one row when > 0)."""
    if rows < 0:
        raise ValueError("rows must be >= 0")
    if not 0.0 <= null_rate <= 1.0:
        raise ValueError("null_rate must be between 0 and 1")
    rng = np.random.default_rng(seed)
    base = int(datetime(2026, 11, 1, tzinfo=UTC).timestamp() * 1_000_000)
    pickup = base + rng.integers(0, 30 * 24 * 3600 * 1_000_000, rows, dtype=np.int64)
    duration = rng.integers(60, 3600, rows, dtype=np.int64) * 1_000_000
    distance = np.round(rng.gamma(2.0, 1.6, rows), 2)
    fare = np.round(3.0 + distance * 2.5 + rng.normal(0, 1.5, rows).clip(-2, 8), 2)
    passengers = rng.integers(1, 7, rows, dtype=np.int32)
    mask = None
    if null_rate > 0 and rows > 0:
        n_null = max(1, round(rows * null_rate))
        mask = np.zeros(rows, dtype=bool)
        mask[rng.choice(rows, size=n_null, replace=False)] = True
    cols = [
        pa.array(np.arange(start_id, start_id + rows, dtype=np.int64)),
        pa.array(rng.integers(1, 3, rows, dtype=np.int32)),
        pa.array(pickup, type=pa.timestamp("us")),
        pa.array(pickup + duration, type=pa.timestamp("us")),
        pa.array(passengers, mask=mask),
        pa.array(distance),
        pa.array(fare),
        pa.array(rng.choice(np.array([1, 2, 3, 4], dtype=np.int32), rows, p=[0.7, 0.25, 0.03, 0.02])),
    ]
    return pa.Table.from_arrays(cols, schema=SCHEMA)


def write_trips(path: Path, rows: int, *, null_rate: float = 0.0, seed: int = 0, start_id: int = 1) -> Path:
    """Write in chunks of a million rows so a 10M-row benchmark file needs little memory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    chunk = 1_000_000
    with pq.ParquetWriter(tmp, SCHEMA) as writer:
        done = 0
        while True:
            n = min(chunk, rows - done)
            part = generate_trips(n, null_rate=null_rate, seed=seed + done, start_id=start_id + done)
            writer.write_table(part, row_group_size=chunk)
            done += n
            if done >= rows:
                break
    tmp.replace(path)  # land atomically: watchers never see half a file
    return path
