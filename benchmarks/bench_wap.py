"""What Write-Audit-Publish costs over a plain Iceberg append, and whether publish stays flat.

Run from the repo root:

    .venv/bin/python benchmarks/bench_wap.py [--sizes 1000000,10000000] [--workdir bench-data] [--json]

Everything is measured in ONE SparkSession so that the ratios (WAP / plain, publish at 10x / 1x)
compare like with like; absolute seconds on a small machine are noisy and matter less.
See benchmarks/README.md for how to read the output.
"""

from __future__ import annotations

import argparse
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

from wapflow.audit.spec import (
    AcceptedValuesCheck,
    BetweenCheck,
    Check,
    ExpressionCheck,
    NotNullCheck,
    RowCountCheck,
    UniqueCheck,
)
from wapflow.config import LakehouseConfig, TableConfig, WapConfig
from wapflow.demo.generate import write_trips
from wapflow.sql.identifiers import TableName, quote, sql_string
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.pipeline import RunResult, run_wap

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

NAMESPACE = "bench"
WARMUP_ROWS = 20_000
# Targets. The WAP target is defined at 10M rows, where fixed per-run costs no longer dominate.
WAP_TARGET_ROWS = 10_000_000
WAP_TARGET_RATIO = 1.05  # issue 24: WAP <= 1.05x a plain append at 10M and 100M rows
# unique(trip_id) (an integer key: 64 keys a group, one bit each, all in generated code) against the run without it.
UNIQUE_TARGET_RATIO = 1.3
# Publish is metadata-only; if it touched data, 10x the rows would cost ~10x. Anything up to
# 1.5x is "flat" within the noise of sub-second timings on a 2-core machine.
PUBLISH_FLAT_MAX = 1.5
PUBLISH_MULTIPLIER = 10
# trip_id blocks: a size file of N rows starts at N*1000+1 (disjoint for sizes >0.1% apart);
# helper files start above 10^15, beyond any size block.
_ROLE_START = {"warmup": 10**15 + 1, "pubbase": 2 * 10**15 + 1, "pubbatch": 3 * 10**15 + 1}
STEPS = ("prepare", "write", "audit", "publish")


class BenchError(RuntimeError):
    """A WAP run did not publish: the timings would be meaningless, so the benchmark stops."""


def log(msg: str) -> None:
    """Progress goes to stderr so stdout holds only results (and the JSON line with --json)."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def audit_checks() -> list[Check]:
    """The five checks of the target: row-level checks and row_count, as `wap demo` configures them."""
    return [
        NotNullCheck(check="not_null", column="passenger_count"),
        BetweenCheck(check="between", column="fare_amount", min=0, max=1000),
        AcceptedValuesCheck(check="accepted_values", column="payment_type", values=[1, 2, 3, 4, 5, 6]),
        RowCountCheck(check="row_count", min=1),
        ExpressionCheck(check="expression", sql="dropoff_at >= pickup_at"),
    ]


def unique_checks() -> list[Check]:
    """The same five with unique(trip_id) instead of the expression: unique reads the key again (an integer key
    is counted 64 values a group, one bit each; other keys are grouped, a shuffle of the key)."""
    return audit_checks()[:4] + [UniqueCheck(check="unique", columns=["trip_id"])]


# --- data files ---------------------------------------------------------------------------------


def start_id_for(role: str, rows: int) -> int:
    """Distinct trip_id ranges per file, stable across runs so files can be reused."""
    return _ROLE_START[role] if role in _ROLE_START else rows * 1000 + 1


def ensure_file(data_dir: Path, role: str, rows: int, seed: int = 42) -> Path:
    """Reuse an existing file only if it has the right row count and trip_id start; else regenerate."""
    start_id = start_id_for(role, rows)
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
    log(f"generating {path} ({rows:,} rows, trip_id from {start_id:,})")
    t0 = time.perf_counter()
    write_trips(path, rows, seed=seed, start_id=start_id)
    log(f"  generated in {time.perf_counter() - t0:.1f}s")
    return path


# --- measurements -------------------------------------------------------------------------------


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


class Bench:
    """Holds the one Lakehouse/SparkSession and the table helpers every measurement shares."""

    def __init__(self, lh: Lakehouse, checks: list[Check]) -> None:
        self.lh = lh
        self.spark: SparkSession = lh.spark
        self.tables = lh.tables
        self.checks = checks
        self.tables.ensure_namespace(TableName.parse(f"{NAMESPACE}.x"))

    def fresh_table(self, name: str, like: Path) -> TableName:
        """Create the table outside any timing, with the same properties WAP would give it."""
        t = TableName.parse(f"{NAMESPACE}.{name}")
        self.tables.drop(t)
        self.tables.create_like(t, self.spark.read.parquet(str(like)))
        return t

    def plain_append(self, table: TableName, file: Path) -> float:
        """The baseline: read the file and append it to main, nothing else."""
        ident = self.tables.ident(table)
        secs, _ = timed(lambda: self.spark.read.parquet(str(file)).writeTo(ident).append())
        return secs

    def observed_append(self, table: TableName, file: Path) -> float:
        """The plain append with Spark's observation of its row count alone: the floor of any check computed by
        the write itself (Spark's CollectMetrics runs each row outside its generated code)."""
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        ident = self.tables.ident(table)
        seen = Observation(f"bench_{table.name}")

        def go() -> int:
            self.spark.read.parquet(str(file)).observe(seen, F.count(F.lit(1)).alias("rows")).writeTo(ident).append()
            return int(seen.get["rows"])

        secs, counted = timed(go)
        committed = int(self.summary_of(table).get("total-records", "-1"))
        if counted != committed:
            raise BenchError(f"the observed append of {table.dotted} counted {counted} rows, committed {committed}")
        return secs

    def wap(
        self, table: TableName, file: Path, expect_rows: int, checks: list[Check] | None = None, *, adopt: bool = False
    ) -> tuple[float, RunResult]:
        """A full run (prepare, branch write, 5-check audit, publish); anything but published aborts. `adopt`: the
        file (its columns are the table's) is adopted as it is; otherwise Spark rewrites it, as the plain append
        does, so that the ratio is WAP's own cost on the same write."""
        use = list(self.checks if checks is None else checks)
        self.lh.config.tables[table.dotted] = TableConfig(adopt_parquet=adopt)
        secs, res = timed(lambda: run_wap(self.lh, table.dotted, [str(file)], extra_checks=use))
        result: RunResult = res
        if result.status != "published":
            raise BenchError(f"WAP run on {table.dotted} ended {result.status}: {result.message} {result.error or ''}")
        if result.rows_written != expect_rows:
            raise BenchError(f"WAP run on {table.dotted} wrote {result.rows_written} rows, expected {expect_rows}")
        return secs, result

    def main_head(self, table: TableName) -> int:
        head = self.tables.head(table, "main")
        assert head is not None
        return head

    def summary_of(self, table: TableName) -> dict[str, str]:
        """Iceberg's own totals for main (metadata only, no scan)."""
        snaps = self.tables.snapshots(table)
        return snaps[self.main_head(table)].summary

    def rollback(self, table: TableName, snapshot_id: int) -> None:
        """Put main back where it was, so every publish rep sees the same table size."""
        self.spark.sql(
            f"CALL {quote(self.tables.catalog)}.system.rollback_to_snapshot("
            f"table => {sql_string(table.dotted)}, snapshot_id => {int(snapshot_id)})"
        ).collect()


@dataclass
class SizeResult:
    rows: int
    plain_s: float
    wap_s: float
    ratio: float
    plain_runs: list[float]
    wap_runs: list[float]
    wap_steps: dict[str, float]  # median of each step over the WAP runs
    wap_step_runs: list[dict[str, float]] = field(default_factory=list)
    # The same WAP run with unique(trip_id) among the five checks.
    wap_unique_s: float = 0.0
    ratio_unique: float = 0.0
    wap_unique_runs: list[float] = field(default_factory=list)
    wap_unique_steps: dict[str, float] = field(default_factory=dict)
    # The WAP run (five checks) adopting the file as it is instead of rewriting it (wapflow's default).
    wap_adopt_s: float = 0.0
    ratio_adopt: float = 0.0
    wap_adopt_runs: list[float] = field(default_factory=list)
    wap_adopt_steps: dict[str, float] = field(default_factory=dict)
    # The plain append with Spark's observation of its row count alone: the floor of checks the write computes.
    observed_s: float = 0.0
    ratio_observed: float = 0.0
    observed_runs: list[float] = field(default_factory=list)


@dataclass
class PublishResult:
    batch_rows: int
    multiplier: int
    rows_1x: int
    rows_10x: int
    data_files_1x: int
    data_files_10x: int
    publish_1x_s: float
    publish_10x_s: float
    ratio: float
    runs_1x: list[float]
    runs_10x: list[float]
    published_via: list[str]


def measure_size(b: Bench, rows: int, file: Path, reps: int) -> SizeResult:
    """Alternate plain, wap, plain, wap on fresh tables so drift and cache warm-up hit both alike."""
    plain_runs: list[float] = []
    wap_runs: list[float] = []
    step_runs: list[dict[str, float]] = []
    uniq_runs: list[float] = []
    uniq_steps: list[dict[str, float]] = []
    adopt_runs: list[float] = []
    adopt_steps: list[dict[str, float]] = []
    observed_runs: list[float] = []
    for rep in range(reps):
        t = b.fresh_table(f"plain_{rows}_r{rep}", file)
        secs = b.plain_append(t, file)
        plain_runs.append(secs)
        log(f"  {rows:>12,} rows  rep {rep + 1}/{reps}  plain {secs:7.2f}s")
        b.tables.drop(t)

        t = b.fresh_table(f"observed_{rows}_r{rep}", file)
        secs = b.observed_append(t, file)
        observed_runs.append(secs)
        log(f"  {rows:>12,} rows  rep {rep + 1}/{reps}  plain, its rows observed {secs:7.2f}s")
        b.tables.drop(t)

        t = b.fresh_table(f"wap_{rows}_r{rep}", file)
        secs, res = b.wap(t, file, rows)
        wap_runs.append(secs)
        step_runs.append(dict(res.timings))
        steps = "  ".join(f"{k} {res.timings.get(k, 0.0):.2f}" for k in STEPS)
        log(f"  {rows:>12,} rows  rep {rep + 1}/{reps}  wap   {secs:7.2f}s  ({steps})")
        b.tables.drop(t)

        t = b.fresh_table(f"wapu_{rows}_r{rep}", file)
        secs, res = b.wap(t, file, rows, unique_checks())
        uniq_runs.append(secs)
        uniq_steps.append(dict(res.timings))
        steps = "  ".join(f"{k} {res.timings.get(k, 0.0):.2f}" for k in STEPS)
        log(f"  {rows:>12,} rows  rep {rep + 1}/{reps}  wap+unique {secs:7.2f}s  ({steps})")
        b.tables.drop(t)

        t = b.fresh_table(f"wapa_{rows}_r{rep}", file)
        secs, res = b.wap(t, file, rows, adopt=True)
        adopt_runs.append(secs)
        adopt_steps.append(dict(res.timings))
        steps = "  ".join(f"{k} {res.timings.get(k, 0.0):.2f}" for k in STEPS)
        log(f"  {rows:>12,} rows  rep {rep + 1}/{reps}  wap adopted {secs:7.2f}s  ({steps})")
        b.tables.drop(t)
    plain, wap = statistics.median(plain_runs), statistics.median(wap_runs)
    wapu = statistics.median(uniq_runs)
    wapa = statistics.median(adopt_runs)
    observed = statistics.median(observed_runs)
    steps_med = {k: round(statistics.median(r.get(k, 0.0) for r in step_runs), 3) for k in STEPS}
    return SizeResult(
        rows=rows,
        plain_s=round(plain, 3),
        wap_s=round(wap, 3),
        ratio=round(wap / plain, 3),
        plain_runs=[round(x, 3) for x in plain_runs],
        wap_runs=[round(x, 3) for x in wap_runs],
        wap_steps=steps_med,
        wap_step_runs=step_runs,
        wap_unique_s=round(wapu, 3),
        ratio_unique=round(wapu / plain, 3),
        wap_unique_runs=[round(x, 3) for x in uniq_runs],
        wap_unique_steps={k: round(statistics.median(r.get(k, 0.0) for r in uniq_steps), 3) for k in STEPS},
        wap_adopt_s=round(wapa, 3),
        ratio_adopt=round(wapa / plain, 3),
        wap_adopt_runs=[round(x, 3) for x in adopt_runs],
        wap_adopt_steps={k: round(statistics.median(r.get(k, 0.0) for r in adopt_steps), 3) for k in STEPS},
        observed_s=round(observed, 3),
        ratio_observed=round(observed / plain, 3),
        observed_runs=[round(x, 3) for x in observed_runs],
    )


def measure_publish(b: Bench, base: Path, batch: Path, batch_rows: int, reps: int) -> PublishResult:
    """Publish the same B-row batch onto tables holding 1xB and 10xB rows; main is rolled back after each."""
    small = b.fresh_table("publish_1x", base)
    big = b.fresh_table("publish_10x", base)
    log(
        f"building {small.dotted} (1 x {batch_rows:,} rows) and {big.dotted} ({PUBLISH_MULTIPLIER} x) with plain appends"
    )
    b.plain_append(small, base)
    for _ in range(PUBLISH_MULTIPLIER):
        b.plain_append(big, base)
    heads = {small: b.main_head(small), big: b.main_head(big)}
    sums = {small: b.summary_of(small), big: b.summary_of(big)}
    runs: dict[TableName, list[float]] = {small: [], big: []}
    via: list[str] = []
    for rep in range(reps):
        for t in (small, big):
            _, res = b.wap(t, batch, batch_rows)
            pub = res.timings.get("publish", float("nan"))
            runs[t].append(pub)
            via.append(res.published_via or "?")
            label = "1x " if t == small else f"{PUBLISH_MULTIPLIER}x"
            log(f"  publish onto {label} rep {rep + 1}/{reps}: {pub:.3f}s ({res.published_via})")
            b.rollback(t, heads[t])
    p1, p10 = statistics.median(runs[small]), statistics.median(runs[big])
    out = PublishResult(
        batch_rows=batch_rows,
        multiplier=PUBLISH_MULTIPLIER,
        rows_1x=int(sums[small].get("total-records", "0")),
        rows_10x=int(sums[big].get("total-records", "0")),
        data_files_1x=int(sums[small].get("total-data-files", "0")),
        data_files_10x=int(sums[big].get("total-data-files", "0")),
        publish_1x_s=round(p1, 3),
        publish_10x_s=round(p10, 3),
        ratio=round(p10 / p1, 3) if p1 > 0 else float("inf"),
        runs_1x=[round(x, 3) for x in runs[small]],
        runs_10x=[round(x, 3) for x in runs[big]],
        published_via=sorted(set(via)),
    )
    b.tables.drop(small)
    b.tables.drop(big)
    return out


def warm_up(b: Bench, file: Path) -> None:
    """JIT, class loading and the catalog connection would otherwise be billed to the first measurement."""
    log(f"warming up on {WARMUP_ROWS:,} rows (not reported)")
    for _ in range(2):
        t = b.fresh_table("warmup_plain", file)
        b.plain_append(t, file)
        b.tables.drop(t)
        t = b.fresh_table("warmup_wap", file)
        b.wap(t, file, WARMUP_ROWS)
        b.tables.drop(t)


# --- report -------------------------------------------------------------------------------------


def verdicts(sizes: list[SizeResult], pub: PublishResult | None) -> dict[str, dict[str, Any]]:
    """PASS/MISS per target; below 10M rows the WAP verdict is marked indicative (fixed costs dominate)."""
    out: dict[str, dict[str, Any]] = {}
    if sizes:
        at = next((s for s in sizes if s.rows == WAP_TARGET_ROWS), None)
        indicative = at is None
        if at is None:
            at = max(sizes, key=lambda s: s.rows)
        out["wap_overhead"] = {
            "target": f"WAP <= {WAP_TARGET_RATIO}x plain at {WAP_TARGET_ROWS:,} rows",
            "measured_rows": at.rows,
            "ratio": at.ratio,
            "status": "PASS" if at.ratio <= WAP_TARGET_RATIO else "MISS",
            "indicative": indicative,
        }
        unique_cost = round(at.wap_unique_s / at.wap_s, 3) if at.wap_s else 0.0
        out["unique_cost"] = {
            "target": f"WAP with unique(trip_id) <= {UNIQUE_TARGET_RATIO}x WAP without it at {WAP_TARGET_ROWS:,} rows",
            "measured_rows": at.rows,
            "ratio": unique_cost,
            "status": "PASS" if unique_cost <= UNIQUE_TARGET_RATIO else "MISS",
            "indicative": indicative,
        }
    if pub is not None:
        out["publish_flat"] = {
            "target": f"publish at {PUBLISH_MULTIPLIER}x / 1x ~ 1 (<= {PUBLISH_FLAT_MAX})",
            "batch_rows": pub.batch_rows,
            "ratio": pub.ratio,
            "status": "PASS" if pub.ratio <= PUBLISH_FLAT_MAX else "MISS",
            "indicative": False,
        }
    return out


def print_report(sizes: list[SizeResult], pub: PublishResult | None, targets: dict[str, dict[str, Any]]) -> None:
    if sizes:
        print("\nWAP vs plain Iceberg append (median seconds; 5 checks in the audit)")
        print("  wap:        not_null, between, accepted_values, row_count, expression")
        print("  wap+unique: not_null, between, accepted_values, row_count, unique(trip_id)")
        print("  adopted:    wap's checks, the file adopted as it is (wapflow's default; the rows above are rewritten)")
        print("  observed:   no WAP: the plain append with Spark's observation of its row count alone, the floor of")
        print("              any check the write computes (the expression check is one; the other four are settled")
        print("              from the files' Iceberg metrics)")
        print(
            f"{'rows':>12}  {'plain':>8}  {'variant':>10}  {'seconds':>8}  {'ratio':>7}   "
            + "  ".join(f"{k:>8}" for k in STEPS)
        )
        for s in sizes:
            for label, secs, ratio, st in (
                ("observed", s.observed_s, s.ratio_observed, {}),
                ("wap", s.wap_s, s.ratio, s.wap_steps),
                ("wap+unique", s.wap_unique_s, s.ratio_unique, s.wap_unique_steps),
                ("adopted", s.wap_adopt_s, s.ratio_adopt, s.wap_adopt_steps),
            ):
                steps = "  ".join(f"{st[k]:8.2f}" if k in st else f"{'':>8}" for k in STEPS)
                print(f"{s.rows:>12,}  {s.plain_s:8.2f}  {label:>10}  {secs:8.2f}  {ratio:6.2f}x   {steps}")
        print(
            "  runs (s): "
            + "; ".join(
                f"{s.rows:,}: plain {s.plain_runs} observed {s.observed_runs} wap {s.wap_runs} "
                f"wap+unique {s.wap_unique_runs} adopted {s.wap_adopt_runs}"
                for s in sizes
            )
        )
    if pub is not None:
        print(f"\nPublish step (metadata-only) for a {pub.batch_rows:,}-row batch, median seconds")
        print(
            f"  table at 1x  ({pub.rows_1x:>12,} rows, {pub.data_files_1x:>4} data files): {pub.publish_1x_s:6.3f}s  runs {pub.runs_1x}"
        )
        print(
            f"  table at {pub.multiplier}x ({pub.rows_10x:>12,} rows, {pub.data_files_10x:>4} data files): {pub.publish_10x_s:6.3f}s  runs {pub.runs_10x}"
        )
        print(f"  ratio {pub.multiplier}x / 1x: {pub.ratio:.2f}  (published via {', '.join(pub.published_via)})")
    print("\nSummary")
    for key, v in targets.items():
        note = ""
        if v["indicative"]:
            note = f"  (indicative only: measured at {v['measured_rows']:,} rows, target is defined at {WAP_TARGET_ROWS:,})"
        print(f"  {v['status']:<4}  {key:<24} ratio {v['ratio']:.2f}   target: {v['target']}{note}")


# --- main ---------------------------------------------------------------------------------------


def parse_rows(text: str) -> list[int]:
    """Accept 1000000, 1_000_000 or 1e6 in a comma-separated list."""
    out = []
    for part in text.split(","):
        part = part.strip().replace("_", "")
        if not part:
            continue
        n = int(float(part)) if any(c in part for c in "eE.") else int(part)
        if n < 1:
            raise argparse.ArgumentTypeError(f"row counts must be >= 1 (got {part})")
        out.append(n)
    return out


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument(
        "--sizes",
        type=parse_rows,
        default=parse_rows("1000000,10000000"),
        help="batch sizes in rows (default 1000000,10000000)",
    )
    p.add_argument(
        "--workdir", default="bench-data", help="data files (reused) and a fresh warehouse (default bench-data)"
    )
    p.add_argument(
        "--publish-batch",
        type=lambda s: parse_rows(s)[0],
        default=1_000_000,
        help="batch size B for the publish test (default 1000000)",
    )
    p.add_argument(
        "--reps", type=int, default=2, help="measurements per size and path, median reported (default 2, min 2)"
    )
    p.add_argument("--publish-reps", type=int, default=3, help="publish measurements per table size (default 3)")
    p.add_argument("--skip-publish", action="store_true", help="skip the publish-flatness test")
    p.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    p.add_argument("--driver-memory", default="4g", help="Spark driver memory (default 4g)")
    p.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting (repeatable), e.g. spark.executor.memory=2g",
    )
    p.add_argument("--json", action="store_true", help="also print all results as one JSON object on the last line")
    p.add_argument("--verbose", action="store_true", help="show wapflow's own progress messages")
    args = p.parse_args(argv)
    if args.reps < 2:
        p.error("--reps must be at least 2")
    if args.publish_reps < 1:
        p.error("--publish-reps must be at least 1")
    if any("=" not in c for c in args.conf):
        p.error("--conf takes KEY=VALUE")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = Path(args.workdir).resolve()
    data_dir, warehouse = workdir / "data", workdir / "warehouse"
    if warehouse.exists():
        shutil.rmtree(warehouse)  # every run starts from an empty catalog: no history skews the timings
    warehouse.mkdir(parents=True)

    sizes = sorted(set(args.sizes))
    files = {n: ensure_file(data_dir, "size", n) for n in sizes}
    warm = ensure_file(data_dir, "warmup", WARMUP_ROWS)
    pub_files = None
    if not args.skip_publish:
        pub_files = (
            ensure_file(data_dir, "pubbase", args.publish_batch),
            ensure_file(data_dir, "pubbatch", args.publish_batch),
        )

    spark_conf: dict[str, str | int | float | bool] = dict(c.split("=", 1) for c in args.conf)
    cfg = WapConfig(
        lakehouse=LakehouseConfig(
            warehouse=str(warehouse), master=args.master, driver_memory=args.driver_memory, spark_conf=spark_conf
        )
    )
    lh = Lakehouse(cfg, progress=(lambda m: log(f"    wap: {m}")) if args.verbose else None)
    log(f"starting Spark ({args.master}, driver memory {args.driver_memory}); warehouse {warehouse}")
    t_start = time.perf_counter()
    size_results: list[SizeResult] = []
    pub_result: PublishResult | None = None
    bench: Bench | None = None
    try:
        bench = Bench(lh, audit_checks())
        warm_up(bench, warm)
        for n in sizes:
            log(f"measuring {n:,} rows ({args.reps} reps each, alternating plain / wap)")
            size_results.append(measure_size(bench, n, files[n], args.reps))
        if pub_files is not None:
            log(f"measuring publish with a {args.publish_batch:,}-row batch ({args.publish_reps} reps per table size)")
            pub_result = measure_publish(bench, pub_files[0], pub_files[1], args.publish_batch, args.publish_reps)
    except BenchError as e:
        print(f"benchmark aborted: {e}", file=sys.stderr)
        return 2
    finally:
        if bench is not None:
            bench.spark.stop()  # the session this script started; frees the 2 cores at once
    elapsed = time.perf_counter() - t_start

    targets = verdicts(size_results, pub_result)
    print_report(size_results, pub_result, targets)
    print(f"  (benchmark took {elapsed:.0f}s on {os.cpu_count()} cores, master {args.master})")
    if args.json:
        doc = {
            "machine": {
                "cpu_count": os.cpu_count(),
                "master": args.master,
                "driver_memory": args.driver_memory,
                "spark_conf": spark_conf,
            },
            "reps": args.reps,
            "publish_reps": args.publish_reps,
            "sizes": [asdict(s) for s in size_results],
            "publish": asdict(pub_result) if pub_result is not None else None,
            "targets": targets,
            "elapsed_s": round(elapsed, 1),
        }
        print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
