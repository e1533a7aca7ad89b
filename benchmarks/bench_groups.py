"""Publishing several tables in one commit against one table's publish (issue 45).

Run from the repo root:

    .venv/bin/python benchmarks/bench_groups.py [--groups 10,50] [--reps 7] [--catalogs sqlite,postgresql] [--json]

In ONE process with ONE SparkSession, for each catalog (the embedded SQLite JDBC catalog, and a JDBC catalog on
a local PostgreSQL server started the way the tests start theirs when its programs are installed):

- the publish step alone: a group of N small tables published by one run (one catalog commit for all of
  them) against the publish step of a one-table run (`drive`/`run_wap`'s steps), both timed around the whole
  step (locks, the commit, the run records); target: a group of 10 publishes in <= 1.5x one table's time;
- a group's whole run (write, audit, publish every table) against the same tables as N separate `run_wap`
  calls, one after another.

Every run publishes 100 new rows into each of its tables (a `not_null` check each); medians of --reps, the
variants alternating within each rep. See benchmarks/README.md for how to read the output.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from wapflow.config import parse_config
from wapflow.lakehouse import jvm
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.pipeline import drive, group_result, new_state, result, run_wap, tables_group
from wapflow.pipeline.driver import in_process

ROWS = 100
NAMESPACE = "grp"
SINGLE = f"{NAMESPACE}.single"
TARGET = 1.5  # a group of 10 publishes in at most 1.5x one table's publish
TARGET_SIZE = 10


class BenchError(Exception):
    """A run that did not publish: the figures would be wrong."""


def log(msg: str) -> None:
    sys.stderr.write(f"[{time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


def table_names(n: int) -> list[str]:
    return [f"{NAMESPACE}.t{i:03d}" for i in range(n)]


def tables_config(n: int) -> dict[str, Any]:
    """wap.toml's [tables] of the benchmark: the one-table run's table and the group's n tables."""
    return {t: {"checks": [{"check": "not_null", "column": "id"}]} for t in [SINGLE, *table_names(n)]}


class Batches:
    """Small parquet files of ROWS new rows each (ids never repeat): every run brings new rows."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.numbers = itertools.count()

    def new(self) -> str:
        n = next(self.numbers)
        ids = pa.array(range(n * ROWS, (n + 1) * ROWS), pa.int64())
        path = self.folder / f"batch_{n:06d}.parquet"
        pq.write_table(pa.table({"id": ids, "amount": pa.array([0.5 * i for i in range(ROWS)])}), path)
        return str(path)


class Timed:
    """A driver's step function, each step's wall time added up by name."""

    def __init__(self, step: Callable[[Any, Any], Any]) -> None:
        self.step = step
        self.times: dict[str, float] = {}

    def __call__(self, name: Any, state: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return self.step(name, state)
        finally:
            self.times[name] = self.times.get(name, 0.0) + time.perf_counter() - t0


def one_table_run(lh: Lakehouse, table: str, batches: Batches) -> dict[str, float]:
    """A one-table run, its steps timed: {"publish": s, "total": s}."""
    timed = Timed(in_process(lh))
    t0 = time.perf_counter()
    res = result(lh, drive(lh, new_state(table, [batches.new()]), run_step=timed))
    total = time.perf_counter() - t0
    if res.status != "published":
        raise BenchError(f"the run of {table} ended {res.status}: {res.message}")
    return {"publish": timed.times["publish"], "total": total}


def group_run(lh: Lakehouse, tables: Sequence[str], batches: Batches) -> dict[str, float]:
    """A multi-table run over `tables`, its steps timed: {"publish": s, "total": s}."""
    timed = Timed(in_process(lh))  # the one step function, over the group's tables
    t0 = time.perf_counter()
    res = group_result(lh, drive(lh, tables_group(lh, [(t, [batches.new()]) for t in tables]), run_step=timed))
    total = time.perf_counter() - t0
    if res.status != "published":
        raise BenchError(f"the group of {len(tables)} tables ended {res.status}: {res.message}")
    return {"publish": timed.times["publish"], "total": total}


def separate_runs(lh: Lakehouse, tables: Sequence[str], batches: Batches) -> dict[str, float]:
    """The same tables as separate run_wap calls, one after another: {"total": s, "publish": sum of steps}."""
    t0 = time.perf_counter()
    publish = 0.0
    for t in tables:
        res = run_wap(lh, t, [batches.new()])
        if res.status != "published":
            raise BenchError(f"the run of {t} ended {res.status}: {res.message}")
        publish += res.timings.get("publish", 0.0)
    return {"publish": publish, "total": time.perf_counter() - t0}


def measure(
    lh: Lakehouse, batches: Batches, groups: Sequence[int], reps: int, *, separate: bool = True, say=log
) -> dict[str, Any]:
    """Every figure of one catalog: medians and every run's, by variant."""
    runs: dict[str, list[dict[str, float]]] = {"one": []}
    for n in groups:
        runs[f"group{n}"] = []
        if separate:
            runs[f"separate{n}"] = []
    say("  warm-up (not reported): one table twice, then each group once (creates its tables)")
    for _ in range(2):
        one_table_run(lh, SINGLE, batches)
    for n in groups:
        group_run(lh, table_names(n), batches)
    for rep in range(reps):
        order: list[tuple[str, Callable[[], dict[str, float]]]] = [("one", lambda: one_table_run(lh, SINGLE, batches))]
        for n in groups:
            order.append((f"group{n}", lambda n=n: group_run(lh, table_names(n), batches)))
            if separate:
                order.append((f"separate{n}", lambda n=n: separate_runs(lh, table_names(n), batches)))
        if rep % 2:
            order.reverse()  # drift hits every variant alike
        for name, fn in order:
            runs[name].append(fn())
        say(f"  rep {rep + 1}/{reps}: " + ", ".join(f"{k} {runs[k][-1]['publish']:.3f}s" for k, _ in order))
    med = {k: {m: statistics.median(r[m] for r in v) for m in ("publish", "total")} for k, v in runs.items()}
    return {"medians": med, "runs": runs}


def figures(catalog: str, measured: dict[str, Any], groups: Sequence[int]) -> list[dict[str, Any]]:
    """The table's rows: one per variant, with its ratios."""
    med = measured["medians"]
    one = med["one"]
    rows = [{"catalog": catalog, "tables": 1, "publish_s": one["publish"], "publish_ratio": 1.0, "run_s": one["total"]}]
    for n in groups:
        g = med[f"group{n}"]
        row = {
            "catalog": catalog,
            "tables": n,
            "publish_s": g["publish"],
            "publish_ratio": g["publish"] / one["publish"],
            "run_s": g["total"],
        }
        if f"separate{n}" in med:
            s = med[f"separate{n}"]
            row |= {"separate_s": s["total"], "run_ratio": g["total"] / s["total"], "separate_publish_s": s["publish"]}
        rows.append(row)
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    print("Publishing a group of tables in one commit vs one table (median seconds)")
    print(
        f"  {'catalog':<11}{'tables':>7}{'publish':>10}{'vs one':>9}{'group run':>11}"
        f"{'separate runs':>15}{'group/sep.':>12}{'their publishes':>17}"
    )
    for r in rows:
        sep = r.get("separate_s")
        print(
            f"  {r['catalog']:<11}{r['tables']:>7}{r['publish_s']:>10.3f}{r['publish_ratio']:>8.2f}x{r['run_s']:>11.2f}"
            + (
                f"{sep:>15.2f}{r['run_ratio']:>11.2f}x{r['separate_publish_s']:>17.3f}"
                if sep is not None
                else f"{'':>15}{'':>12}{'':>17}"
            )
        )


def verdicts(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for r in rows:
        if r["tables"] == TARGET_SIZE:
            ok = r["publish_ratio"] <= TARGET
            out.append(
                {"catalog": r["catalog"], "ratio": round(r["publish_ratio"], 3), "status": "PASS" if ok else "MISS"}
            )
    return out


@contextmanager
def local_postgres() -> Iterator[Any]:
    """A PostgreSQL server of its own (wapflow._dev.pg_server, as the tests start theirs), stopped at the end."""
    from wapflow._dev.pg_server import LocalPostgres

    folder = Path(tempfile.mkdtemp(prefix="wapflow-bench-pg-"))  # /tmp: the postgres user can enter it
    server = LocalPostgres(folder, fast=True)
    try:
        server.start()
        yield server.create_database("bench_groups")
    finally:
        server.stop(immediate=True)
        shutil.rmtree(folder, ignore_errors=True)


def lakehouse_config(root: Path, catalog: str, groups: Sequence[int], master: str, memory: str, pg: Any) -> Any:
    lh: dict[str, Any] = {
        "warehouse": str(root / catalog),
        "catalog_name": f"bench_{catalog}",
        "master": master,
        "driver_memory": memory,
        "spark_conf": {"spark.sql.shuffle.partitions": "2"},
        "extra_packages": [jvm.POSTGRESQL_JDBC.coordinate],  # one session for both catalogs
    }
    if pg is not None:
        lh["catalog"] = "jdbc"
        lh["catalog_properties"] = {
            "uri": pg.jdbc,
            "jdbc.user": pg.user,
            "jdbc.password": pg.password,
            "jdbc.schema-version": "V1",
        }
    return parse_config({"lakehouse": lh, "tables": tables_config(max(groups))})


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--groups", default="10,50", help="group sizes, comma-separated (default 10,50)")
    p.add_argument("--reps", type=int, default=7, help="measurements per variant, median reported (default 7)")
    p.add_argument("--catalogs", default="sqlite,postgresql", help="sqlite and/or postgresql (default both)")
    p.add_argument("--no-separate", action="store_true", help="skip the N separate run_wap calls")
    p.add_argument("--workdir", default="bench-data", help="data files and warehouses (default bench-data)")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--driver-memory", default="2g")
    p.add_argument("--json", action="store_true", help="also print every figure as one JSON object on the last line")
    args = p.parse_args(argv)
    args.groups = sorted({int(x) for x in args.groups.split(",") if x.strip()})
    args.catalogs = [c.strip() for c in args.catalogs.split(",") if c.strip()]
    if not args.groups or min(args.groups) < 2:
        p.error("--groups: sizes of at least 2")
    if args.reps < 1:
        p.error("--reps must be at least 1")
    if set(args.catalogs) - {"sqlite", "postgresql"}:
        p.error("--catalogs: sqlite, postgresql")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    root = Path(args.workdir).resolve() / "warehouse-groups-bench"
    if root.exists():
        shutil.rmtree(root)  # fresh catalogs: no earlier history in the timings
    batches = Batches(root / "data")
    t_start = time.perf_counter()
    rows: list[dict[str, Any]] = []
    measured: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    spark = None
    try:
        for catalog in args.catalogs:
            if catalog == "postgresql":
                from wapflow._dev.pg_server import find_bin_dir
                from wapflow.errors import EnvironmentProblem

                try:
                    find_bin_dir()
                except EnvironmentProblem as e:
                    skipped[catalog] = e.message
                    log(f"postgresql: skipped ({e.message})")
                    continue
            with local_postgres() if catalog == "postgresql" else _nothing() as pg:
                cfg = lakehouse_config(root, catalog, args.groups, args.master, args.driver_memory, pg)
                if spark is None:
                    log(f"starting Spark ({args.master}, driver memory {args.driver_memory})")
                lh = Lakehouse(cfg, spark=spark)
                spark = lh.spark
                log(f"{catalog}: groups of {', '.join(map(str, args.groups))} tables vs one, {args.reps} rep(s)")
                measured[catalog] = measure(lh, batches, args.groups, args.reps, separate=not args.no_separate)
                rows += figures(catalog, measured[catalog], args.groups)
    except BenchError as e:
        print(f"benchmark aborted: {e}", file=sys.stderr)
        return 2
    finally:
        if spark is not None:
            spark.stop()  # the session this script started: frees the cores at once
    print_table(rows)
    checks = verdicts(rows)
    print("\nSummary")
    for v in checks:
        print(
            f"  {v['status']}  group_publish ({v['catalog']})  ratio {v['ratio']:.2f}   target: a group of "
            f"{TARGET_SIZE} tables publishes in <= {TARGET}x one table's publish step"
        )
    for catalog, why in skipped.items():
        print(f"  skipped {catalog}: {why}")
    elapsed = time.perf_counter() - t_start
    print(f"  ({elapsed:.0f}s in all; {os.cpu_count()} cores)")
    if args.json:
        doc = {"reps": args.reps, "groups": args.groups, "rows": rows, "targets": checks, "runs": measured}
        print(json.dumps(doc | {"skipped": skipped, "elapsed_s": round(elapsed, 1)}))
    return 0


@contextmanager
def _nothing() -> Iterator[None]:
    yield None


if __name__ == "__main__":
    sys.exit(main())
