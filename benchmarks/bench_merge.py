"""What a WAP merge costs, copy-on-write (format v2) and merge-on-read (format v3, deletion vectors), against
Iceberg's own MERGE INTO of the same change batch in both modes, and against appending it.

Run from the repo root:

    .venv/bin/python benchmarks/bench_merge.py [--table-rows 10000000] [--batch-rows 1000000] [--workdir bench-data]

A table of --table-rows rows (partitioned by bucket(8, id)) and a change batch of --batch-rows rows: 10% updates
of existing keys spread over the whole table, 1% deletes (op = 'D'), the rest inserts of new keys. Measured
in ONE SparkSession, from the same main snapshot each time (`--part merge`):
- append: a plain Iceberg append of the same batch to a branch (what landing it as new rows costs);
- cow: `MERGE INTO <table>.branch_x USING batch` on the format v2 table (Iceberg's copy-on-write default);
- mor: the same `MERGE INTO` on a copy of the table in format v3 with write.merge/update/delete.mode =
  merge-on-read (deletion vectors: only the changed rows and a bitmap per touched file are written);
- wap_cow: `wap run` with mode = "merge", key = ["id"], delete_when = "op = 'D'", order_by = ["seq"] and one
  not_null check on the v2 table: key checks, the MERGE on the run's branch, the audit of the applied batch
  and the change metrics, the fast-forward publish (main is rolled back to the base afterwards);
- wap_mor: the same `wap run` on a v3 merge-on-read copy (the properties wapflow gives a v3 table it creates);
  the run must write deletion vectors.
Rounds alternate the order; the median of each is reported, and each WAP / Iceberg ratio is the median of each
round's own ratio. The Spark jobs of the last WAP merge-on-read run are listed by where they were started
(from the Spark UI's REST API), to show where its time goes.

`--part many`: --merges WAP merges of --merge-rows rows each (the same mix) into the v3 merge-on-read table,
then a GROUP BY on main against the same rows freshly written as one table, before and after `wap maintain`.

`--part unique` (also run first by `--part all`) times the audit of `unique(id)` on the merged table (the batch
merged once on a branch), side by side, median of --rounds each: `touched` (what a merge run does: the table
after the merge semi-joined with the batch's distinct keys, then grouped), `full` (the whole table grouped by
key) and `batch` (within the batch only: what an append run does, blind to a collision with a row already in the
table).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wapflow.audit.checks import AuditContext, AuditPlan, evaluate
from wapflow.config import LakehouseConfig, MaintenanceConfig, TableConfig, WapConfig
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.maintain import maintain
from wapflow.pipeline import run_wap
from wapflow.spark.shared_session import CO_PARTITIONED_JOIN, sql_with_confs
from wapflow.sql.identifiers import TableName
from wapflow.writing.modes import write_mode

TABLE = TableName.parse("bench.customers")  # format v2, copy-on-write: Iceberg's MERGE INTO and the WAP merge
MOR_TABLE = TableName.parse("bench.customers_v3")  # the same rows, format v3, merge-on-read: Iceberg's MERGE INTO
WAP_MOR_TABLE = TableName.parse("bench.customers_wap_v3")  # the same again: the WAP merge-on-read merge
FRESH_TABLE = TableName.parse("bench.customers_fresh")  # --part many: main's rows written once
MOR_PROPS = (
    "'format-version' = '3', 'write.wap.enabled' = 'true', 'write.distribution-mode' = 'hash', "
    "'write.merge.mode' = 'merge-on-read', 'write.update.mode' = 'merge-on-read', "
    "'write.delete.mode' = 'merge-on-read'"
)
TARGETS = {  # issue 22 (copy-on-write), issue 48 (merge-on-read); *_spj: Iceberg's MERGE with the settings WAP uses
    "wap_cow_over_cow": 1.15,
    "wap_mor_over_mor": 1.15,
    "wap_cow_over_cow_spj": 1.15,
    "wap_mor_over_mor_spj": 1.15,
    "wap_mor_over_append": 2.0,
}
QUERY = "SELECT pmod(id, 16) AS g, count(*) AS n, sum(amount) AS total, max(name) AS last FROM {t} GROUP BY 1"
MERGE_CFG = {
    "mode": "merge",
    "key": ["id"],
    "delete_when": "op = 'D'",
    "order_by": ["seq"],
    "checks": [{"check": "not_null", "column": "name"}],
}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def make_tables(lh: Lakehouse, rows: int, copies: list[TableName]) -> None:
    """TABLE (v2) with `rows` rows, and each of `copies` as a v3 merge-on-read copy of it."""
    spark, ident = lh.spark, lh.tables.ident(TABLE)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {TABLE.namespace_sql(lh.catalog)}")
    spark.sql(f"DROP TABLE IF EXISTS {ident} PURGE")
    spark.sql(
        f"CREATE TABLE {ident} (id BIGINT, name STRING, amount DOUBLE, op STRING, seq BIGINT) USING iceberg "
        "PARTITIONED BY (bucket(8, id)) TBLPROPERTIES ('format-version' = '2', 'write.wap.enabled' = 'true', "
        "'write.distribution-mode' = 'hash')"
    )
    spark.range(rows).selectExpr(
        "id", "concat('name-', id) AS name", "rand(1) * 100 AS amount", "'I' AS op", "0L AS seq"
    ).writeTo(ident).append()
    for t in copies:
        copy_v3(lh, ident, t)


def copy_v3(lh: Lakehouse, source: str, table: TableName) -> None:
    ident = lh.tables.ident(table)
    lh.spark.sql(f"DROP TABLE IF EXISTS {ident} PURGE")
    lh.spark.sql(
        f"CREATE TABLE {ident} USING iceberg PARTITIONED BY (bucket(8, id)) TBLPROPERTIES ({MOR_PROPS}) "
        f"AS SELECT * FROM {source}"
    )


def make_batch(lh: Lakehouse, table_rows: int, batch_rows: int, path: Path) -> None:
    """10% updates and 1% deletes of keys spread over the table, 89% inserts of new keys."""
    make_batches(lh, table_rows, batch_rows, path, 1)
    (path / "n=0").rename(path.with_name(path.name + ".tmp"))
    shutil.rmtree(path)
    path.with_name(path.name + ".tmp").rename(path)


def make_batches(lh: Lakehouse, table_rows: int, batch_rows: int, folder: Path, count: int) -> list[Path]:
    """`count` batches (folder/n=0, n=1, ...) in one Spark job, each as make_batch's: batch n touches other keys
    (shifted by n) and inserts keys after the previous batches'."""
    updates, deletes = batch_rows // 10, batch_rows // 100
    stride = max(table_rows // (updates + deletes), 1)
    lh.spark.range(count * batch_rows).selectExpr(f"id div {batch_rows} AS n", f"id % {batch_rows} AS i").selectExpr(
        f"CASE WHEN i < {updates + deletes} THEN (i * {stride} + n) % {table_rows} "
        f"ELSE {table_rows} + n * {batch_rows} + i END AS id",
        "concat('changed-', n, '-', i) AS name",
        "rand(2) * 100 AS amount",
        f"CASE WHEN i < {updates} THEN 'U' WHEN i < {updates + deletes} THEN 'D' ELSE 'I' END AS op",
        "1L + n AS seq",
        "n",
    ).repartition("n").write.partitionBy("n").mode("overwrite").parquet(str(folder))
    return [folder / f"n={n}" for n in range(count)]


def plain_merge(lh: Lakehouse, batch: Path, table: TableName = TABLE, *, spj: bool = False) -> float:
    """Iceberg's own MERGE INTO on a branch: copy-on-write on TABLE, merge-on-read on MOR_TABLE. `spj`: with
    the storage-partitioned join settings a WAP merge uses on a table bucketed by its key."""
    spark, ident = lh.spark, lh.tables.ident(table)
    spark.sql(f"ALTER TABLE {ident} CREATE BRANCH plain")
    spark.read.parquet(str(batch)).createOrReplaceTempView("batch")
    t0 = time.perf_counter()
    sql_with_confs(
        spark,
        f"MERGE INTO {table.branch_sql(lh.catalog, 'plain')} t USING batch s ON t.id = s.id "
        "WHEN MATCHED AND s.op = 'D' THEN DELETE WHEN MATCHED THEN UPDATE SET * "
        "WHEN NOT MATCHED AND s.op <> 'D' THEN INSERT *",
        CO_PARTITIONED_JOIN if spj else {},
    )
    took = time.perf_counter() - t0
    spark.sql(f"ALTER TABLE {ident} DROP BRANCH plain")
    return took


def plain_append(lh: Lakehouse, batch: Path) -> float:
    spark, ident = lh.spark, lh.tables.ident(TABLE)
    spark.sql(f"ALTER TABLE {ident} CREATE BRANCH app")
    t0 = time.perf_counter()
    spark.read.parquet(str(batch)).writeTo(TABLE.branch_sql(lh.catalog, "app")).append()
    took = time.perf_counter() - t0
    spark.sql(f"ALTER TABLE {ident} DROP BRANCH app")
    return took


def delete_files(lh: Lakehouse, table: TableName) -> int:
    """Delete files (v3: deletion vectors) on main's head."""
    ident = lh.tables.ident(table)
    return int(lh.spark.sql(f"SELECT count(*) FROM {ident}.delete_files").collect()[0][0])


def data_files(lh: Lakehouse, table: TableName) -> int:
    ident = lh.tables.ident(table)
    return int(lh.spark.sql(f"SELECT count(*) FROM {ident}.data_files").collect()[0][0])


def wap_merge(lh: Lakehouse, batch: Path, table: TableName = TABLE, keep: bool = False) -> tuple[float, dict[str, Any]]:
    """One `wap run` merge of `batch` into `table`; main is rolled back to its base afterwards unless `keep`."""
    base = lh.tables.head(table)
    files = sorted(str(p) for p in batch.glob("*.parquet"))
    t0 = time.perf_counter()
    res = run_wap(lh, table.dotted, files)
    took = time.perf_counter() - t0
    if res.status != "published":
        raise RuntimeError(f"the WAP merge did not publish: {res.message}")
    change = next(c["observed"] for c in res.checks if c["check"] == "changes")
    detail: dict[str, Any] = {"timings": res.timings, "change": change}
    if table != TABLE:
        lh.tables.refresh(table)
        detail["delete_files"] = delete_files(lh, table)
        if not detail["delete_files"]:
            raise RuntimeError(f"the WAP merge into {table} wrote no deletion vector: not merge-on-read")
    if not keep:
        assert base is not None
        lh.tables.roll_back(table, base)  # the next round starts from the same table
    return took, detail


def table_properties(lh: Lakehouse, table: TableName) -> dict[str, str]:
    rows = lh.spark.sql(f"SHOW TBLPROPERTIES {lh.tables.ident(table)}").collect()
    return {str(r[0]): str(r[1]) for r in rows}


class SparkJobs:
    """The Spark jobs that ran between two instants, from the Spark UI's REST API (None: the UI is off)."""

    def __init__(self, lh: Lakehouse) -> None:
        sc = lh.spark.sparkContext
        self.url = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}" if sc.uiWebUrl else None

    def _get(self, what: str) -> Any:
        assert self.url is not None
        with urllib.request.urlopen(f"{self.url}/{what}", timeout=30) as r:  # the local Spark UI
            return json.load(r)

    def since(self, start_ms: int) -> list[dict[str, Any]] | None:
        """Jobs submitted at or after `start_ms` (epoch ms): name (where Python started it) and seconds,
        merged by name in the order they first ran."""
        if self.url is None:
            return None
        try:
            jobs = self._get("jobs")
        except OSError:
            return None
        out: dict[str, dict[str, Any]] = {}
        for j in sorted(jobs, key=lambda j: j.get("submissionTime", "")):
            sub, done = _ms(j.get("submissionTime")), _ms(j.get("completionTime"))
            if sub is None or sub < start_ms or done is None:
                continue
            name = str(j.get("description") or j.get("name") or "?").splitlines()[0][:110]
            e = out.setdefault(name, {"job": name, "seconds": 0.0, "jobs": 0})
            e["seconds"] = round(e["seconds"] + (done - sub) / 1000, 2)
            e["jobs"] += 1
        return list(out.values())


def _ms(stamp: str | None) -> int | None:
    """Spark's '2026-11-29T02:10:11.123GMT' as epoch milliseconds."""
    if not stamp:
        return None
    from datetime import UTC, datetime

    return int(
        datetime.strptime(stamp.replace("GMT", ""), "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=UTC).timestamp() * 1000
    )


def unique_audit(lh: Lakehouse, batch: Path, rounds: int) -> dict[str, float]:
    """unique(id) audited three ways over the batch merged once on branch `uq` (seconds, median of rounds)."""
    spark, ident = lh.spark, lh.tables.ident(TABLE)
    cfg = lh.config.table(TABLE.dotted)
    spark.sql(f"ALTER TABLE {ident} CREATE BRANCH uq")
    mode = write_mode(cfg)
    merged_sql = TABLE.branch_sql(lh.catalog, "uq")
    mode.write(spark, mode.source(spark.read.parquet(str(batch))), merged_sql, {})
    added = mode.audited(mode.source(spark.read.parquet(str(batch))))  # the audit's rows of a merge run
    plan = AuditPlan(
        TableConfig.model_validate({"checks": [{"check": "unique", "columns": ["id"]}]}).checks,
        added.columns,
        table=TABLE.dotted,
    )
    ways = {
        "touched": lambda: evaluate(
            plan, added, ctx=AuditContext(table_after=lambda: spark.table(merged_sql)), samples=False
        ),
        "full": lambda: evaluate(plan, spark.table(merged_sql), samples=False),
        "batch": lambda: evaluate(plan, added, samples=False),
    }
    times: dict[str, list[float]] = {k: [] for k in ways}
    for r in range(rounds + 1):  # round 0 warms up
        for what, audit in ways.items() if r % 2 else reversed(ways.items()):
            t0 = time.perf_counter()
            report = audit()
            took = time.perf_counter() - t0
            if report.checks[0].status != "passed":
                raise RuntimeError(f"unique(id) ({what}) did not pass: {report.checks[0].observed}")
            if r:
                times[what].append(took)
                log(f"unique round {r}: {what} {took:.2f} s")
    spark.sql(f"ALTER TABLE {ident} DROP BRANCH uq")
    return {k: round(statistics.median(v), 2) for k, v in times.items()}


def side_by_side(lh: Lakehouse, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """--part merge: the five ways of landing one change batch, rounds alternating their order."""
    batch = work / "batch"
    make_batch(lh, args.table_rows, args.batch_rows, batch)
    warm = work / "warm"
    make_batch(lh, args.table_rows, max(args.batch_rows // 100, 100), warm)
    ops: dict[str, Callable[[Path], tuple[float, dict[str, Any]]]] = {
        "append": lambda b: (plain_append(lh, b), {}),
        "cow": lambda b: (plain_merge(lh, b), {}),
        "mor": lambda b: (plain_merge(lh, b, MOR_TABLE), {}),
        "cow_spj": lambda b: (plain_merge(lh, b, spj=True), {}),
        "mor_spj": lambda b: (plain_merge(lh, b, MOR_TABLE, spj=True), {}),
        "wap_cow": lambda b: wap_merge(lh, b),
        "wap_mor": lambda b: wap_merge(lh, b, WAP_MOR_TABLE),
    }
    ops = {k: v for k, v in ops.items() if k in args.ops}
    log("warm-up round (not measured)")
    for op in ops.values():
        op(warm)
    jobs = SparkJobs(lh)
    times: dict[str, list[float]] = {k: [] for k in ops}
    detail: dict[str, dict[str, Any]] = {}
    parts: dict[str, list[dict[str, float]]] = {"wap_cow": [], "wap_mor": []}
    spark_jobs: list[dict[str, Any]] | None = None
    for r in range(args.rounds):
        order = list(ops) if r % 2 == 0 else list(reversed(ops))
        for what in order:
            start_ms = int(time.time() * 1000)
            took, d = ops[what](batch)
            times[what].append(took)
            if what in parts:
                detail[what] = d
                parts[what].append(d["timings"])
            if what == "wap_mor":
                spark_jobs = jobs.since(start_ms)
            log(f"round {r + 1}: {what} {took:.2f} s")
    med = {k: statistics.median(v) for k, v in times.items()}
    props = {t: table_properties(lh, t) for t in (MOR_TABLE, WAP_MOR_TABLE)}
    differ = {
        k: [props[MOR_TABLE].get(k), props[WAP_MOR_TABLE].get(k)]
        for k in sorted(set(props[MOR_TABLE]) | set(props[WAP_MOR_TABLE]))
        if props[MOR_TABLE].get(k) != props[WAP_MOR_TABLE].get(k)
    }

    def per_round(a: str, b: str) -> list[float]:
        return [x / y for x, y in zip(times[a], times[b], strict=True)]

    ratios = {k: per_round(*k.split("_over_")) for k in TARGETS if all(w in ops for w in k.split("_over_"))}
    step_medians = {
        w: {k: round(statistics.median(t.get(k, 0.0) for t in ts), 2) for k in ts[0]} for w, ts in parts.items() if ts
    }
    return {
        "seconds": {k: round(v, 2) for k, v in med.items()},
        "runs": {k: [round(x, 2) for x in v] for k, v in times.items()},
        "over_append": {k: round(v / med["append"], 2) for k, v in med.items()} if "append" in med else {},
        "ratios": {k: round(statistics.median(v), 2) for k, v in ratios.items()},
        "ratios_per_round": {k: [round(x, 2) for x in v] for k, v in ratios.items()},
        "targets": {
            k: {"target": t, "status": "PASS" if statistics.median(ratios[k]) <= t else "MISS"}
            for k, t in TARGETS.items()
            if k in ratios
        },
        "wap_steps": step_medians,
        "wap_change": {w: d.get("change") for w, d in detail.items()},
        "wap_mor_delete_files": detail.get("wap_mor", {}).get("delete_files"),
        "wap_mor_spark_jobs": spark_jobs,
        "mor_vs_wap_mor_table_properties": differ,  # [Iceberg's MoR table, the WAP MoR table] where they differ
    }


def print_side_by_side(out: dict[str, Any], args: argparse.Namespace) -> None:
    s, x, r = out["seconds"], out["over_append"], out["ratios"]
    rows = [
        ("append", "plain append (v2)", None),
        ("mor", "Iceberg MERGE INTO, v3 merge-on-read", None),
        ("cow", "Iceberg MERGE INTO, v2 copy-on-write", None),
        ("mor_spj", "  the same, co-partitioned join settings", None),
        ("cow_spj", "  the same, co-partitioned join settings", None),
        ("wap_mor", "WAP merge, v3 merge-on-read", "wap_mor_over_mor"),
        ("wap_cow", "WAP merge, v2 copy-on-write", "wap_cow_over_cow"),
    ]
    print(f"table {args.table_rows:,} rows, change batch {args.batch_rows:,} rows (median of {args.rounds} rounds)")
    print(f"  {'operation':38s} {'seconds':>8s} {'x append':>9s}   vs Iceberg (median of rounds' ratios)")
    for k, name, ratio in rows:
        if k not in s:
            continue
        runs = ", ".join(f"{v:.2f}" for v in out["runs"][k])
        vs = " / ".join(
            f"{r[q]:.2f}x {q.split('_over_')[1]}" for q in (ratio, f"{ratio}_spj") if ratio is not None and q in r
        )
        over = f"{x[k]:8.2f}x" if k in x else " " * 9
        print(f"  {name:38s} {s[k]:8.2f} {over}   {vs:26s} runs: {runs}")
    for k, t in out["targets"].items():
        print(f"  {t['status']}  {k:22s} {r[k]:.2f} (target <= {t['target']}x)")
    for w, steps in out["wap_steps"].items():
        print(f"  {w} steps (median s): {steps}; change: {out['wap_change'].get(w)}")
    if out["wap_mor_delete_files"] is not None:
        print(f"  wap_mor: {out['wap_mor_delete_files']} delete file(s) (deletion vectors) on main after the run")
    print(
        f"  table properties, Iceberg MoR vs WAP MoR table, where they differ: {out['mor_vs_wap_mor_table_properties']}"
    )
    if out["wap_mor_spark_jobs"]:
        print("  Spark jobs of the last wap_mor run (seconds, by where they were started):")
        for j in sorted(out["wap_mor_spark_jobs"], key=lambda j: -j["seconds"])[:12]:
            print(f"    {j['seconds']:7.2f} s  {j['jobs']:3d} job(s)  {j['job']}")


def query_seconds(lh: Lakehouse, table: TableName, repeat: int = 5) -> float:
    sql = QUERY.format(t=lh.tables.ident(table))
    lh.tables.refresh(table)
    lh.spark.sql(sql).collect()  # warm
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        lh.spark.sql(sql).collect()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def many_merges(lh: Lakehouse, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """--part many: --merges small WAP merges into the v3 merge-on-read table, then a query on main against the
    same rows freshly written, before and after `wap maintain`."""
    log(f"{args.merges} batches of {args.merge_rows:,} rows")
    batches = make_batches(lh, args.table_rows, args.merge_rows, work / "small", args.merges + 1)[1:]
    took: list[float] = []
    started = time.perf_counter()
    for i, b in enumerate(batches):
        t, _ = wap_merge(lh, b, WAP_MOR_TABLE, keep=True)
        took.append(t)
        if (i + 1) % 10 == 0:
            log(f"{i + 1} merges ({time.perf_counter() - started:.0f} s; last {t:.2f} s)")

    def figures(table: TableName) -> dict[str, Any]:
        return {
            "data_files": data_files(lh, table),
            "delete_files": delete_files(lh, table),
            "query_s": round(query_seconds(lh, table), 3),
        }

    log("the same rows written once")
    copy_v3(lh, lh.tables.ident(WAP_MOR_TABLE), FRESH_TABLE)
    fresh = figures(FRESH_TABLE)
    before = figures(WAP_MOR_TABLE)
    log("wap maintain")
    t0 = time.perf_counter()
    done = maintain(lh, WAP_MOR_TABLE.dotted)
    maintain_s = time.perf_counter() - t0
    if done.exit_code != 0:
        raise RuntimeError(f"wap maintain failed: {done.to_dict()}")
    after = figures(WAP_MOR_TABLE)
    outcome = done.tables[0]
    window = min(10, len(took))
    return {
        "merges": args.merges,
        "merge_rows": args.merge_rows,
        "merge_s_first": round(statistics.median(took[:window]), 2),
        "merge_s_last": round(statistics.median(took[-window:]), 2),
        "merges_total_s": round(sum(took), 1),
        "before_maintain": before,
        "after_maintain": after,
        "fresh": fresh,
        "query_before_vs_fresh": round(before["query_s"] / fresh["query_s"], 2),
        "query_after_vs_fresh": round(after["query_s"] / fresh["query_s"], 2),
        "maintain_s": round(maintain_s, 1),
        "revert_window": lh.config.maintenance.revert_window,
        "compact": outcome.figures("compact"),
    }


def print_many(m: dict[str, Any]) -> None:
    print(f"{m['merges']} WAP merges of {m['merge_rows']:,} rows into the v3 merge-on-read table")
    print(f"  a merge: first {m['merge_s_first']:.2f} s, last {m['merge_s_last']:.2f} s (median of 10)")
    print(f"  {'main':28s} {'data files':>10s} {'delete files':>12s} {'GROUP BY':>9s} {'x fresh':>8s}")
    fresh = m["fresh"]["query_s"]
    for name, f in (("after the merges", m["before_maintain"]), ("after `wap maintain`", m["after_maintain"])):
        print(
            f"  {name:28s} {f['data_files']:10d} {f['delete_files']:12d} {f['query_s']:8.3f}s "
            f"{f['query_s'] / fresh:7.2f}x"
        )
    f = m["fresh"]
    print(f"  {'the same rows written once':28s} {f['data_files']:10d} {f['delete_files']:12d} {fresh:8.3f}s")
    print(f"  wap maintain: {m['maintain_s']} s (revert_window {m['revert_window']}); compact: {m['compact']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--table-rows", type=int, default=10_000_000)
    ap.add_argument("--batch-rows", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--merges", type=int, default=100, help="--part many: how many small merges")
    ap.add_argument("--merge-rows", type=int, default=10_000, help="--part many: rows per small merge")
    ap.add_argument("--workdir", default="bench-data")
    ap.add_argument("--master", default="local[*]")
    ap.add_argument("--driver-memory", default="4g")
    ap.add_argument(
        "--ops",
        type=lambda v: [o.strip() for o in v.split(",")],
        default=["append", "cow", "mor", "cow_spj", "mor_spj", "wap_cow", "wap_mor"],
        help="--part merge: which of append,cow,mor,cow_spj,mor_spj,wap_cow,wap_mor to measure (e.g. leave out the copy-on-write "
        "ones on a 100M-row table)",
    )
    ap.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting for the session (repeatable)"
    )
    ap.add_argument("--json", action="store_true", help="also print the results as one JSON line")
    ap.add_argument("--part", choices=["all", "merge", "many", "unique"], default="all", help="what to measure")
    args = ap.parse_args(argv)
    work = Path(args.workdir).resolve() / "merge"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    cfg = WapConfig(
        lakehouse=LakehouseConfig(
            warehouse=str(work / "lakehouse"),
            master=args.master,
            driver_memory=args.driver_memory,
            # The UI's REST API lists the Spark jobs of a WAP merge (where its time goes).
            spark_conf={
                "spark.sql.shuffle.partitions": "16",
                "spark.ui.enabled": "true",
                **dict(c.split("=", 1) for c in args.conf),
            },
        ),
        # `wap maintain` as configured by default (revert_window 7d), but no orphan listing of the warehouse.
        maintenance=MaintenanceConfig(orphan_older_than="never", every="never"),
        tables={
            TABLE.dotted: TableConfig.model_validate(MERGE_CFG),
            WAP_MOR_TABLE.dotted: TableConfig.model_validate({**MERGE_CFG, "format_version": 3}),
        },
    )
    lh = Lakehouse(cfg)
    out: dict[str, Any] = {"table_rows": args.table_rows, "batch_rows": args.batch_rows, "rounds": args.rounds}
    log(f"table of {args.table_rows:,} rows")
    copies = {"all": [MOR_TABLE, WAP_MOR_TABLE], "merge": [MOR_TABLE, WAP_MOR_TABLE], "many": [WAP_MOR_TABLE]}
    make_tables(lh, args.table_rows, copies.get(args.part, []))
    if args.part in ("all", "unique"):
        log("unique(id) audit: touched keys vs the whole table vs the batch alone")
        batch = work / "batch"
        make_batch(lh, args.table_rows, args.batch_rows, batch)
        uq = out["unique_audit_seconds"] = unique_audit(lh, batch, args.rounds)
        print(f"unique(id) audit of a merge (table {args.table_rows:,} rows, batch {args.batch_rows:,} rows)")
        print(f"  touched keys (merge run)     {uq['touched']:8.2f} s")
        print(f"  whole table                  {uq['full']:8.2f} s")
        print(f"  batch alone (append run)     {uq['batch']:8.2f} s")
    if args.part in ("all", "merge"):
        log(f"change batch of {args.batch_rows:,} rows: append, Iceberg MERGE INTO CoW/MoR, WAP merge CoW/MoR")
        out["merge"] = side_by_side(lh, args, work)
        print_side_by_side(out["merge"], args)
    if args.part in ("all", "many"):
        out["many"] = many_merges(lh, args, work)
        print_many(out["many"])
    if args.json:
        print(json.dumps(out))
    lh.spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
