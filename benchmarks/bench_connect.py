"""Cold `wap run` through a running `wap serve` (Spark Connect) vs today's `wap run` with its own local JVM.

Run from the repo root (jars cached: `wap setup`), on an otherwise idle machine:

    .venv/bin/python benchmarks/bench_connect.py [--reps 5] [--rows 1000] [--json]

Two lakehouses with the same table and check: one served by a `wap serve` process started here (its start
is reported, not counted), one without. Each rep is a fresh `wap run` process (the whole command, Python
start included) on a new 1,000-row parquet file, alternating which path goes first. Prints both medians
and their ratio; the target is <= 3 s through the server.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

from wapflow.demo.generate import generate_trips
from wapflow.lakehouse.connect import port_answers
from wapflow.lakehouse.processes import free_port

WAP = str(Path(sys.executable).with_name("wap"))


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)  # noqa: T201 - progress


def config(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    cfg = folder / "wap.toml"
    cfg.write_text(
        f'[lakehouse]\nwarehouse = "{folder / "lakehouse"}"\nmaster = "local[2]"\ndriver_memory = "1g"\n'
        '[lakehouse.spark_conf]\n"spark.sql.shuffle.partitions" = "2"\n\n'
        '[tables."bench.trips"]\nchecks = [{ check = "not_null", column = "passenger_count" }]\n'
    )
    return cfg


def timed_run(cfg: Path, file: Path) -> tuple[float, str]:
    t0 = time.perf_counter()
    p = subprocess.run(
        [WAP, "run", "bench.trips", str(file), "-c", str(cfg), "--json"], capture_output=True, text=True, check=False
    )
    took = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"wap run failed ({p.returncode}): {p.stdout}{p.stderr}")
    return took, p.stderr


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--workdir", default="bench-data/connect")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    work = Path(args.workdir).resolve()
    if work.exists():
        subprocess.run(["rm", "-rf", str(work)], check=True)
    served, local = config(work / "served"), config(work / "local")
    port = free_port()
    log(f"starting wap serve on 127.0.0.1:{port}")
    t0 = time.perf_counter()
    serve = subprocess.Popen(
        [WAP, "serve", "-c", str(served), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    results: dict[str, list[float]] = {"served": [], "local": []}
    try:
        while not port_answers(port):
            if serve.poll() is not None or time.perf_counter() - t0 > 300:
                raise SystemExit("wap serve did not start (see its log in the state dir's logs/)")
            time.sleep(0.2)
        serve_start = time.perf_counter() - t0
        time.sleep(1.0)  # the state file other commands look for is written right after the port answers
        log(f"wap serve ready in {serve_start:.1f}s")
        # One warm-up run per path (first table creation, OS file cache), not counted.
        for i in range(args.reps + 1):
            files = {}
            for name in ("served", "local"):
                f = work / name / "in" / f"b{i}.parquet"
                f.parent.mkdir(parents=True, exist_ok=True)
                pq.write_table(generate_trips(args.rows, start_id=1 + i * args.rows, seed=i), f)
                files[name] = f
            order = ["served", "local"] if i % 2 == 0 else ["local", "served"]
            for name in order:
                took, err = timed_run(served if name == "served" else local, files[name])
                if name == "served" and "using the Spark Connect server" not in err:
                    raise SystemExit(f"the served run did not use the server: {err}")
                log(f"rep {i} {name}: {took:.2f}s" + (" (warm-up)" if i == 0 else ""))
                if i > 0:
                    results[name].append(took)
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.wait(timeout=60)
    med = {k: statistics.median(v) for k, v in results.items()}
    ratio = med["local"] / med["served"]
    print(f"wap serve start: {serve_start:.1f}s (once)")  # noqa: T201 - the benchmark's result
    print(f"cold wap run of {args.rows} rows, median of {args.reps}:")  # noqa: T201
    print(f"  through wap serve (Spark Connect): {med['served']:.2f}s  {sorted(results['served'])}")  # noqa: T201
    print(f"  own local JVM (today):             {med['local']:.2f}s  {sorted(results['local'])}")  # noqa: T201
    print(f"  local / served: {ratio:.2f}x; target <= 3 s through the server: {med['served'] <= 3.0}")  # noqa: T201
    if args.json:
        print(json.dumps({"serve_start_s": serve_start, "median_s": med, "runs_s": results, "ratio": ratio}))  # noqa: T201


if __name__ == "__main__":
    main()
