"""A stream through wapflow's sink (each micro-batch a WAP run) vs Iceberg's own streaming sink, side by side.

Run from the repo root (jars cached: `wap setup`), on an otherwise idle machine:

    .venv/bin/python benchmarks/bench_stream.py [--seconds 30] [--rate 1000] [--files 10] [--file-rows 100000]

One SparkSession on local[2], both sinks at a 1 s processing-time trigger, each into a table of its own:
- latency: the rate source at --rate rows/s for --seconds. A batch ends when its trigger seals it (the batch's
  progress timestamp); its rows are on main when the sink's addBatch returns: wapflow's sink has then written,
  audited (two checks: not_null, unique) and published the batch, Iceberg's has committed it to main. The time
  between the two, from each batch's StreamingQueryProgress (triggerExecution less the offset commit after
  addBatch), p50 and p95. Target: wapflow p50 <= 1 s.
- throughput: a backlog of --files parquet files of --file-rows rows (one file per batch): rows / the wall time
  from the query's start to every row on main (processAllAvailable). Target: wapflow >= 0.8x Iceberg's sink.
  Then the same with no trigger interval (each batch as soon as the last is done): what each sink can take, and
  wapflow's sink with publish_every=5 (one run per five batches, each batch staged until then).
A one-file warm-up through each sink runs first (JIT, catalog, first table commit).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import wapflow

TARGET_P50_S = 1.0
TARGET_RATIO = 0.8
EVERY = 5  # publish_every of the last capacity measure
CHECKS = [{"check": "not_null", "column": "fare"}, {"check": "unique", "columns": ["id"]}]
SCHEMA = "id long, fare double"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)  # noqa: T201 - progress


def emit(line: str = "") -> None:
    sys.stdout.write(line + "\n")


def land(folder: Path, n: int, rows: int, start: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        ids = np.arange(start + i * rows, start + (i + 1) * rows, dtype=np.int64)
        tmp = folder.parent / f".f{i}.parquet"
        pq.write_table(pa.table({"id": ids, "fare": np.random.default_rng(i).random(rows) * 50}), tmp)
        tmp.rename(folder / f"f{start + i:09d}.parquet")


def latencies(query: Any) -> list[float]:
    """Seconds from each non-empty batch's trigger to the end of its addBatch (its rows on main)."""
    out = []
    for p in query.recentProgress:
        if not p.numInputRows:
            continue
        d = p.durationMs
        out.append((d.get("triggerExecution", 0) - d.get("commitOffsets", 0)) / 1000)
    return out


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(xs, q)) if xs else float("nan")


class Bench:
    def __init__(self, work: Path) -> None:
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        self.work = work
        self.lh = wapflow.connect(
            None,
            warehouse=str(work / "lake"),
            catalog_name="bench",
            master="local[2]",
            driver_memory="2g",
            spark_conf={"spark.sql.shuffle.partitions": "2", "spark.sql.streaming.numRecentProgressUpdates": "1000"},
            tables={"bench.wap": {"checks": CHECKS}, "bench.wap_rate": {"checks": CHECKS}},
        )
        self.spark = self.lh.spark
        for t in ("plain", "plain_rate"):
            self.spark.sql("CREATE NAMESPACE IF NOT EXISTS bench.bench")
            self.spark.sql(f"CREATE TABLE IF NOT EXISTS bench.bench.{t} ({SCHEMA}) USING iceberg")
        self.n = 0

    def start(self, sink: str, src: Any, table: str, trigger: str | None, every: int = 1) -> Any:
        self.n += 1
        chk = str(self.work / f"chk{self.n}")
        if sink == "wapflow":
            return wapflow.start_stream(
                self.lh, src, f"bench.{table}", checkpoint=chk, trigger=trigger, publish_every=every
            )
        w = src.writeStream.format("iceberg").outputMode("append").option("checkpointLocation", chk)
        if trigger == "available_now":
            w = w.trigger(availableNow=True)
        elif trigger:
            w = w.trigger(processingTime=trigger)
        return w.toTable(f"bench.bench.{table}")

    def files(self, folder: Path) -> Any:
        return self.spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(folder))

    def count(self, table: str) -> int:
        if not self.spark.catalog.tableExists(f"bench.bench.{table}"):
            return 0  # wapflow's sink creates its table with the first batch
        return int(self.spark.table(f"bench.bench.{table}").count())

    def backlog(
        self, sink: str, table: str, files: int, rows: int, start: int, trigger: str | None, every: int = 1
    ) -> float:
        folder = self.work / f"in_{sink}_{start}"
        land(folder, files, rows, start)
        before = self.count(table)
        t0 = time.perf_counter()
        q = self.start(sink, self.files(folder), table, trigger, every)
        (q.process_all_available if sink == "wapflow" else q.processAllAvailable)()
        took = time.perf_counter() - t0  # with publish_every: a whole number of runs, all published by now
        q.stop()  # a wapflow Stream stops between runs
        got = self.count(table) - before
        if got != files * rows:
            raise SystemExit(f"{sink}: {got} rows on main, expected {files * rows}")
        return took

    def rate(self, sink: str, table: str, rate: int, seconds: float) -> list[float]:
        src = self.spark.readStream.format("rate").option("rowsPerSecond", rate).load()
        src = src.selectExpr("value AS id", "CAST(value % 97 AS DOUBLE) AS fare")
        q = self.start(sink, src, table, "1 second")
        time.sleep(seconds)
        q.stop()
        lat = latencies(getattr(q, "query", q))
        return lat[1:]  # the first batch plans the query and creates nothing comparable


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--files", type=int, default=10)
    ap.add_argument("--file-rows", type=int, default=100_000)
    ap.add_argument("--workdir", default="bench-data/stream")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    log("starting Spark (local[2])")
    b = Bench(Path(a.workdir).resolve())
    log("warm-up: one file through each sink")
    for sink, table in (("iceberg", "plain"), ("wapflow", "wap")):
        b.backlog(sink, table, 1, 1000, start=10**9, trigger="1 second")

    took: dict[str, float] = {}
    fast: dict[str, float] = {}
    for sink, table in (("iceberg", "plain"), ("wapflow", "wap")):
        log(f"throughput: {a.files} files x {a.file_rows} rows through {sink}'s sink, 1 s trigger")
        took[sink] = b.backlog(sink, table, a.files, a.file_rows, start=0, trigger="1 second")
        log(f"capacity: {a.files} files x {a.file_rows} rows through {sink}'s sink, no trigger interval")
        fast[sink] = b.backlog(sink, table, a.files, a.file_rows, start=10**8, trigger=None)
    log(f"capacity: the same through wapflow's sink with publish_every={EVERY}")
    every = b.backlog("wapflow", "wap", a.files, a.file_rows, start=2 * 10**8, trigger=None, every=EVERY)
    lat = {}
    for sink, table in (("iceberg", "plain_rate"), ("wapflow", "wap_rate")):
        log(f"latency: rate source at {a.rate} rows/s for {a.seconds:.0f} s through {sink}'s sink")
        lat[sink] = b.rate(sink, table, a.rate, a.seconds)

    rows = a.files * a.file_rows
    rps = {s: rows / t for s, t in took.items()}
    ratio = rps["wapflow"] / rps["iceberg"]
    cap = {s: rows / t for s, t in fast.items()}
    p50 = {s: pct(v, 50) for s, v in lat.items()}
    p95 = {s: pct(v, 95) for s, v in lat.items()}
    runs = b.lh.store.list(table="bench.wap_rate", limit=1000)
    doc = {
        "when": datetime.now().isoformat(timespec="seconds"),
        "rows_per_s": rps,
        "throughput_ratio": ratio,
        "rows_per_s_no_trigger": cap,
        "no_trigger_ratio": cap["wapflow"] / cap["iceberg"],
        "rows_per_s_no_trigger_publish_every": rows / every,
        "latency_p50_s": p50,
        "latency_p95_s": p95,
        "batches": {s: len(v) for s, v in lat.items()},
        "wapflow_rate_runs": {st: sum(1 for r in runs if r.status == st) for st in {r.status for r in runs}},
        "mean_latency_s": {s: statistics.fmean(v) if v else None for s, v in lat.items()},
    }
    ok50 = p50["wapflow"] <= TARGET_P50_S
    okr = ratio >= TARGET_RATIO
    emit(f"\nstream at a 1 s trigger on local[2] ({a.files} x {a.file_rows:,} rows backlog; rate {a.rate}/s)")
    emit("| measure | wapflow sink | Iceberg sink | target | |")
    emit("|---|---|---|---|---|")
    emit(
        f"| batch end -> on main, p50 | {p50['wapflow']:.2f} s | {p50['iceberg']:.2f} s | <= {TARGET_P50_S:.1f} s "
        f"| {'PASS' if ok50 else 'MISS'} |"
    )
    emit(f"| batch end -> on main, p95 | {p95['wapflow']:.2f} s | {p95['iceberg']:.2f} s | | |")
    emit(
        f"| rows/s (backlog) | {rps['wapflow']:,.0f} | {rps['iceberg']:,.0f} | >= {TARGET_RATIO}x "
        f"| {ratio:.2f}x {'PASS' if okr else 'MISS'} |"
    )
    emit(
        f"| rows/s (backlog, no trigger interval) | {cap['wapflow']:,.0f} | {cap['iceberg']:,.0f} | "
        f"| {cap['wapflow'] / cap['iceberg']:.2f}x |"
    )
    emit(
        f"| rows/s (the same, publish_every={EVERY}) | {rows / every:,.0f} | | | {rows / every / cap['iceberg']:.2f}x |"
    )
    emit(f"| batches measured (rate) | {len(lat['wapflow'])} | {len(lat['iceberg'])} | | |")
    if a.json:
        emit(json.dumps(doc))
    b.spark.stop()


if __name__ == "__main__":
    main()
