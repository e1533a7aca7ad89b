"""WAP vs a plain Iceberg append on local[2] and on a two-worker Spark standalone cluster, in one run.

Run from the repo root (`make bench-cluster`):

    .venv/bin/python benchmarks/bench_cluster.py [--sizes 1000000,10000000] [--reps 2] [--workdir bench-data]

It runs benchmarks/bench_wap.py twice, one after the other on the same data files: once with
`master = local[2]`, once against a standalone master and two workers (one core each, so both see two cores)
started here on 127.0.0.1 from the pyspark package and stopped at the end. For each master and batch size it
prints the WAP / plain-append ratio, and how a run's time splits between the executors' work (the branch
write) and the driver's metadata work (prepare: branch and table checks; audit: answered from the new files'
metadata and the metrics observed while writing; publish: main moved to the branch's snapshot). The
driver-side part must stay flat as the batch grows 1M -> 10M rows; the write grows with the data.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))  # the cluster the tests use: tests/support/spark_cluster.py

DRIVER_STEPS = ("prepare", "audit", "publish")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)  # noqa: T201 - a script


def bench_wap(master: str, args: argparse.Namespace, conf: list[str]) -> dict[str, Any]:
    """One bench_wap.py run (its own Spark application); its JSON document."""
    cmd = [
        sys.executable,
        str(HERE / "bench_wap.py"),
        "--sizes",
        args.sizes,
        "--reps",
        str(args.reps),
        "--workdir",
        args.workdir,
        "--master",
        master,
        "--driver-memory",
        args.driver_memory,
        "--skip-publish",
        "--json",
    ]
    for c in conf:
        cmd += ["--conf", c]
    log(f"bench_wap.py on {master}")
    p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=False)
    if p.returncode != 0:
        raise SystemExit(f"bench_wap.py on {master} failed (exit {p.returncode})")
    doc: dict[str, Any] = json.loads(p.stdout.strip().splitlines()[-1])
    return doc


def split(size: dict[str, Any]) -> tuple[float, float]:
    """(driver-side seconds, executor write seconds) of the median WAP run."""
    steps = size["wap_steps"]
    return sum(steps.get(k, 0.0) for k in DRIVER_STEPS), steps.get("write", 0.0)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--sizes", default="1000000,10000000", help="batch sizes in rows (default 1000000,10000000)")
    p.add_argument("--reps", type=int, default=2, help="measurements per size and path (default 2)")
    p.add_argument("--workdir", default="bench-data", help="data files, reused (default bench-data)")
    p.add_argument("--driver-memory", default="4g", help="driver memory on both masters (default 4g)")
    p.add_argument("--executor-memory", default="3g", help="each cluster executor's memory (default 3g)")
    args = p.parse_args()

    from support.spark_cluster import StandaloneCluster

    results = {"local[2]": bench_wap("local[2]", args, [])}
    with tempfile.TemporaryDirectory(prefix="wap-bench-cluster-") as base:
        cluster = StandaloneCluster(Path(base), workers=2, memory=args.executor_memory.upper()).start()
        try:
            conf = [
                f"spark.executor.memory={args.executor_memory}",
                "spark.executor.cores=1",
                "spark.cores.max=2",
                "spark.sql.shuffle.partitions=8",
            ]
            results["standalone, 2 workers x 1 core"] = bench_wap(cluster.url, args, conf)
        finally:
            cluster.stop()

    print("\nWAP vs plain append, and where a WAP run's time goes (median seconds)")  # noqa: T201
    header = (
        f"{'master':<32}{'rows':>12}{'plain':>8}{'wap':>8}{'ratio':>8}{'write':>8}{'driver':>8}   prepare/audit/publish"
    )
    print(header)  # noqa: T201
    for master, doc in results.items():
        for s in doc["sizes"]:
            driver, write = split(s)
            st = s["wap_steps"]
            steps = "/".join(f"{st.get(k, 0.0):.2f}" for k in DRIVER_STEPS)
            print(  # noqa: T201
                f"{master:<32}{s['rows']:>12,}{s['plain_s']:>8.2f}{s['wap_s']:>8.2f}{s['ratio']:>7.2f}x"
                f"{write:>8.2f}{driver:>8.2f}   {steps}"
            )
    print("\nGrowth from the smallest to the largest batch (x more rows):")  # noqa: T201
    for master, doc in results.items():
        sizes = doc["sizes"]
        if len(sizes) < 2:
            continue
        small, big = sizes[0], sizes[-1]
        (d0, w0), (d1, w1) = split(small), split(big)
        print(  # noqa: T201
            f"  {master:<32} rows x{big['rows'] / small['rows']:.0f}: executor write x{w1 / w0:.2f}, "
            f"driver-side x{d1 / d0:.2f} ({d0:.2f}s -> {d1:.2f}s)"
        )
    local, cluster_doc = results["local[2]"]["sizes"][-1], list(results.values())[1]["sizes"][-1]
    print(  # noqa: T201
        f"\nAt {local['rows']:,} rows: WAP / plain {local['ratio']:.2f}x on local[2], "
        f"{cluster_doc['ratio']:.2f}x on the cluster (target <= 1.15x)"
    )
    print(json.dumps({"results": results}))  # noqa: T201
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
