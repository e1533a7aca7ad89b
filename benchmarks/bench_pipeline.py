"""A three-table pipeline raw -> silver -> gold through wapflow against the same PySpark job without audit (issue 46).

Run from the repo root:

    .venv/bin/python benchmarks/bench_pipeline.py [--rows 10000000] [--reps 3] [--style models] [--json]

In ONE process with ONE SparkSession (local[2]), each repetition runs both sides, in alternating order, each
into three tables of its own created empty beforehand (outside the timings), from the same data:

- wapflow: raw written by `wapflow.write` (published), then silver (a filter and projection of raw) and gold
  (an aggregate of silver) as wap.toml models by `wapflow.run_models`, published together (`--style models`); or
  all three in one `wapflow.transaction` (`--style transaction`). Every table has three checks (not_null, a
  range, and unique: on silver's key and on gold's group);
- plain: the same DataFrame and the same SQL, each table written by `df.writeTo(table).append()`, no audit.

Raw is N rows from spark.range, deterministic (every repetition writes the same rows). Medians over --reps;
target: wapflow <= 1.15x plain. See benchmarks/README.md for how to read the output.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import wapflow
from wapflow.config import parse_config
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.sql.identifiers import TableName

TARGET = 1.15
ROWS = 10_000_000
SCHEMAS = {
    "raw": "id BIGINT, day DATE, category INT, amount DOUBLE, status STRING",
    "silver": "id BIGINT, day DATE, category INT, amount DOUBLE",
    "gold": "day DATE, category INT, orders BIGINT, amount DOUBLE",
}
SILVER_SQL = "SELECT id, day, category, amount FROM {raw} WHERE status = 'ok' AND amount >= 1"
GOLD_SQL = "SELECT day, category, count(*) AS orders, sum(amount) AS amount FROM {silver} GROUP BY day, category"
CHECKS: dict[str, list[dict[str, Any]]] = {
    "raw": [
        {"check": "not_null", "column": "id"},
        {"check": "between", "column": "amount", "min": 0, "max": 100},
        {"check": "not_null", "column": "day"},
    ],
    "silver": [
        {"check": "not_null", "column": "day"},
        {"check": "unique", "columns": ["id"]},
        {"check": "between", "column": "amount", "min": 1, "max": 100},
    ],
    "gold": [
        {"check": "not_null", "column": "day"},
        {"check": "unique", "columns": ["day", "category"]},
        {"check": "between", "column": "orders", "min": 1},
    ],
}


class BenchError(Exception):
    """A run that did not publish, or tables that differ: the figures would be wrong."""


def log(msg: str) -> None:
    sys.stderr.write(f"[{time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


def names(ns: str) -> dict[str, str]:
    return {t: f"{ns}.{t}" for t in SCHEMAS}


def namespaces(reps: int, tag: str = "") -> list[tuple[str, str]]:
    """Each repetition's (wapflow, plain) namespaces; repetition 0 is the warm-up."""
    return [(f"w{tag}{i}", f"p{tag}{i}") for i in range(reps + 1)]


def pipeline(reps: int, tag: str = "", *, unique: bool = True) -> dict[str, Any]:
    """wap.toml's [tables] (each with its checks) and [models] (silver and gold) of every repetition.
    `unique=False`: the tables' checks less `unique` (to see what it costs)."""
    tables: dict[str, Any] = {}
    models: dict[str, Any] = {}
    for wns, _ in namespaces(reps, tag):
        t = names(wns)
        for kind in SCHEMAS:
            tables[t[kind]] = {"checks": [c for c in CHECKS[kind] if unique or c["check"] != "unique"]}
        # Appends, as the plain job's: silver reads what raw gained (incremental); gold appends its sums (a model
        # with no mode would be the whole table, replaced each run).
        models[t["silver"]] = {"sql": SILVER_SQL.format(raw=t["raw"]), "incremental": True}
        models[t["gold"]] = {"sql": GOLD_SQL.format(silver=t["silver"]), "mode": "append"}
    return {"tables": tables, "models": models}


def config(root: Path, reps: int, master: str, memory: str, *, unique: bool = True) -> Any:
    lh = {"warehouse": str(root), "catalog_name": "bench_pipeline", "master": master, "driver_memory": memory}
    return parse_config({"lakehouse": lh, **pipeline(reps, unique=unique)})


def raw_frame(spark: Any, rows: int) -> Any:
    """N deterministic rows: a tenth void, 1% with amount < 1 (silver drops both); 365 days x 7 categories."""
    return spark.range(rows).selectExpr(
        "id",
        "date_add(DATE'2026-01-01', CAST(id % 365 AS INT)) AS day",
        "CAST(id % 7 AS INT) AS category",
        "CAST((id * 7919) % 10000 AS DOUBLE) / 100.0 AS amount",
        "IF(id % 10 = 0, 'void', 'ok') AS status",
    )


def create_tables(lh: Lakehouse, ns: str) -> None:
    """The three tables of a side, empty, as wapflow creates a table (Tables.create_like: same properties)."""
    lh.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {lh.catalog}.{ns}")
    for kind, schema in SCHEMAS.items():
        lh.tables.create_like(TableName.parse(f"{ns}.{kind}"), lh.spark.createDataFrame([], schema))


def run_wapflow(lh: Lakehouse, ns: str, rows: int, style: str) -> dict[str, Any]:
    """The pipeline through wapflow: {"seconds", "timings": {table: {step: s}}}."""
    t = names(ns)
    t0 = time.perf_counter()
    if style == "models":
        first = wapflow.write(lh, t["raw"], raw_frame(lh.spark, rows))
        if first.status != "published":
            raise BenchError(f"{t['raw']}: {first.status}: {first.message}")
        res = wapflow.run_models(lh, [t["silver"]])
        results = [first, *res.tables]
    else:
        from pyspark.sql.functions import expr

        with wapflow.transaction(lh, name="bench") as tx:
            tx.write(t["raw"], raw_frame(lh.spark, rows))
            silver = tx.read(t["raw"]).where("status = 'ok' AND amount >= 1").drop("status")
            tx.write(t["silver"], silver)
            gold = (
                tx.read(t["silver"])
                .groupBy("day", "category")
                .agg(expr("count(*) AS orders"), expr("sum(amount) AS amount"))
            )
            tx.write(t["gold"], gold)
        res = tx.result
        assert res is not None
        results = list(res.tables)
    seconds = time.perf_counter() - t0
    if res.status != "published":
        raise BenchError(f"{ns}: {res.status}: {res.message}")
    return {"seconds": seconds, "timings": {r.table: dict(r.timings) for r in results}}


def run_plain(lh: Lakehouse, ns: str, rows: int) -> dict[str, Any]:
    """The same job with plain Iceberg appends, no audit: {"seconds", "timings": {table: s}}."""
    t = {k: f"{lh.catalog}.{v}" for k, v in names(ns).items()}
    spark = lh.spark
    t0 = time.perf_counter()
    raw_frame(spark, rows).writeTo(t["raw"]).append()
    t1 = time.perf_counter()
    spark.sql(SILVER_SQL.format(raw=t["raw"])).writeTo(t["silver"]).append()
    t2 = time.perf_counter()
    spark.sql(GOLD_SQL.format(silver=t["silver"])).writeTo(t["gold"]).append()
    t3 = time.perf_counter()
    return {"seconds": t3 - t0, "timings": {"raw": t1 - t0, "silver": t2 - t1, "gold": t3 - t2}}


def counts(lh: Lakehouse, ns: str) -> dict[str, int]:
    return {k: lh.spark.table(f"{lh.catalog}.{v}").count() for k, v in names(ns).items()}


def measure(
    lh: Lakehouse, rows: int, reps: int, style: str, *, tag: str = "", warmup: bool = True, say: Any = log
) -> dict[str, list[dict[str, Any]]]:
    """Both sides, `reps` times after a warm-up at a tenth of the rows (at most 1M), alternating which goes first.
    `tag`: a part of the namespaces' names (`pipeline(reps, tag)` configured them)."""
    runs: dict[str, list[dict[str, Any]]] = {"wapflow": [], "plain": []}
    for i, (wns, pns) in enumerate(namespaces(reps, tag)):
        if i == 0 and not warmup:
            continue
        n = rows if i else max(1, min(rows // 10, 1_000_000))
        create_tables(lh, wns)
        create_tables(lh, pns)
        order = [("wapflow", wns), ("plain", pns)]
        if i % 2 == 0:
            order.reverse()
        got: dict[str, dict[str, Any]] = {}
        for side, ns in order:
            got[side] = run_wapflow(lh, ns, n, style) if side == "wapflow" else run_plain(lh, ns, n)
        same = counts(lh, wns), counts(lh, pns)
        if same[0] != same[1]:
            raise BenchError(f"the two sides wrote different tables: wapflow {same[0]}, plain {same[1]}")
        label = "warm-up" if i == 0 else f"rep {i}/{reps}"
        say(
            f"{label} ({n:,} rows; {' then '.join(s for s, _ in order)}): wapflow {got['wapflow']['seconds']:.1f}s, "
            f"plain {got['plain']['seconds']:.1f}s; rows {same[0]}"
        )
        if i:
            for side in runs:
                runs[side].append(got[side])
    return runs


def summarize(rows: int, runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    w = statistics.median(r["seconds"] for r in runs["wapflow"])
    p = statistics.median(r["seconds"] for r in runs["plain"])
    steps: dict[str, dict[str, float]] = {}
    outside = [r["seconds"] - sum(sum(t.values()) for t in r["timings"].values()) for r in runs["wapflow"]]
    for r in runs["wapflow"]:
        for table, timings in r["timings"].items():
            for step, s in timings.items():
                steps.setdefault(table.split(".", 1)[1], {}).setdefault(step, 0.0)
                steps[table.split(".", 1)[1]][step] += s / len(runs["wapflow"])
    ratio = w / p
    return {
        "rows": rows,
        "wapflow_s": round(w, 2),
        "plain_s": round(p, 2),
        "ratio": round(ratio, 3),
        "status": "PASS" if ratio <= TARGET else "MISS",
        "wapflow_runs_s": [round(r["seconds"], 2) for r in runs["wapflow"]],
        "plain_runs_s": [round(r["seconds"], 2) for r in runs["plain"]],
        "steps_mean_s": {t: {k: round(v, 2) for k, v in s.items()} for t, s in steps.items()},
        "outside_steps_mean_s": round(statistics.fmean(outside), 2),
        "plain_mean_s": {k: round(statistics.fmean(r["timings"][k] for r in runs["plain"]), 2) for k in SCHEMAS},
    }


def print_table(s: dict[str, Any], style: str) -> None:
    print(f"\n{'rows':>12}  {'wapflow s':>10}  {'plain s':>8}  {'ratio':>6}  {'target':>7}  status")
    print(
        f"{s['rows']:>12,}  {s['wapflow_s']:>10.1f}  {s['plain_s']:>8.1f}  {s['ratio']:>5.2f}x  "
        f"{'<= ' + str(TARGET) + 'x':>7}  {s['status']}"
    )
    print(f"  medians of {len(s['wapflow_runs_s'])} rep(s); wapflow {s['wapflow_runs_s']}, plain {s['plain_runs_s']}")
    print(f"\nwapflow's steps ({style}), mean seconds per rep")
    for table, st in s["steps_mean_s"].items():
        print(f"  {table:<8} " + ", ".join(f"{k} {v:.2f}" for k, v in st.items()))
    print(f"  outside the tables' steps (the group's publish, run records, planning): {s['outside_steps_mean_s']:.2f}")
    print("plain, mean seconds per rep: " + ", ".join(f"{k} {v:.2f}" for k, v in s["plain_mean_s"].items()))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--rows", type=int, default=ROWS, help=f"rows of raw (default {ROWS:,})")
    p.add_argument("--reps", type=int, default=5, help="measurements per side, median reported (default 5)")
    p.add_argument(
        "--style",
        choices=("models", "transaction"),
        default="models",
        help="models: wapflow.write(raw) then run_models(silver, gold); transaction: all three in one transaction",
    )
    p.add_argument("--no-unique", action="store_true", help="the tables' checks less unique (what it costs)")
    p.add_argument("--workdir", default="bench-data", help="warehouse folder parent (default bench-data)")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--driver-memory", default="2g")
    p.add_argument("--json", action="store_true", help="also print every figure as one JSON object on the last line")
    args = p.parse_args(argv)
    if args.rows < 1000:
        p.error("--rows: at least 1000")
    if args.reps < 1:
        p.error("--reps must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    root = Path(args.workdir).resolve() / "warehouse-pipeline-bench"
    if root.exists():
        shutil.rmtree(root)  # empty catalog: no earlier tables or runs
    t_start = time.perf_counter()
    log(f"starting Spark ({args.master}, driver memory {args.driver_memory}); warehouse {root}")
    lh = Lakehouse(config(root, args.reps, args.master, args.driver_memory, unique=not args.no_unique))
    spark = lh.spark
    try:
        log(
            f"{args.rows:,} rows, {args.reps} rep(s), wapflow as {args.style}"
            + (", no unique" if args.no_unique else "")
        )
        runs = measure(lh, args.rows, args.reps, args.style)
    except BenchError as e:
        print(f"benchmark aborted: {e}", file=sys.stderr)
        return 2
    finally:
        spark.stop()  # the session this script started: frees the cores at once
    s = summarize(args.rows, runs)
    print_table(s, args.style)
    elapsed = time.perf_counter() - t_start
    print(f"\n  ({elapsed:.0f}s in all; {os.cpu_count()} cores; {args.master}, driver memory {args.driver_memory})")
    if args.json:
        print(
            json.dumps(
                s
                | {"style": args.style, "unique": not args.no_unique, "reps": args.reps, "elapsed_s": round(elapsed, 1)}
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
