"""wapflow's own tables after a year: the run store, the ledger and the metric history queries every run and
every `wap` listing makes, timed on a young store and on one holding --runs runs (default 10,000) of --tables
tables, side by side in one process. No JVM. The target (issue 60): each query within 1.2x, or within a few
milliseconds, of its time on the young store.

Run from the repo root:

    .venv/bin/python benchmarks/bench_store.py [--runs 10000] [--young 100] [--tables 20] [--json]

Each store is a fresh SQLite file made by wapflow's own migrations; every run records the checks, files and
metrics a real audited run records (30 metrics, a file id, two checks), and each source's ledger a row per file.
A query is timed as the median of --repeat calls.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from wapflow.runs.ledger import Ledger
from wapflow.runs.metrics import MetricHistory
from wapflow.runs.store import RunRecord, RunStore
from wapflow.storage.files import FileIdentity

T0 = datetime(2026, 1, 1, tzinfo=UTC)
METRICS = [("row_count", "")] + [(m, f"c{i}") for i in range(7) for m in ("null_fraction", "min", "max", "mean")]
CHECKS = [
    {"name": "not_null(c0)", "check": "not_null", "status": "passed", "observed": 0, "failing_rows": 0},
    {"name": "anomaly(row_count)", "check": "anomaly", "status": "passed", "observed": {"value": 100.0}},
]
TARGET = 1.2
FLOOR_MS = 5.0  # a query this fast at both sizes is flat whatever its ratio (a millisecond is noise here)


def _file(table: int, i: int) -> dict[str, Any]:
    return {"uri": f"/landing/t{table:02d}/part-{i:06d}.parquet", "size": 1000 + i, "version": f"v{i}"}


def fill(folder: Path, runs: int, tables: int) -> tuple[RunStore, MetricHistory, Ledger]:
    """A store of `runs` published runs spread over `tables` tables, a run a minute, with their metrics and
    ledger rows."""
    store = RunStore(f"sqlite:///{folder / 'runs.sqlite'}")
    history, ledger = MetricHistory(store.engine), Ledger(store.engine)
    for i in range(runs):
        t = i % tables
        rec = RunRecord(f"r{i:06d}", f"bench.t{t:02d}", "published", rows_written=100, snapshot_id=10_000 + i)
        rec.started_at = T0 + timedelta(minutes=i)
        rec.branch, rec.checks, rec.file_ids = f"wap_r{i:06d}", CHECKS, [_file(t, i)]
        store.save(rec)
        values: dict[tuple[str, str], float | str] = {k: float(n + i % 17) for n, k in enumerate(METRICS)}
        history.record(rec.run_id, rec.table_name, rec.started_at, values)
        f = _file(t, i)
        ident = FileIdentity(str(f["uri"]), int(f["size"]), str(f["version"]), rec.started_at)
        key = f"src{t:02d}:{f['uri']}"
        ledger.add(f"src{t:02d}", [(key, ident)], published={key: {"run_id": rec.run_id, "snapshot_id": 1}})
    return store, history, ledger


def queries(
    store: RunStore, history: MetricHistory, ledger: Ledger, runs: int, tables: int
) -> dict[str, Callable[[], Any]]:
    """What a run and the listings ask of wapflow's tables, against the store's newest run and its table."""
    last = f"r{runs - 1:06d}"
    table = f"bench.t{(runs - 1) % tables:02d}"
    new = [_file(99, j) for j in range(2)]  # files no run read: what `wap run` asks of every new file
    return {
        "wap runs (latest 100)": lambda: store.list(limit=100),
        "wap runs --table (latest 100)": lambda: store.list(table, limit=100),
        "a run's record (wap report)": lambda: store.get(last),
        "a branch's runs (wap discard, diff BRANCH)": lambda: store.by_branch(f"wap_{last}"),
        "running runs of a table (every run)": lambda: store.running(table),
        "published already? 2 new files (every run)": lambda: store.published_with(table, new),
        "interrupted over 2 files? (every run)": lambda: store.interrupted_with([table], new),
        "a run's metrics (wap diff, review)": lambda: history.of_run(last, table),
        "a metric's last 30 published (anomaly)": lambda: history.published(table, "row_count", "", 30),
        "a weekday's last 30 (seasonal anomaly)": lambda: history.published(table, "row_count", "", 30, weekday=2),
        "a source's ledger states (wap ingest)": lambda: ledger.states("src00"),
    }


def timed(fn: Callable[[], Any], repeat: int) -> float:
    fn()  # warm: the first call compiles the statement
    took = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        took.append(time.perf_counter() - t)
    return statistics.median(took) * 1000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--young", type=int, default=2000, help="runs in the young store (100 a table: full listings)")
    ap.add_argument("--tables", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=21)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="wap-bench-store-") as tmp:
        sizes = {"young": args.young, "old": args.runs}
        made = {}
        for name, n in sizes.items():
            (Path(tmp) / name).mkdir()
            t = time.perf_counter()
            made[name] = fill(Path(tmp) / name, n, args.tables)
            print(f"{name}: {n:,} runs filled in {time.perf_counter() - t:.1f} s", file=sys.stderr)
        qs = {name: queries(*made[name], sizes[name], args.tables) for name in sizes}
        rows = []
        for label in qs["young"]:
            young, old = timed(qs["young"][label], args.repeat), timed(qs["old"][label], args.repeat)
            ratio = old / young if young else float("inf")
            flat = ratio <= TARGET or old <= FLOOR_MS
            rows.append({"query": label, "young_ms": round(young, 3), "old_ms": round(old, 3),
                         "ratio": round(ratio, 2), "flat": flat})  # fmt: skip
        for s, _, _ in made.values():
            s.close()
    if args.json:
        print(json.dumps({"runs": args.runs, "young": args.young, "tables": args.tables, "queries": rows}, indent=2))
    else:
        print(f"| query | {args.young:,} runs (ms) | {args.runs:,} runs (ms) | ratio | flat |")
        print("|---|---|---|---|---|")
        for r in rows:
            print(
                f"| {r['query']} | {r['young_ms']} | {r['old_ms']} | {r['ratio']}x | {'yes' if r['flat'] else 'NO'} |"
            )
    return 0 if all(r["flat"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
