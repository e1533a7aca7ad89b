"""Many small batches into one table: what they cost without maintenance and with it, and what `wap maintain`
gives back (data files, metadata bytes, a query's time on main) against the same rows written as one batch.

Run from the repo root:

    .venv/bin/python benchmarks/bench_maintain.py [--batches 1000] [--rows 100] [--every 100] [--json]
    .venv/bin/python benchmarks/bench_maintain.py --format-version 3 --no-plain   # v3, no revert wait

Everything runs in ONE SparkSession, side by side: batch i goes to table `plain` (never maintained) and to
table `maintained` (`wap maintain` every --every batches), so the per-run ratios (last 100 runs / first 100)
compare like with like. Then `plain` is maintained once and compared with `one_batch`, the same rows in one run.

Format v2 (the default) sets revert_window and expire_older_than to 0, the policy's cheapest setting: on v2,
compaction waits for revert_window. `--format-version 3` creates the tables in format v3 and leaves
revert_window at its default (7d): on v3 compaction does not wait for it (`wap revert` finds a run's rows by
row lineage). At every checkpoint (each --every batches), just before and just after that `wap maintain`, a
GROUP BY on `maintained`'s main is timed against the same rows written as one batch (target <= 1.3x).
`--no-plain` leaves out table `plain` (half the runs).
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
TARGET_CHECKPOINT_RATIO = 1.3  # issue 48: a query on main / one batch at every checkpoint (just after wap maintain)


def _metadata(lh: Lakehouse, table: str) -> tuple[int, int]:
    folder = Path(lh.config.warehouse_location()) / NS / table / "metadata"
    sizes = [e.stat().st_size for e in os.scandir(folder) if e.is_file()]
    return len(sizes), sum(sizes)


def _data_files(lh: Lakehouse, table: str) -> int:
    return int(lh.spark.sql(f"SELECT count(*) FROM lakehouse.{NS}.{table}.data_files").collect()[0][0])


def _snapshots(lh: Lakehouse, table: str) -> int:
    return int(lh.spark.sql(f"SELECT count(*) FROM lakehouse.{NS}.{table}.snapshots").collect()[0][0])


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


def _one_batch_query(lh: Lakehouse, files: list[Path], folder: Path, tag: int) -> float:
    """A GROUP BY's median time on a table holding the rows of `files` written as one batch (dropped after)."""
    whole = folder / f"upto_{tag}.parquet"
    pq.write_table(pa.concat_tables([pq.read_table(f) for f in files]), whole)
    table = f"upto_{tag}"
    assert run_wap(lh, f"{NS}.{table}", [str(whole)], no_checks=True).status == "published"
    took = _query_seconds(lh, table)
    lh.spark.sql(f"DROP TABLE lakehouse.{NS}.{table} PURGE")
    whole.unlink()
    return took


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
    ap.add_argument("--format-version", type=int, choices=[2, 3], default=2, help="of the tables created")
    ap.add_argument("--no-plain", action="store_true", help="leave out table plain (never maintained)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    window = min(100, args.batches // 3)

    work = Path(args.workdir).resolve()
    shutil.rmtree(work, ignore_errors=True)
    landing = work / "landing"
    landing.mkdir(parents=True)
    if args.format_version == 2:  # compaction waits for revert_window on v2: 0, the policy's cheapest setting
        eager = MaintenanceConfig(
            expire_older_than="0s", revert_window="0s", keep_last=10, orphan_older_than="never", every="never"
        )
    else:  # v3: revert_window left at its default (7d), which compaction no longer waits for
        eager = MaintenanceConfig(expire_older_than="0s", keep_last=10, orphan_older_than="never", every="never")
    cfg = WapConfig(
        lakehouse=LakehouseConfig(
            warehouse=str(work / "lakehouse"),
            master="local[2]",
            format_version=args.format_version,
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
    tables = ("maintained",) if args.no_plain else ("plain", "maintained")
    times: dict[str, list[float]] = {t: [] for t in tables}
    maintenance_s: list[float] = []
    checkpoints: list[dict[str, Any]] = []
    started = time.perf_counter()
    for i, f in enumerate(files):
        for table in tables:
            t0 = time.perf_counter()
            res = run_wap(lh, f"{NS}.{table}", [str(f)], no_checks=True)  # maintenance's cost, no checks
            times[table].append(time.perf_counter() - t0)
            assert res.status == "published", res.message
        if (i + 1) % args.every == 0:
            before_s = _query_seconds(lh, "maintained")
            files_before = _data_files(lh, "maintained")
            t0 = time.perf_counter()
            done = maintain(lh, f"{NS}.maintained")
            maintenance_s.append(time.perf_counter() - t0)
            assert done.exit_code == 0, done.to_dict()
            after_s = _query_seconds(lh, "maintained")
            one_s = _one_batch_query(lh, files[: i + 1], landing, i + 1)
            compact = done.tables[0].figures("compact")
            meta_files, meta_bytes = _metadata(lh, "maintained")
            checkpoints.append(
                {
                    "batches": i + 1,
                    "data_files_before": files_before,
                    "data_files_after": _data_files(lh, "maintained"),
                    "snapshots": _snapshots(lh, "maintained"),
                    "metadata_files": meta_files,
                    "metadata_mb": round(meta_bytes / 1e6, 1),
                    "compact": compact.get("skipped") or f"{compact.get('rewritten_data_files')} files rewritten",
                    "maintain_s": round(maintenance_s[-1], 2),
                    "query_before_s": round(before_s, 4),
                    "query_after_s": round(after_s, 4),
                    "one_batch_s": round(one_s, 4),
                    "before_vs_one_batch": round(before_s / one_s, 3),
                    "after_vs_one_batch": round(after_s / one_s, 3),
                }
            )
            if not args.json:
                c = checkpoints[-1]
                print(f"  checkpoint {i + 1}: data files {c['data_files_before']} -> {c['data_files_after']} "
                      f"({c['compact']}), GROUP BY before/after maintain / one batch: "
                      f"{c['before_vs_one_batch']:.2f}x / {c['after_vs_one_batch']:.2f}x", file=sys.stderr)  # fmt: skip
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
    worst = max((c["after_vs_one_batch"] for c in checkpoints), default=None)
    worst_before = max((c["before_vs_one_batch"] for c in checkpoints), default=None)
    doc: dict[str, Any] = {
        "format_version": args.format_version,
        "revert_window": eager.revert_window,
        "batches": args.batches,
        "rows_per_batch": args.rows,
        "maintain_every": args.every,
        "window": window,
        "per_run": runs,
        "maintenance_s": [round(x, 2) for x in maintenance_s],
        "checkpoints": checkpoints,
        "checkpoint_worst_vs_one_batch": worst,  # just after `wap maintain`
        "checkpoint_worst_before_maintain_vs_one_batch": worst_before,
        "targets": {
            "run_ratio_with_maintenance": TARGET_RUN_RATIO,
            "query_ratio": TARGET_QUERY_RATIO,
            "checkpoint_query_ratio": TARGET_CHECKPOINT_RATIO,
        },
    }
    if not args.no_plain:
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
        doc.update(
            plain_before_maintain=before,
            plain_after_maintain=after,
            maintain_plain_s=round(maintain_plain_s, 2),
            one_batch=one,
            query_after_vs_one_batch=round(after["query_s"] / one["query_s"], 3),
            query_before_vs_one_batch=round(before["query_s"] / one["query_s"], 3),
        )
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print(f"{args.batches} batches of {args.rows} rows, format v{args.format_version}, "
              f"revert_window {eager.revert_window}, `wap maintain` every {args.every} on 'maintained'")  # fmt: skip
        for t, r in runs.items():
            print(f"  per-run p50 {t:10s}: first {window} {r['first_p50_s']:.3f} s, last {window} "
                  f"{r['last_p50_s']:.3f} s, ratio {r['ratio']:.2f}")  # fmt: skip
        print("  checkpoint  data files before -> after  snapshots  metadata MB  "
              "GROUP BY before / after maintain / one batch (ms)  ratios")  # fmt: skip
        for c in checkpoints:
            print(f"  {c['batches']:10d}  {c['data_files_before']:17d} -> {c['data_files_after']:5d}  "
                  f"{c['snapshots']:9d}  {c['metadata_mb']:11.1f}  "
                  f"{c['query_before_s'] * 1000:8.0f} / {c['query_after_s'] * 1000:6.0f} / "
                  f"{c['one_batch_s'] * 1000:6.0f}   {c['before_vs_one_batch']:.2f}x / "
                  f"{c['after_vs_one_batch']:.2f}x  ({c['compact']})")  # fmt: skip
        if worst is not None:
            status = "PASS" if worst <= TARGET_CHECKPOINT_RATIO else "MISS"
            print(f"  {status}  worst checkpoint just after wap maintain {worst:.2f}x one batch "
                  f"(target <= {TARGET_CHECKPOINT_RATIO}x); just before it {worst_before:.2f}x")  # fmt: skip
        if not args.no_plain:
            shown = {"plain before maintain": "plain_before_maintain", "plain after maintain": "plain_after_maintain"}
            for name, key in [*shown.items(), ("one batch", "one_batch")]:
                fig = doc[key]
                print(f"  {name:22s}: {fig['data_files']} data files, {fig['metadata_files']} metadata files "
                      f"({fig['metadata_bytes'] / 1024:.0f} KiB), query {fig['query_s'] * 1000:.0f} ms")  # fmt: skip
            print(f"  query after maintain / one batch: {doc['query_after_vs_one_batch']:.2f} "
                  f"(before: {doc['query_before_vs_one_batch']:.2f}); "
                  f"maintain took {doc['maintain_plain_s']:.1f} s")  # fmt: skip
    lh.spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
