"""Audit cost benchmark: many checks cost about one scan, and the audit ignores how big the table is.

Measured in one process (one SparkSession), ratios only:
1. checks: the scan-path audit (one aggregation over the new rows, as a resumed run does) with 10
   checks vs 1 check on the same batch (default 10M rows); plus the same 10 checks observed during
   the write (what a normal run does) vs a plain write, and the cost of one `unique` check.
2. growth: the audit of a 1M-row batch on a table of 1M rows vs 20M rows under it.

Usage: .venv/bin/python benchmarks/bench_audit.py [--rows 10000000] [--batch 1000000] [--grow 20] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_wap import ensure_file, log  # noqa: E402  (same data files and logging as bench_wap)

from wapflow.audit.checks import AuditPlan, evaluate  # noqa: E402
from wapflow.config import LakehouseConfig, TableConfig, WapConfig  # noqa: E402
from wapflow.sql.identifiers import TableName  # noqa: E402
from wapflow.lakehouse.lakehouse import Lakehouse  # noqa: E402

ONE = [{"check": "not_null", "column": "passenger_count"}]
TEN = [
    {"check": "not_null", "column": "passenger_count"},
    {"check": "not_null", "column": "fare_amount"},
    {"check": "between", "column": "fare_amount", "min": 0, "max": 1000},
    {"check": "between", "column": "trip_distance", "min": 0, "max": 500},
    {"check": "accepted_values", "column": "payment_type", "values": [1, 2, 3, 4, 5, 6]},
    {"check": "accepted_values", "column": "vendor_id", "values": [1, 2]},
    {"check": "expression", "sql": "dropoff_at >= pickup_at"},
    {"check": "null_rate", "column": "trip_distance", "max": 0.01},
    {"check": "row_count", "min": 1},
    {"check": "freshness", "column": "pickup_at", "max_age": "3650d"},
]
UNIQUE = [{"check": "unique", "columns": ["trip_id"]}]


def checks(spec: list[dict[str, Any]]) -> list[Any]:
    return TableConfig.model_validate({"checks": spec}).checks


def timed(fn: Callable[[], Any], reps: int) -> tuple[float, list[float]]:
    runs = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        runs.append(round(time.perf_counter() - t0, 3))
    return statistics.median(runs), runs


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--batch", type=int, default=1_000_000)
    p.add_argument("--grow", type=int, default=20)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--workdir", default="bench-data")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    work = Path(a.workdir).resolve()
    wh = work / "warehouse-audit"
    shutil.rmtree(wh, ignore_errors=True)
    big = ensure_file(work / "data", "size", a.rows)
    batch = ensure_file(work / "data", "pubbatch", a.batch)
    lh = Lakehouse(WapConfig(lakehouse=LakehouseConfig(warehouse=str(wh), master="local[2]", driver_memory="4g")))
    spark, tables = lh.spark, lh.tables
    t0 = time.perf_counter()
    out: dict[str, Any] = {"rows": a.rows, "batch": a.batch, "grow": a.grow, "cpu_count": os.cpu_count()}
    try:
        t = TableName.parse("bench.audit_checks")
        tables.ensure_namespace(t)
        df = spark.read.parquet(str(big))
        df.writeTo(tables.ident(t)).using("iceberg").create()
        snap = tables.head(t)
        added = tables.read_increment(t, None, snap)
        plans = {
            n: AuditPlan(checks(c), added.columns, table=t.dotted)
            for n, c in (("1", ONE), ("10", TEN), ("unique", UNIQUE))
        }
        evaluate(plans["1"], added, samples=False)  # warm-up
        log(f"scan-path audit over {a.rows:,} rows")
        s1, r1 = timed(lambda: evaluate(plans["1"], added, samples=False), a.reps)
        s10, r10 = timed(lambda: evaluate(plans["10"], added, samples=False), a.reps)
        su, ru = timed(lambda: evaluate(plans["unique"], added, samples=False), max(1, a.reps - 1))
        out["scan"] = {"one_s": s1, "ten_s": s10, "ratio": round(s10 / s1, 3), "unique_s": su, "runs": [r1, r10, ru]}

        log("the same 10 checks observed during the write vs a plain write")
        from pyspark.sql import Observation

        def write(observe: bool) -> None:
            name = TableName.parse(f"bench.w_{int(time.time() * 1000)}")
            tables.create_like(name, df)
            src = df
            if observe:
                src = df.observe(Observation(), *plans["10"].observable())
            src.writeTo(tables.ident(name)).append()
            tables.drop(name)

        plain_runs, obs_runs = [], []
        for _ in range(a.reps):
            plain_runs.append(timed(lambda: write(False), 1)[0])
            obs_runs.append(timed(lambda: write(True), 1)[0])
        wp, wo = statistics.median(plain_runs), statistics.median(obs_runs)
        out["write"] = {"plain_s": wp, "observed_s": wo, "ratio": round(wo / wp, 3), "runs": [plain_runs, obs_runs]}

        log(f"audit of a {a.batch:,}-row batch on tables of 1x and {a.grow}x its size")
        growth: dict[str, Any] = {}
        bdf = spark.read.parquet(str(batch))
        for mult in (1, a.grow):
            g = TableName.parse(f"bench.grow_{mult}")
            bdf.writeTo(tables.ident(g)).using("iceberg").create()
            for _ in range(mult - 1):
                bdf.writeTo(tables.ident(g)).append()
            base = tables.head(g)
            bdf.writeTo(tables.ident(g)).append()
            head = tables.head(g)
            new = tables.read_increment(g, base, head)
            plan = AuditPlan(checks(TEN), new.columns, table=g.dotted)
            evaluate(plan, new, samples=False)
            secs, runs = timed(lambda: evaluate(plan, new, samples=False), a.reps)
            growth[f"{mult}x"] = {"table_rows": (mult + 1) * a.batch, "audit_s": secs, "runs": runs}
            tables.drop(g)
        growth["ratio"] = round(growth[f"{a.grow}x"]["audit_s"] / growth["1x"]["audit_s"], 3)
        out["growth"] = growth
    finally:
        spark.stop()
    out["elapsed_s"] = round(time.perf_counter() - t0, 1)
    sc, wr, gr = out["scan"], out["write"], out["growth"]
    print(f"\nAudit cost (median seconds, {a.rows:,}-row batch, one SparkSession, local[2])")
    print(
        f"  scan path: 1 check {sc['one_s']:.2f}s, 10 checks {sc['ten_s']:.2f}s -> ratio {sc['ratio']:.2f}  "
        f"({'PASS' if sc['ratio'] <= 1.3 else 'MISS'}: target <= 1.3)"
    )
    print(f"  one unique(trip_id) check (a shuffle of the key): {sc['unique_s']:.2f}s")
    print(
        f"  write path: plain write {wr['plain_s']:.2f}s, write observing 10 checks {wr['observed_s']:.2f}s -> ratio {wr['ratio']:.2f}"
    )
    print(
        f"  growth: {a.batch:,}-row batch audited on {gr['1x']['table_rows']:,} rows {gr['1x']['audit_s']:.2f}s, "
        f"on {gr[f'{a.grow}x']['table_rows']:,} rows {gr[f'{a.grow}x']['audit_s']:.2f}s -> ratio {gr['ratio']:.2f}  "
        f"({'PASS' if gr['ratio'] <= 1.3 else 'MISS'}: target flat, <= 1.3)"
    )
    print(f"  (took {out['elapsed_s']}s)")
    if a.json:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
