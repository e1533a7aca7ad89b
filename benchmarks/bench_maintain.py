"""Many small batches into one table: what they cost without maintenance and with it, and what `wap maintain`
gives back (data files, metadata bytes, a query's time on main) against the same rows written as one batch.

Run from the repo root:

    .venv/bin/python benchmarks/bench_maintain.py [--batches 1000] [--rows 100] [--every 100] [--json]

Everything runs in ONE SparkSession, side by side: batch i goes to table `plain` (never maintained) and to
table `maintained` (`wap maintain` every --every batches, revert_window and expire_older_than 0: the policy's
cheapest setting), so the per-run ratios (last 100 runs / first 100) compare like with like. Then `plain`
is maintained once and compared with `one_batch`, the same rows in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from wapflow.config import LakehouseConfig, MaintenanceConfig, WapConfig
from wapflow.demo.generate import generate_trips
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.maintain import maintain
from wapflow.pipeline import run_wap
from wapflow.sql.identifiers import TableName

NS = "bench"
QUERY = (
    "SELECT payment_type, count(*) AS n, sum(fare_amount) AS fares, avg(trip_distance) AS dist "
    "FROM {t} GROUP BY payment_type ORDER BY payment_type"
)
TARGET_RUN_RATIO = 1.2  # per-run time, last 100 / first 100, with maintenance
TARGET_QUERY_RATIO = 1.2  # a query on main after `wap maintain` / the same rows written as one batch


def _metadata(lh: Lakehouse, table: str) -> tuple[int, int]:
    folder = Path(lh.config.warehouse_location()) / NS / table / "metadata"
    sizes = [e.stat().st_size for e in os.scandir(folder) if e.is_file()]
    return len(sizes), sum(sizes)


def _data_files(lh: Lakehouse, table: str) -> int:
    return int(lh.spark.sql(f"SELECT count(*) FROM lakehouse.{NS}.{table}.data_files").collect()[0][0])


def _query_seconds(lh: Lakehouse, table: str, repeat: int = 7) -> float:
    sql = QUERY.format(t=f"lakehouse.{NS}.{table}")
    lh.tables.refresh(TableName.parse(f"{NS}.{table}"))
    lh.spark.sql(sql).collect()  # warm
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        lh.spark.sql(sql).collect()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _figures(lh: Lakehouse, table: str) -> dict[str, Any]:
    files, meta_bytes = _metadata(lh, table)
    return {
        "data_files": _data_files(lh, table),
        "metadata_files": files,
        "metadata_bytes": meta_bytes,
        "query_s": round(_query_seconds(lh, table), 4),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=1000)
    ap.add_argument("--rows", type=int, default=100, help="rows per batch")
    ap.add_argument("--every", type=int, default=100, help="`wap maintain` of table maintained every N batches")
    ap.add_argument("--workdir", default="bench-data/maintain")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    window = min(100, args.batches // 3)

    work = Path(args.workdir).resolve()
    shutil.rmtree(work, ignore_errors=True)
    landing = work / "landing"
    landing.mkdir(parents=True)
    eager = MaintenanceConfig(
        expire_older_than="0s", revert_window="0s", keep_last=10, orphan_older_than="never", every="never"
    )
    cfg = WapConfig(
        lakehouse=LakehouseConfig(
            warehouse=str(work / "lakehouse"),
            master="local[2]",
            driver_memory="2g",
            spark_conf={"spark.sql.shuffle.partitions": "4", "spark.ui.enabled": "false"},
        ),
        maintenance=eager,
    )
    lh = Lakehouse(cfg, progress=lambda _m: None)
    files = []
    for i in range(args.batches):
        f = landing / f"b{i:05d}.parquet"
        pq.write_table(generate_trips(args.rows, start_id=1 + i * args.rows, seed=i), f)
        files.append(f)
    times: dict[str, list[float]] = {"plain": [], "maintained": []}
    maintenance_s: list[float] = []
    started = time.perf_counter()
    for i, f in enumerate(files):
        for table in ("plain", "maintained"):
            t0 = time.perf_counter()
            res = run_wap(lh, f"{NS}.{table}", [str(f)], no_checks=True)  # maintenance's cost, no checks
            times[table].append(time.perf_counter() - t0)
            assert res.status == "published", res.message
        if (i + 1) % args.every == 0:
            t0 = time.perf_counter()
            maintain(lh, f"{NS}.maintained")
            maintenance_s.append(time.perf_counter() - t0)
        if not args.json and (i + 1) % 100 == 0:
            print(f"  {i + 1} batches ({time.perf_counter() - started:.0f} s)", file=sys.stderr)

    def p50(xs: list[float]) -> float:
        return round(statistics.median(xs), 4)

    runs = {
        t: {
            "first_p50_s": p50(v[:window]),
            "last_p50_s": p50(v[-window:]),
            "ratio": round(p50(v[-window:]) / p50(v[:window]), 3),
        }
        for t, v in times.items()
    }
    # The same rows as one batch.
    whole = landing / "all.parquet"
    pq.write_table(pa.concat_tables([pq.read_table(f) for f in files]), whole)
    assert run_wap(lh, f"{NS}.one_batch", [str(whole)], no_checks=True).status == "published"
    before = _figures(lh, "plain")
    t0 = time.perf_counter()
    # The table's own last maintenance, as `wap maintain` would do it at this point.
    done = maintain(lh, f"{NS}.plain")
    maintain_plain_s = time.perf_counter() - t0
    assert done.exit_code == 0, done.to_dict()
    after = _figures(lh, "plain")
    one = _figures(lh, "one_batch")
    doc = {
        "batches": args.batches,
        "rows_per_batch": args.rows,
        "maintain_every": args.every,
        "window": window,
        "per_run": runs,
        "maintenance_s": [round(x, 2) for x in maintenance_s],
        "plain_before_maintain": before,
        "plain_after_maintain": after,
        "maintain_plain_s": round(maintain_plain_s, 2),
        "one_batch": one,
        "query_after_vs_one_batch": round(after["query_s"] / one["query_s"], 3),
        "query_before_vs_one_batch": round(before["query_s"] / one["query_s"], 3),
        "targets": {"run_ratio_with_maintenance": TARGET_RUN_RATIO, "query_ratio": TARGET_QUERY_RATIO},
    }
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print(f"{args.batches} batches of {args.rows} rows, `wap maintain` every {args.every} on 'maintained'")
        for t, r in runs.items():
            print(f"  per-run p50 {t:10s}: first {window} {r['first_p50_s']:.3f} s, last {window} "
                  f"{r['last_p50_s']:.3f} s, ratio {r['ratio']:.2f}")  # fmt: skip
        for name, fig in (("plain before maintain", before), ("plain after maintain", after), ("one batch", one)):
            print(f"  {name:22s}: {fig['data_files']} data files, {fig['metadata_files']} metadata files "
                  f"({fig['metadata_bytes'] / 1024:.0f} KiB), query {fig['query_s'] * 1000:.0f} ms")  # fmt: skip
        print(f"  query after maintain / one batch: {doc['query_after_vs_one_batch']:.2f} "
              f"(before: {doc['query_before_vs_one_batch']:.2f}); maintain took {maintain_plain_s:.1f} s")  # fmt: skip
    lh.spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
