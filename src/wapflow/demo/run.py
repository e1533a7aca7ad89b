"""`wap demo`: two landed files, one clean and one dirty, through write-audit-publish."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wapflow.config import WapConfig, load_config
from wapflow.demo.generate import write_trips
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.pipeline import RunResult, run_wap
from wapflow.sql.identifiers import TableName

MARKER = ".wap-demo"
TABLE = "nyc.trips"

DEMO_CONFIG = """# Written by `wap demo`: the demo's lakehouse and the audit of nyc.trips.
[lakehouse]
warehouse = "./lakehouse"
master = "local[2]"

[tables."nyc.trips"]
format = "parquet"
on_failure = "keep"
checks = [
  { check = "not_null", column = "passenger_count" },
  { check = "between", column = "fare_amount", min = 0, max = 1000, severity = "warn" },
  { check = "accepted_values", column = "payment_type", values = [1, 2, 3, 4, 5, 6] },
  { check = "unique", columns = ["trip_id"] },
  { check = "row_count", min = 1 },
  { check = "expression", sql = "dropoff_at >= pickup_at" },
]
"""


@dataclass
class DemoOutcome:
    directory: str
    clean: RunResult
    dirty: RunResult
    main_snapshot_before_dirty: int | None
    main_snapshot_after_dirty: int | None
    main_rows_before_dirty: int
    main_rows_after_dirty: int
    branches: list[str]
    dirty_branch_rows: int | None
    by_payment_type: list[dict[str, Any]] = field(default_factory=list)
    storage: dict[str, Any] | None = None  # `wap demo --s3`: the local S3 server and buckets used

    @property
    def as_expected(self) -> bool:
        return (
            self.clean.status == "published"
            and self.dirty.status == "blocked"
            and self.main_snapshot_before_dirty == self.main_snapshot_after_dirty
            and self.main_rows_before_dirty == self.main_rows_after_dirty
            and self.dirty.branch in self.branches
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "directory": self.directory,
            "clean": self.clean.to_dict(),
            "dirty": self.dirty.to_dict(),
            "main_snapshot_before_dirty": self.main_snapshot_before_dirty,
            "main_snapshot_after_dirty": self.main_snapshot_after_dirty,
            "main_rows_before_dirty": self.main_rows_before_dirty,
            "main_rows_after_dirty": self.main_rows_after_dirty,
            "kept_branches": self.branches,
            "dirty_branch_rows": self.dirty_branch_rows,
            "main_by_payment_type": self.by_payment_type,
            "as_expected": self.as_expected,
            "storage": self.storage,
        }


def prepare_dir(directory: Path, rows: int) -> tuple[Path, Path, Path]:
    """A fresh demo folder (only ever deleting what an earlier demo made)."""
    directory = directory.resolve()
    if directory.exists() and any(directory.iterdir()) and not (directory / MARKER).exists():
        from wapflow.errors import UsageError

        raise UsageError(
            f"{directory} exists and was not made by `wap demo`", hint="pass --dir with a new or empty folder"
        )
    for sub in ("lakehouse", "landing"):
        shutil.rmtree(directory / sub, ignore_errors=True)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / MARKER).write_text("made by wap demo; safe to delete\n")
    cfg = directory / "wap.toml"
    cfg.write_text(DEMO_CONFIG)
    clean = write_trips(directory / "landing" / "trips_2026-11-01.parquet", rows, seed=1, start_id=1)
    dirty = write_trips(
        directory / "landing" / "trips_2026-11-02.parquet", rows, null_rate=0.01, seed=2, start_id=rows + 1
    )
    return cfg, clean, dirty


def run_demo(directory: Path, rows: int = 10_000, *, progress: Callable[[str], None] | None = None) -> DemoOutcome:
    cfg_path, clean, dirty = prepare_dir(directory, rows)
    return run_pair(load_config(cfg_path), directory, str(clean), str(dirty), progress=progress)


def run_pair(
    cfg: WapConfig, directory: Path, clean: str, dirty: str, *, progress: Callable[[str], None] | None = None
) -> DemoOutcome:
    """The clean file, then the dirty one, then what main and the kept branch hold."""
    lh = Lakehouse(cfg, progress=progress)
    r1 = run_wap(lh, TABLE, [clean])
    table = TableName.parse(TABLE)
    before = lh.tables.head(table) if lh.tables.exists(table) else None
    rows_before = lh.tables.row_count(table) if before is not None else 0
    r2 = run_wap(lh, TABLE, [dirty])
    after = lh.tables.head(table) if lh.tables.exists(table) else None
    rows_after = lh.tables.row_count(table) if after is not None else 0
    branches = [b.name for b in lh.iceberg.list(table)] if after is not None else []
    dirty_rows = lh.tables.row_count(table, r2.branch) if r2.branch in branches else None
    by_type: list[dict[str, Any]] = []
    if after is not None:
        from pyspark.sql import functions as F

        df = (
            lh.tables.read(table)
            .groupBy("payment_type")
            .agg(F.count(F.lit(1)).alias("trips"), F.round(F.avg("fare_amount"), 2).alias("avg_fare"))
        )
        by_type = [r.asDict() for r in df.orderBy("payment_type").collect()]
    return DemoOutcome(
        directory=str(directory.resolve()),
        clean=r1,
        dirty=r2,
        main_snapshot_before_dirty=before,
        main_snapshot_after_dirty=after,
        main_rows_before_dirty=rows_before,
        main_rows_after_dirty=rows_after,
        branches=branches,
        dirty_branch_rows=dirty_rows,
        by_payment_type=by_type,
    )
