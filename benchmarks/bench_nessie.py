"""Branch-create and publish latency: Nessie catalog branches vs Iceberg table branches (issue 4).

Run from the repo root:

    .venv/bin/python benchmarks/bench_nessie.py [--reps 5] [--workdir bench-data] [--json]

In ONE process with ONE SparkSession: a local Nessie server (wapflow's NessieServer) and two
Lakehouses on that session, one on the embedded SQLite catalog (Iceberg table-level branches) and
one with catalog = "nessie" (catalog-level branches). For a catalog of 1 and of 50 tables it times
(a) creating a branch for a target table and (b) publishing a branch holding one appended batch,
and it checks that publishing is zero-copy: a 1,000,000-row batch publishes as fast as a 1,000-row
one. See benchmarks/README.md for what exactly is timed and how to read the output.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq

from wapflow.config import LakehouseConfig, WapConfig
from wapflow.demo.generate import write_trips
from wapflow.sql.identifiers import TableName, quote
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow._dev.nessie_server import NessieServer
from wapflow._dev.nessie_server import status as server_status
from wapflow.pipeline import RunResult, run_wap

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

NAMESPACE = "bench"
BACKENDS = ("iceberg", "nessie")
SEED_ROWS = 100  # rows in every catalog table
SMALL_ROWS = 1_000  # the batch published in the catalog-size test, and the small zero-copy batch
DEFAULT_BIG_ROWS = 1_000_000
DEFAULT_TABLES = (1, 50)
# Sub-second metadata operations on a 2-core machine: anything up to 1.5x counts as flat. A cost
# proportional to the table count would give ~50x, one proportional to the data ~1000x.
FLAT_MAX = 1.5
# Every file gets its own trip_id block, stable across runs, so a file can be reused.
_ROLE_START = {"nseed": 5 * 10**15 + 1, "nbatch": 6 * 10**15 + 1}
_names = itertools.count()


class BenchError(RuntimeError):
    """A run did not publish (or not the expected way): its timings would be meaningless."""


def log(msg: str) -> None:
    """Progress goes to stderr so stdout holds only results (and the JSON line with --json)."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def med(xs: list[float]) -> float:
    return round(statistics.median(xs), 4)


def ratio(a: float, b: float) -> float:
    return round(a / b, 3) if b > 0 else float("inf")


def ensure_file(data_dir: Path, role: str, rows: int, seed: int = 7) -> Path:
    """Reuse an existing file only if it has the right row count and trip_id start; else regenerate."""
    start_id = _ROLE_START[role]
    path = data_dir / f"trips_{role}_{rows}.parquet"
    if path.is_file():
        try:
            md = pq.ParquetFile(path).metadata
            stats = md.row_group(0).column(0).statistics if md.num_row_groups else None
            if md.num_rows == rows and stats is not None and stats.has_min_max and stats.min == start_id:
                log(f"reusing {path} ({rows:,} rows)")
                return path
        except Exception as e:  # noqa: BLE001 - an unreadable leftover is simply regenerated
            log(f"regenerating unreadable {path}: {e}")
    log(f"generating {path} ({rows:,} rows)")
    write_trips(path, rows, seed=seed, start_id=start_id)
    return path


# --- one backend ------------------------------------------------------------------------------


class Side:
    """One Lakehouse (one catalog, one branch backend) on the shared SparkSession."""

    def __init__(self, name: str, lh: Lakehouse) -> None:
        self.name = name
        self.lh = lh
        self.spark: SparkSession = lh.spark
        self.tables = lh.tables
        self.branches = lh.iceberg
        self.tables.ensure_namespace(TableName.parse(f"{NAMESPACE}.x"))

    def create_table(self, name: str, seed: "DataFrame") -> TableName:
        """A small table on main: one CTAS commit (format v2, WAP enabled, as wapflow creates tables)."""
        t = TableName.parse(f"{NAMESPACE}.{name}")
        (
            seed.writeTo(self.tables.ident(t))
            .using("iceberg")
            .tableProperty("format-version", "2")
            .tableProperty("write.wap.enabled", "true")
            .create()
        )
        return t

    def count_tables(self) -> int:
        return len(self.spark.sql(f"SHOW TABLES IN {quote(self.tables.catalog)}.{quote(NAMESPACE)}").collect())

    def time_create(self, table: TableName) -> float:
        """The backend's create() on a fresh branch name, as run_wap calls it; the branch is then dropped."""
        branch = f"bench_c{next(_names)}"
        secs, _ = timed(lambda: self.branches.create(table, branch))
        self.branches.drop(table, branch)
        return secs

    def time_ref_create(self, table: TableName) -> float:
        """Only the operation that creates the ref: one ALTER TABLE ... CREATE BRANCH, or one Nessie POST."""
        branch = f"bench_r{next(_names)}"
        if self.name == "iceberg":
            sql = f"ALTER TABLE {self.tables.ident(table)} CREATE BRANCH {quote(branch)}"
            secs, _ = timed(lambda: self.spark.sql(sql))
        else:
            client = self.lh.nessie
            main = client.get_reference("main")
            assert main is not None
            secs, _ = timed(lambda: client.create_branch(branch, from_hash=main.hash))
        self.branches.drop(table, branch)
        return secs

    def run(self, table: TableName, file: Path, rows: int) -> RunResult:
        """A full run_wap (no checks); anything but a normal publish aborts the benchmark."""
        res = run_wap(self.lh, table.dotted, [str(file)], no_checks=True)
        want = "fast_forward" if self.name == "iceberg" else "merge"
        if res.status != "published" or res.published_via != want:
            raise BenchError(
                f"{self.name}: run on {table.dotted} ended {res.status} via {res.published_via} "
                f"(expected published via {want}): {res.message} {res.error or ''}"
            )
        if res.rows_written != rows:
            raise BenchError(f"{self.name}: run on {table.dotted} wrote {res.rows_written} rows, expected {rows}")
        return res


# --- measurements -----------------------------------------------------------------------------


@dataclass
class SizeResult:
    backend: str
    tables: int  # tables in the catalog while measuring
    create_s: float
    ref_create_s: float
    publish_s: float
    create_runs: list[float]
    ref_create_runs: list[float]
    publish_runs: list[float]
    run_total_runs: list[float] = field(default_factory=list)  # wall time of each whole run_wap


@dataclass
class ZeroCopyResult:
    backend: str
    small_rows: int
    big_rows: int
    publish_small_s: float
    publish_big_s: float
    ratio: float
    small_runs: list[float]
    big_runs: list[float]
    write_small_s: float  # median of RunResult.timings["write"], for contrast: this one does grow
    write_big_s: float


def order(rep: int, sides: list[Side]) -> list[Side]:
    """Alternate which backend goes first, so drift hits both alike."""
    return sides if rep % 2 == 0 else sides[::-1]


def warm_up(sides: list[Side], seed: "DataFrame", small: Path) -> None:
    """Class loading, JIT and the first REST/JDBC connections are not billed to any measurement."""
    log("warming up (not reported): 2 creates and 2 runs per backend on a throwaway table")
    for s in sides:
        t = s.create_table("warmup", seed)
        for _ in range(2):
            s.time_create(t)
            s.time_ref_create(t)
            s.run(t, small, SMALL_ROWS)
        # No PURGE: Nessie tables have gc.enabled=false (files may be shared with other branches);
        # the files stay in the warehouse, which the next run deletes anyway.
        s.spark.sql(f"DROP TABLE IF EXISTS {s.tables.ident(t)}")


def measure_size(sides: list[Side], targets: dict[str, TableName], n: int, small: Path, reps: int) -> list[SizeResult]:
    runs: dict[str, dict[str, list[float]]] = {s.name: {"c": [], "r": [], "p": [], "t": []} for s in sides}
    for rep in range(reps):
        for s in order(rep, sides):
            t = targets[s.name]
            c = s.time_create(t)
            r = s.time_ref_create(t)
            total, res = timed(lambda: s.run(t, small, SMALL_ROWS))
            p = res.timings["publish"]
            d = runs[s.name]
            d["c"].append(round(c, 4))
            d["r"].append(round(r, 4))
            d["p"].append(p)
            d["t"].append(round(total, 3))
            log(
                f"  {s.name:<7} {n:>3} tables  rep {rep + 1}/{reps}: create {c:.3f}s  ref-only {r:.3f}s  publish {p:.3f}s  (run {total:.2f}s)"
            )
    return [
        SizeResult(
            backend=name,
            tables=n,
            create_s=med(d["c"]),
            ref_create_s=med(d["r"]),
            publish_s=med(d["p"]),
            create_runs=d["c"],
            ref_create_runs=d["r"],
            publish_runs=d["p"],
            run_total_runs=d["t"],
        )
        for name, d in runs.items()
    ]


def measure_zero_copy(
    sides: list[Side], seed: "DataFrame", small: Path, big: Path, big_rows: int, reps: int
) -> list[ZeroCopyResult]:
    """Small and big batches go to two tables of identical history, alternating, so both see the same
    number of earlier snapshots; only the batch size differs."""
    tabs = {s.name: (s.create_table("zc_small", seed), s.create_table("zc_big", seed)) for s in sides}
    acc: dict[str, dict[str, list[float]]] = {s.name: {"ps": [], "pb": [], "ws": [], "wb": []} for s in sides}
    for rep in range(reps):
        for s in order(rep, sides):
            ts, tb = tabs[s.name]
            rs = s.run(ts, small, SMALL_ROWS)
            rb = s.run(tb, big, big_rows)
            a = acc[s.name]
            a["ps"].append(rs.timings["publish"])
            a["pb"].append(rb.timings["publish"])
            a["ws"].append(rs.timings["write"])
            a["wb"].append(rb.timings["write"])
            log(
                f"  {s.name:<7} rep {rep + 1}/{reps}: publish {SMALL_ROWS:,} rows {rs.timings['publish']:.3f}s, "
                f"{big_rows:,} rows {rb.timings['publish']:.3f}s  (write {rs.timings['write']:.2f}s / {rb.timings['write']:.2f}s)"
            )
    out = []
    for name, a in acc.items():
        ps, pb = med(a["ps"]), med(a["pb"])
        out.append(
            ZeroCopyResult(
                backend=name,
                small_rows=SMALL_ROWS,
                big_rows=big_rows,
                publish_small_s=ps,
                publish_big_s=pb,
                ratio=ratio(pb, ps),
                small_runs=a["ps"],
                big_runs=a["pb"],
                write_small_s=med(a["ws"]),
                write_big_s=med(a["wb"]),
            )
        )
    return out


# --- report -----------------------------------------------------------------------------------


def derived(sizes: list[SizeResult], zc: list[ZeroCopyResult], counts: list[int]) -> dict[str, Any]:
    by = {(s.backend, s.tables): s for s in sizes}
    lo, hi = min(counts), max(counts)
    out: dict[str, Any] = {"growth": {}, "nessie_vs_iceberg": {}, "zero_copy": {z.backend: z.ratio for z in zc}}
    if hi != lo:
        for b in BACKENDS:
            a, z = by[(b, lo)], by[(b, hi)]
            out["growth"][b] = {
                "create": ratio(z.create_s, a.create_s),
                "ref_create": ratio(z.ref_create_s, a.ref_create_s),
                "publish": ratio(z.publish_s, a.publish_s),
            }
    for n in counts:
        i, ne = by[("iceberg", n)], by[("nessie", n)]
        out["nessie_vs_iceberg"][str(n)] = {
            "create": ratio(ne.create_s, i.create_s),
            "ref_create": ratio(ne.ref_create_s, i.ref_create_s),
            "publish": ratio(ne.publish_s, i.publish_s),
        }
    zby = {z.backend: z for z in zc}
    if len(zby) == 2:
        out["nessie_vs_iceberg"]["zero_copy_big_publish"] = ratio(
            zby["nessie"].publish_big_s, zby["iceberg"].publish_big_s
        )
    targets: dict[str, dict[str, Any]] = {}
    for b, g in out["growth"].items():
        for what in ("create", "publish"):
            targets[f"{b}_{what}_{hi}v{lo}"] = {
                "target": f"{what} with {hi} tables / {lo} table <= {FLAT_MAX}",
                "ratio": g[what],
                "status": "PASS" if g[what] <= FLAT_MAX else "MISS",
            }
    for z in zc:
        targets[f"{z.backend}_zero_copy"] = {
            "target": f"publish of {z.big_rows:,} rows / {z.small_rows:,} rows <= {FLAT_MAX}",
            "ratio": z.ratio,
            "status": "PASS" if z.ratio <= FLAT_MAX else "MISS",
        }
    out["targets"] = targets
    return out


def print_report(
    sizes: list[SizeResult], zc: list[ZeroCopyResult], d: dict[str, Any], counts: list[int], reps: int
) -> None:
    print(f"\nBranch create + publish latency, median of {reps} reps (seconds)")
    print("  create   = backend.create(table, branch) on a fresh branch (what run_wap calls)")
    print("  ref-only = just the ref: ALTER TABLE ... CREATE BRANCH, or one Nessie POST /trees")
    print(f"  publish  = RunResult.timings['publish'] of a run_wap appending {SMALL_ROWS:,} rows (no checks)")
    print(f"  {'backend':<9} {'tables':>6}  {'create':>8}  {'ref-only':>8}  {'publish':>8}")
    for b in BACKENDS:
        for s in sorted((s for s in sizes if s.backend == b), key=lambda s: s.tables):
            print(f"  {b:<9} {s.tables:>6}  {s.create_s:8.3f}  {s.ref_create_s:8.3f}  {s.publish_s:8.3f}")
    for s in sizes:
        print(
            f"  runs {s.backend} {s.tables}: create {s.create_runs} ref-only {s.ref_create_runs} publish {s.publish_runs}"
        )
    lo, hi = min(counts), max(counts)
    if d["growth"]:
        print(f"\nRatio {hi} tables / {lo} table (~1 = independent of catalog size)")
        for b, g in d["growth"].items():
            print(f"  {b:<9} create {g['create']:5.2f}   ref-only {g['ref_create']:5.2f}   publish {g['publish']:5.2f}")
    if zc:
        print("\nZero-copy: publish of a big vs a small batch, median seconds (~1 = cost independent of data size)")
        print(
            f"  {'backend':<9} {zc[0].small_rows:>12,}  {zc[0].big_rows:>12,}  {'ratio':>6}   (write step, for contrast)"
        )
        for z in zc:
            print(
                f"  {z.backend:<9} {z.publish_small_s:12.3f}  {z.publish_big_s:12.3f}  {z.ratio:6.2f}   "
                f"({z.write_small_s:.2f}s vs {z.write_big_s:.2f}s)"
            )
        for z in zc:
            print(f"  runs {z.backend}: small {z.small_runs} big {z.big_runs}")
    print("\nNessie / Iceberg (median vs median)")
    for key, v in d["nessie_vs_iceberg"].items():
        if isinstance(v, dict):
            print(
                f"  {key:>3} table(s): create {v['create']:5.2f}   ref-only {v['ref_create']:5.2f}   publish {v['publish']:5.2f}"
            )
        else:
            print(f"  publish of the big zero-copy batch: {v:5.2f}")
    print("\nSummary")
    for key, v in d["targets"].items():
        print(f"  {v['status']:<4}  {key:<24} ratio {v['ratio']:.2f}   target: {v['target']}")


# --- main -------------------------------------------------------------------------------------


def parse_counts(text: str) -> list[int]:
    out = sorted({int(p) for p in text.split(",") if p.strip()})
    if not out or out[0] < 1:
        raise argparse.ArgumentTypeError("table counts must be >= 1")
    return out


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--reps", type=int, default=5, help="measurements per point, median reported (default 5)")
    p.add_argument(
        "--workdir",
        default="bench-data",
        help="data files (reused), warehouses and the Nessie store (default bench-data)",
    )
    p.add_argument("--tables", type=parse_counts, default=list(DEFAULT_TABLES), help="catalog sizes (default 1,50)")
    p.add_argument(
        "--big-rows",
        type=lambda s: int(float(s.replace("_", ""))),
        default=DEFAULT_BIG_ROWS,
        help="big zero-copy batch (default 1000000)",
    )
    p.add_argument("--skip-zero-copy", action="store_true", help="skip the 1K vs big-batch publish test")
    p.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    p.add_argument("--driver-memory", default="2g", help="Spark driver memory (default 2g)")
    p.add_argument("--json", action="store_true", help="also print all results as one JSON object on the last line")
    p.add_argument("--verbose", action="store_true", help="show wapflow's own progress messages")
    args = p.parse_args(argv)
    if args.reps < 1:
        p.error("--reps must be at least 1")
    if args.big_rows < 1:
        p.error("--big-rows must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = Path(args.workdir).resolve()
    data_dir, root = workdir / "data", workdir / "warehouse-nessie-bench"
    server_dir = root / "nessie-server"
    running = server_status(server_dir)
    if running["running"]:
        print(
            f"a Nessie server (pid {running['pid']}) still uses {server_dir}; stop it first (wap nessie down)",
            file=sys.stderr,
        )
        return 2
    if root.exists():
        shutil.rmtree(root)  # fresh catalogs and a fresh Nessie repository: no earlier history in the timings
    root.mkdir(parents=True)

    seed_file = ensure_file(data_dir, "nseed", SEED_ROWS)
    small = ensure_file(data_dir, "nbatch", SMALL_ROWS)
    big = None if args.skip_zero_copy else ensure_file(data_dir, "nbatch", args.big_rows)
    progress = (lambda m: log(f"    wap: {m}")) if args.verbose else None

    t_start = time.perf_counter()
    server = NessieServer(server_dir, progress=log)
    spark: SparkSession | None = None
    sizes: list[SizeResult] = []
    zc: list[ZeroCopyResult] = []
    try:
        log(f"starting the Nessie server ({server_dir})")
        server.start()
        log(f"  Nessie up at {server.url} in {server.started_in:.1f}s")
        ice_cfg = WapConfig(
            lakehouse=LakehouseConfig(
                warehouse=str(root / "iceberg"),
                catalog_name="bench_ice",
                master=args.master,
                driver_memory=args.driver_memory,
            )
        )
        nes_cfg = WapConfig(
            lakehouse=LakehouseConfig(
                warehouse=str(root / "nessie"),
                catalog="nessie",
                catalog_name="bench_nes",
                nessie_uri=server.url,
                master=args.master,
                driver_memory=args.driver_memory,
            )
        )
        log(f"starting Spark ({args.master}, driver memory {args.driver_memory})")
        ice_lh = Lakehouse(ice_cfg, progress=progress)
        spark = ice_lh.spark
        nes_lh = Lakehouse(nes_cfg, spark=spark, progress=progress)
        sides = [Side("iceberg", ice_lh), Side("nessie", nes_lh)]
        seed = spark.read.parquet(str(seed_file)).cache()
        seed.count()

        warm_up(sides, seed, small)
        counts = list(args.tables)
        have = 0
        for n in counts:
            log(f"growing each catalog to {n} table(s) ({SEED_ROWS} rows each, one CTAS commit per table)")
            t0 = time.perf_counter()
            targets: dict[str, TableName] = {}
            for s in sides:
                # The last table created is this size's target: same state (100 rows, 1 snapshot) at every size.
                for i in range(have, n):
                    t = s.create_table(f"t{i:03d}", seed)
                targets[s.name] = t
                got = s.count_tables()
                if got != n:
                    raise BenchError(f"{s.name}: catalog holds {got} tables, expected {n}")
            have = n
            log(
                f"  done in {time.perf_counter() - t0:.1f}s; measuring on {targets['iceberg'].dotted} ({args.reps} reps)"
            )
            sizes += measure_size(sides, targets, n, small, args.reps)
        if big is not None:
            log(f"zero-copy: publishing {SMALL_ROWS:,} vs {args.big_rows:,} rows ({args.reps} reps per backend)")
            zc = measure_zero_copy(sides, seed, small, big, args.big_rows, args.reps)
    except BenchError as e:
        print(f"benchmark aborted: {e}", file=sys.stderr)
        return 2
    finally:
        if spark is not None:
            spark.stop()  # the session this script started; frees the 2 cores at once
        server.stop()
        log("Spark and the Nessie server stopped")
    elapsed = time.perf_counter() - t_start

    d = derived(sizes, zc, counts)
    print_report(sizes, zc, d, counts, args.reps)
    print(
        f"  (benchmark took {elapsed:.0f}s on {os.cpu_count()} cores, master {args.master}; Nessie started in {server.started_in:.1f}s)"
    )
    if args.json:
        doc = {
            "machine": {"cpu_count": os.cpu_count(), "master": args.master, "driver_memory": args.driver_memory},
            "reps": args.reps,
            "table_counts": counts,
            "seed_rows": SEED_ROWS,
            "batch_rows": SMALL_ROWS,
            "sizes": [asdict(s) for s in sizes],
            "zero_copy": [asdict(z) for z in zc],
            "growth": d["growth"],
            "nessie_vs_iceberg": d["nessie_vs_iceberg"],
            "targets": d["targets"],
            "nessie_startup_s": round(server.started_in or 0.0, 1),
            "elapsed_s": round(elapsed, 1),
        }
        print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
