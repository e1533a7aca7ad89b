"""A three-dataset Spark Declarative Pipelines project through `wap pipelines run` against the same project run by
Spark's own engine with no audit (what `spark-pipelines run` does), in one session (issue 58).

Run from the repo root:

    .venv/bin/python benchmarks/bench_sdp.py [--rows 10000000] [--reps 3] [--json]

In ONE process with ONE SparkSession (local[2]), each repetition runs both sides in alternating order, each into
a namespace of its own, from the same project files (only `database` differs):

- raw: a materialized view of N rows from spark.range (Python, deterministic);
- silver: a SQL materialized view filtering raw; gold: a SQL materialized view aggregating silver;
- wapflow: `wapflow.run_pipeline`: every dataset on the run's branch, three checks per dataset (not_null, a range,
  unique), published in one commit;
- plain: the same graph registered and run by pyspark's own `create_dataflow_graph` / `register_definitions` /
  `start_run` on a Connect session of the same JVM, writing main table by table, no checks.

Repetition 0 is a warm-up. Medians over --reps; target: wapflow <= 1.10x plain.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import wapflow
from wapflow.config import parse_config
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.sdp import engine, project

TARGET = 1.10
ROWS = 10_000_000
RAW_PY = """
from pyspark import pipelines as dp
from pyspark.sql import SparkSession

spark = SparkSession.active()


@dp.materialized_view
def raw():
    n = int(spark.conf.get("bench.rows"))
    return spark.range(n).selectExpr(
        "id", "date_add(DATE'2026-01-01', CAST(id % 365 AS INT)) AS day", "CAST(id % 50 AS INT) AS category",
        "CAST(id % 1000 AS DOUBLE) / 10 AS amount", "CASE WHEN id % 17 = 0 THEN 'void' ELSE 'ok' END AS status",
    )
"""
DERIVED_SQL = """CREATE MATERIALIZED VIEW silver AS
SELECT id, day, category, amount FROM raw WHERE status = 'ok' AND amount >= 1;
CREATE MATERIALIZED VIEW gold AS
SELECT day, category, count(*) AS orders, sum(amount) AS amount FROM silver GROUP BY day, category;
"""
CHECKS: dict[str, list[dict[str, Any]]] = {
    "raw": [
        {"check": "not_null", "column": "id"},
        {"check": "between", "column": "amount", "min": 0, "max": 100},
        {"check": "unique", "columns": ["id"]},
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


def log(msg: str) -> None:
    sys.stderr.write(f"[{time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


def make_project(root: Path, database: str, rows: int) -> Path:
    (root / "transformations").mkdir(parents=True, exist_ok=True)
    (root / "transformations" / "raw.py").write_text(RAW_PY)
    (root / "transformations" / "derived.sql").write_text(DERIVED_SQL)
    spec = root / "spark-pipeline.yml"
    spec.write_text(
        f'name: bench\nstorage: storage\ndatabase: {database}\nconfiguration:\n  bench.rows: "{rows}"\n'
        "libraries:\n  - glob:\n      include: transformations/**\n"
    )
    return spec


def plain_run(lh: Lakehouse, spec_path: Path) -> None:
    """The project as `spark-pipelines run` runs it: Spark's engine alone, main written table by table."""
    from pyspark.pipelines.cli import register_definitions
    from pyspark.pipelines.spark_connect_graph_element_registry import SparkConnectGraphElementRegistry
    from pyspark.pipelines.spark_connect_pipeline import create_dataflow_graph, start_run

    proj = project.load(spec_path)
    cs = engine.session(lh, dict(proj.configuration))
    try:
        gid = create_dataflow_graph(
            cs, default_catalog=lh.catalog, default_database=proj.database, sql_conf=proj.configuration
        )
        with engine.as_active(engine.endpoint(lh)):
            register_definitions(spec_path, SparkConnectGraphElementRegistry(cs, gid), proj.spec, cs, gid)
        for _ in start_run(
            cs, gid, full_refresh=[], full_refresh_all=False, refresh=[], dry=False, storage=proj.storage
        ):
            pass
    finally:
        cs.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=ROWS)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-unique", action="store_true", help="two checks a dataset: not_null and between")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-sdp-"))
    tables: dict[str, Any] = {}
    for k in range(args.reps + 1):
        for t, checks in CHECKS.items():
            kept = [c for c in checks if not (args.no_unique and c["check"] == "unique")]
            tables[f"w{k}.{t}"] = {"checks": kept}
    cfg = parse_config(
        {
            "lakehouse": {
                "warehouse": str(work / "lakehouse"),
                "master": "local[2]",
                "driver_memory": "4g",
                "spark_conf": {"spark.sql.shuffle.partitions": "8"},
            },
            "tables": tables,
        }
    )
    cfg.base_dir = work
    lh = Lakehouse(cfg, progress=lambda _m: None)
    times: dict[str, list[float]] = {"wapflow": [], "plain": []}
    try:
        for k in range(args.reps + 1):
            order = ["wapflow", "plain"] if k % 2 == 0 else ["plain", "wapflow"]
            for side in order:
                db = f"w{k}" if side == "wapflow" else f"p{k}"
                lh.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {lh.catalog}.{db}")
                spec = make_project(work / f"{side}{k}", db, args.rows)
                t0 = time.perf_counter()
                steps = ""
                if side == "wapflow":
                    res = wapflow.run_pipeline(lh, spec)
                    if getattr(res, "status", None) != "published":
                        raise SystemExit(f"wapflow run did not publish: {getattr(res, 'message', res)}")
                    spent: dict[str, float] = {}
                    for r in getattr(res, "tables", []):
                        for step, secs in r.timings.items():
                            spent[step] = spent.get(step, 0.0) + secs
                    steps = " ".join(f"{k} {v:.2f}" for k, v in spent.items())
                else:
                    plain_run(lh, spec)
                took = time.perf_counter() - t0
                gold = lh.spark.table(f"{lh.catalog}.{db}.gold").count()
                log(f"rep {k} {side}: {took:.1f} s (gold {gold} rows) {steps}")
                if k > 0:
                    times[side].append(took)
        w, p = statistics.median(times["wapflow"]), statistics.median(times["plain"])
        ratio = w / p
        doc = {"rows": args.rows, "reps": args.reps, "wapflow_s": w, "plain_s": p, "ratio": ratio, "target": TARGET}
        label = "2 checks a dataset, no unique" if args.no_unique else "3 checks a dataset, 2 unique over 10M ids"
        if args.json:
            print(json.dumps(doc))  # noqa: T201
        else:
            print(f"{args.rows:,} rows, 3 datasets, medians of {args.reps}:")  # noqa: T201
            print(f"  wap pipelines run  {w:8.1f} s  ({label}, one publish)")  # noqa: T201
            print(f"  Spark's SDP alone  {p:8.1f} s  (no audit, main table by table)")  # noqa: T201
            print(f"  ratio              {ratio:8.2f}x (target <= {TARGET:.2f}x)")  # noqa: T201
        return 0 if ratio <= TARGET else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
