"""Anomaly checks' cost (issue 23), ratios in one process:

1. audit: one batch (default 10M rows) through a whole run (write, audit, publish) into a table with 10
   anomaly checks (mean of five numeric columns, measured in the write's observation; null fraction of five
   columns, from the added files' Iceberg metrics) vs the same batch into a table with no checks; reps
   interleaved in one SparkSession. Both tables first get 8 published runs of history (min_history = 7), so
   every band is evaluated, and the runs are checked to have passed (a blocked run would publish nothing).
2. history: a run store (SQLite) with a table's 10,000 published runs x 40 metrics: the history reads and
   bands of 10 anomaly checks (what the audit adds per run), the same with seasonality = "weekly" (the runs of
   one weekday, picked from the whole history), and `wap metrics`'s read (service.metric_rows), medians of reps.

Usage: .venv/bin/python benchmarks/bench_anomaly.py [--rows 10000000] [--history 10000] [--reps 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_wap import ensure_file, log

from wapflow.audit.anomaly import band, weekday_of
from wapflow.config import parse_config
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.pipeline import run_wap
from wapflow.runs.metrics import MetricHistory, metrics_table
from wapflow.runs.store import RunStore, runs_table
from wapflow.service.metrics import metric_rows

MEANS = ["passenger_count", "trip_distance", "fare_amount", "vendor_id", "payment_type"]
NULLS = ["passenger_count", "trip_distance", "fare_amount", "pickup_at", "dropoff_at"]
ANOMALY = [{"check": "anomaly", "metric": "mean", "column": c} for c in MEANS] + [
    {"check": "anomaly", "metric": "null_fraction", "column": c} for c in NULLS
]


def cpu_seconds(spark: Any) -> float:
    """CPU time of this process and its Spark JVM so far: on a busy machine, CPU ratios move far less than
    wall-clock ones (other processes take turns on the cores, not work from this one)."""
    pid = int(spark._jvm.java.lang.ProcessHandle.current().pid())
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    mine = os.times()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK") + mine.user + mine.system


def audit_ratio(work: Path, rows: int, reps: int) -> dict[str, Any]:
    wh = work / "warehouse-anomaly"
    shutil.rmtree(wh, ignore_errors=True)
    batch = ensure_file(work / "data", "size", rows)
    seeds = [ensure_file(work / "data", f"hist{i}", 20_000, seed=100 + i) for i in range(8)]
    cfg = parse_config(
        {
            "lakehouse": {"warehouse": str(wh), "master": "local[2]", "driver_memory": "4g"},
            "tables": {"b.plain": {"checks": []}, "b.anomaly": {"checks": ANOMALY}},
        }
    )
    lh = Lakehouse(cfg)
    for table in ("b.plain", "b.anomaly"):
        for f in seeds:
            res = run_wap(lh, table, [str(f)])
            assert res.status == "published", res.message
    log(f"history: 8 runs of 20,000 rows in each table; batch {rows:,} rows")
    times: dict[str, list[float]] = {"plain": [], "anomaly": []}
    cpu: dict[str, list[float]] = {"plain": [], "anomaly": []}
    for rep in range(reps):
        pair = (("b.plain", "plain"), ("b.anomaly", "anomaly"))
        for table, key in pair if rep % 2 == 0 else pair[::-1]:  # which goes first alternates
            t0, c0 = time.perf_counter(), cpu_seconds(lh.spark)
            res = run_wap(lh, table, [str(batch)], run_id=f"{key}_{rep}")
            elapsed = time.perf_counter() - t0
            cpu[key].append(round(cpu_seconds(lh.spark) - c0, 3))
            assert res.status == "published", f"{table}: {res.message}"
            if key == "anomaly":
                verdicts = {c["name"]: c["status"] for c in res.checks}
                assert all(v == "passed" for v in verdicts.values()), verdicts
            times[key].append(round(elapsed, 3))
            log(f"  rep {rep + 1} {key}: {elapsed:.2f}s, CPU {cpu[key][-1]:.2f}s")
    plain, anomaly = statistics.median(times["plain"]), statistics.median(times["anomaly"])
    plain_cpu, anomaly_cpu = statistics.median(cpu["plain"]), statistics.median(cpu["anomaly"])
    return {
        "rows": rows,
        "plain_s": plain,
        "anomaly_s": anomaly,
        "ratio": round(anomaly / plain, 3),
        "plain_cpu_s": plain_cpu,
        "anomaly_cpu_s": anomaly_cpu,
        "cpu_ratio": round(anomaly_cpu / plain_cpu, 3),
        "reps": times,
        "cpu_reps": cpu,
        "target_ratio": 1.1,
    }


def history_times(n: int, reps: int) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="bench-anomaly-store-"))
    store = RunStore(f"sqlite:///{folder / 'runs.db'}")
    history = MetricHistory(store.engine)
    table = "b.trips"
    start = datetime(2026, 1, 1, tzinfo=UTC)
    runs, metrics = [], []
    for i in range(n):
        rid = f"run{i:06d}"
        at = start + timedelta(minutes=i)
        runs.append(
            {"run_id": rid, "table_name": table, "status": "published", "files": "[]", "checks": "[]",
             "timings": "{}", "started_at": at}
        )  # fmt: skip
        metrics.append({"run_id": rid, "table_name": table, "metric": "row_count", "column_name": "",
                        "value": 1000.0 + i % 17, "text": None, "run_at": at})  # fmt: skip
        for c in MEANS + NULLS[3:]:
            for m, v in (("null_fraction", 0.001 * (i % 5)), ("min", 0.0), ("max", 100.0 + i % 7), ("mean", 10.0)):
                metrics.append({"run_id": rid, "table_name": table, "metric": m, "column_name": c,
                                "value": v, "text": None, "run_at": at})  # fmt: skip
    t0 = time.perf_counter()
    with store.engine.begin() as conn:
        conn.execute(runs_table.insert(), runs)
        conn.execute(metrics_table.insert(), metrics)
    log(f"store: {n:,} runs, {len(metrics):,} metric rows written in {time.perf_counter() - t0:.1f}s")

    def evaluate(weekday: int | None = None) -> None:
        for spec in ANOMALY:
            values = history.published(table, spec["metric"], spec["column"], 30, weekday)
            assert len(values) == 30, f"the history has {len(values)} values, not 30"
            band(values, 3.0, weekday)

    # A weekday of the first runs: the newest runs are on another one, so its 30 runs are found deep in the history.
    oldest_day = weekday_of(start)
    eval_s, weekly_s, read_s = [], [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        evaluate()
        eval_s.append(round(time.perf_counter() - t0, 4))
        t0 = time.perf_counter()
        evaluate(oldest_day)
        weekly_s.append(round(time.perf_counter() - t0, 4))
        t0 = time.perf_counter()
        rows = metric_rows(store, table, limit=20)
        read_s.append(round(time.perf_counter() - t0, 4))
        assert rows, "no metric rows read back"
    store.close()
    shutil.rmtree(folder, ignore_errors=True)
    return {
        "runs": n,
        "metric_rows": len(metrics),
        "ten_anomaly_checks_s": statistics.median(eval_s),
        "ten_weekly_anomaly_checks_s": statistics.median(weekly_s),
        "wap_metrics_read_s": statistics.median(read_s),
        "target_evaluation_s": 0.1,
        "reps": {"evaluation": eval_s, "weekly": weekly_s, "wap_metrics": read_s},
    }


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--history", type=int, default=10_000)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--workdir", default="bench-data")
    p.add_argument("--skip-audit", action="store_true", help="only the metric-history part (no Spark)")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    out: dict[str, Any] = {"cpu_count": os.cpu_count()}
    out["history"] = history_times(a.history, max(a.reps, 5))
    h = out["history"]
    log(
        f"history of {h['runs']:,} runs: 10 anomaly checks {h['ten_anomaly_checks_s'] * 1000:.1f} ms, "
        f"weekly {h['ten_weekly_anomaly_checks_s'] * 1000:.1f} ms (target < 100 ms), "
        f"wap metrics read {h['wap_metrics_read_s'] * 1000:.1f} ms"
    )
    if not a.skip_audit:
        out["audit"] = audit_ratio(Path(a.workdir).resolve(), a.rows, a.reps)
        r = out["audit"]
        log(
            f"{r['rows']:,}-row batch: run with 10 anomaly checks {r['anomaly_s']:.2f}s vs no checks "
            f"{r['plain_s']:.2f}s = {r['ratio']:.3f}x (target <= 1.1x); CPU {r['anomaly_cpu_s']:.2f}s vs "
            f"{r['plain_cpu_s']:.2f}s = {r['cpu_ratio']:.3f}x"
        )
    if a.json:
        print(json.dumps(out, indent=2))  # noqa: T201 - the result, for a caller reading --json
    return 0


if __name__ == "__main__":
    sys.exit(main())
