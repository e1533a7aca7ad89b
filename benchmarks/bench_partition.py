"""A year of events into `partition_by = ["day(ts)"]` vs an unpartitioned table: time and data files.

Run from the repo root (`make bench-partition`):

    .venv/bin/python benchmarks/bench_partition.py [--rows 10000000] [--files 8] [--workdir bench-data] [--json]

`--rows` defaults to $WAP_BENCH_PARTITION_ROWS, else 10M. The same parquet files (every one spanning all 365
days, as files landed by many producers do) go through a full WAP run (write to a branch, audit, publish)
into three tables of ONE SparkSession, side by side:

- unpartitioned: no layout in wap.toml;
- day(ts): `partition_by = ["day(ts)"]` in wap.toml (wapflow creates the table partitioned and sets
  write.distribution-mode = hash);
- day(ts), no distribution: the same spec with write.distribution-mode = none, what a table created by hand
  would do: every write task writes a file for every day it meets (the explosion the layout avoids).

Reported: seconds per run, data files on main, partitions, files per partition (target: at most 2), and a
one-day query on main (partition pruning). The ratios matter, not the seconds of a small machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from wapflow.config import LakehouseConfig, TableConfig, WapConfig
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.pipeline import run_wap
from wapflow.sql.identifiers import TableName

DAYS = 365
FILES_PER_PARTITION_MAX = 2.0
START = np.datetime64("2025-01-01T00:00:00", "us")
VARIANTS = ("unpartitioned", "day(ts)", "day(ts), no distribution")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)  # noqa: T201


def make_files(folder: Path, rows: int, files: int, seed: int = 7) -> list[str]:
    """`files` parquet files of rows/files events each, every file spread over all 365 days."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    out, per = [], rows // files
    for i in range(files):
        path = folder / f"events-{rows}-{i}.parquet"
        out.append(str(path))
        if path.exists():
            continue
        ids = np.arange(i * per, (i + 1) * per, dtype=np.int64)
        offsets = rng.integers(0, DAYS * 86_400 * 1_000_000, per, dtype=np.int64)
        table = pa.table(
            {
                "id": ids,
                "ts": pa.array(START + offsets.astype("timedelta64[us]"), pa.timestamp("us")),
                "region": pa.array(rng.choice(np.array(["eu", "us", "apac", "latam"]), per)),
                "amount": rng.random(per) * 100,
            }
        )
        pq.write_table(table, path)
    return out


def count_files(lh: Lakehouse, table: TableName, partitioned: bool) -> tuple[int, int]:
    """(data files, partitions) on main."""
    files = lh.spark.sql(f"SELECT count(*) FROM {table.metadata_sql(lh.catalog, 'files')}").collect()[0][0]
    parts = lh.spark.sql(f"SELECT count(*) FROM {table.metadata_sql(lh.catalog, 'partitions')}").collect()[0][0]
    return int(files), int(parts) if partitioned else 1


def one_day(lh: Lakehouse, table: TableName) -> float:
    q = f"SELECT count(*), sum(amount) FROM {lh.tables.ident(table)} WHERE ts >= '2025-06-01' AND ts < '2025-06-02'"
    lh.spark.sql(q).collect()  # warm
    t0 = time.perf_counter()
    lh.spark.sql(q).collect()
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=float, default=float(os.environ.get("WAP_BENCH_PARTITION_ROWS", 10_000_000)))
    p.add_argument("--files", type=int, default=8, help="input parquet files (each spans all 365 days)")
    p.add_argument("--workdir", default="bench-data")
    p.add_argument(
        "--split-mb",
        type=int,
        default=16,
        help="spark.sql.files.maxPartitionBytes in MB: the write gets as many read tasks as a wider cluster would "
        "(on local[2] Spark packs 160 MB of files into 2 tasks otherwise)",
    )
    p.add_argument("--master", default="local[2]")
    p.add_argument("--driver-memory", default="4g")
    p.add_argument("--json", action="store_true")
    p.add_argument("--verbose", action="store_true", help="show wapflow's progress lines")
    args = p.parse_args(argv)
    rows = int(args.rows)
    work = Path(args.workdir).resolve() / "partition"
    shutil.rmtree(work / "lakehouse", ignore_errors=True)
    log(f"making {args.files} files of {rows:,} rows over {DAYS} days")
    files = make_files(work / "data", rows, args.files)
    warm = make_files(work / "data-warm", 20_000, 2)

    names = {v: TableName.parse(f"bench.{n}") for v, n in zip(VARIANTS, ("flat", "day", "day_none"), strict=True)}
    cfg = WapConfig(
        lakehouse=LakehouseConfig(
            warehouse=str(work / "lakehouse"),
            master=args.master,
            driver_memory=args.driver_memory,
            spark_conf={"spark.sql.files.maxPartitionBytes": f"{args.split_mb}m"},
        ),
        tables={
            "bench.day": TableConfig(partition_by=["day(ts)"]),
            "bench.warm_day": TableConfig(partition_by=["day(ts)"]),
        },
    )
    lh = Lakehouse(cfg, progress=log if args.verbose else None)
    for t in ("bench.warm_flat", "bench.warm_day"):  # the JVM warms up on small runs first
        res = run_wap(lh, t, warm, no_checks=True)  # the layout's cost: runs without checks
        assert res.status == "published", res.message
    # The hand-made table: the same spec, distribution none (a table wapflow did not create; no layout declared).
    lh.spark.sql(
        f"CREATE TABLE {lh.tables.ident(names[VARIANTS[2]])} "
        "(id BIGINT, ts TIMESTAMP_NTZ, region STRING, amount DOUBLE) USING iceberg PARTITIONED BY (days(ts)) TBLPROPERTIES ('format-version' = '2', "
        "'write.wap.enabled' = 'true', 'write.distribution-mode' = 'none')"
    )
    results: dict[str, dict[str, Any]] = {}
    for variant in VARIANTS:
        table = names[variant]
        log(f"{variant}: WAP run of {rows:,} rows into {table}")
        t0 = time.perf_counter()
        res = run_wap(lh, table.dotted, files, no_checks=True)
        seconds = time.perf_counter() - t0
        if res.status != "published":
            raise SystemExit(f"{variant}: the run did not publish: {res.message}")
        n_files, parts = count_files(lh, table, partitioned=variant != VARIANTS[0])
        results[variant] = {
            "seconds": round(seconds, 2),
            "write_seconds": res.timings.get("write"),
            "data_files": n_files,
            "partitions": parts,
            "files_per_partition": round(n_files / parts, 2),
            "one_day_query_seconds": round(one_day(lh, table), 3),
        }
    flat, day, none = (results[v] for v in VARIANTS)
    summary = {
        "rows": rows,
        "input_files": args.files,
        "split_mb": args.split_mb,
        "time_ratio_day_vs_unpartitioned": round(day["seconds"] / flat["seconds"], 2),
        "files_per_partition_day": day["files_per_partition"],
        "files_per_partition_no_distribution": none["files_per_partition"],
        "files_target_met": day["files_per_partition"] <= FILES_PER_PARTITION_MAX,
        "one_day_query_ratio_day_vs_unpartitioned": round(
            day["one_day_query_seconds"] / flat["one_day_query_seconds"], 2
        ),
        "measured_at": datetime.now().isoformat(timespec="seconds"),
    }
    print(f"\n{rows:,} rows over {DAYS} days in {args.files} files, {args.master}, splits <= {args.split_mb} MB")  # noqa: T201
    print(f"{'table':<28}{'run s':>8}{'write s':>9}{'files':>8}{'parts':>7}{'files/part':>11}{'1-day query s':>15}")  # noqa: T201
    for v in VARIANTS:
        r = results[v]
        print(  # noqa: T201
            f"{v:<28}{r['seconds']:>8.1f}{r['write_seconds'] or 0:>9.1f}{r['data_files']:>8}{r['partitions']:>7}"
            f"{r['files_per_partition']:>11.2f}{r['one_day_query_seconds']:>15.3f}"
        )
    print(  # noqa: T201
        f"day(ts) / unpartitioned run time: {summary['time_ratio_day_vs_unpartitioned']}x; files per partition "
        f"{summary['files_per_partition_day']} (target <= {FILES_PER_PARTITION_MAX}: "
        f"{'met' if summary['files_target_met'] else 'MISSED'}); without a distribution "
        f"{summary['files_per_partition_no_distribution']}"
    )
    if args.json:
        print(json.dumps({"results": results, "summary": summary}))  # noqa: T201
    lh.spark.stop()
    return 0 if summary["files_target_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
