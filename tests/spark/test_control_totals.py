"""control_totals on real Spark and real files: a delivery checked against the manifest its producer wrote beside
it (rows, sums, the files it names, their sizes and sha256). Whole runs publish an exact delivery and block a
short one with main unchanged (read back by PyIceberg); the other faults are audited against the same files
with the audit step's own Delivery (wapflow.storage's reads), which costs no Iceberg write per case."""

from __future__ import annotations

import hashlib
import json
import shutil
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from support.data import write_parquet
from support.embedded_reader import reader
from wapflow.audit.checks import AuditPlan, evaluate
from wapflow.audit.checktype import AuditContext, Delivery
from wapflow.audit.report import CheckResult
from wapflow.audit.spec import ControlTotalsCheck
from wapflow.pipeline import run_wap
from wapflow.sql.identifiers import TableName
from wapflow.storage import Storage

pytestmark = pytest.mark.spark
ORDERS = TableName.parse("shop.orders")


def orders(path: Path, ids: range, cents: int = 250) -> Path:
    """Orders id, amount (decimal 12,2: id * cents / 100) as a parquet file."""
    amounts = [Decimal(i * cents) / 100 for i in ids]
    table = pa.table({"order_id": pa.array(list(ids), pa.int64()), "amount": pa.array(amounts, pa.decimal128(12, 2))})
    return write_parquet(path, table)


def declare(folder: Path, files: list[Path], *, rows: int | None = None, extra: dict[str, Any] | None = None) -> Path:
    """The producer's _manifest.json for these files, from their own content: rows, sum(amount), bytes, sha256."""
    tables = [pq.read_table(f) for f in files]
    total = sum((sum(t.column("amount").to_pylist(), Decimal(0)) for t in tables), Decimal(0))
    entries = {
        f.name: {"rows": t.num_rows, "bytes": f.stat().st_size, "sha256": hashlib.sha256(f.read_bytes()).hexdigest()}
        for f, t in zip(files, tables, strict=True)
    }
    doc: dict[str, Any] = {"rows": rows if rows is not None else sum(t.num_rows for t in tables), "files": entries}
    doc["sums"] = {"amount": str(total)}
    doc.update(extra or {})
    path = folder / "_manifest.json"
    path.write_text(json.dumps(doc))
    return path


def check_of(spark: Any, files: list[Path], **params: Any) -> CheckResult:
    """The check's line of an audit of these files' rows, with the Delivery the audit step gives a run."""
    storage = Storage()
    df = spark.read.parquet(*[str(f) for f in files]) if files else None
    chk = ControlTotalsCheck(check="control_totals", **params)
    delivery = Delivery(
        files=[(str(f), f.stat().st_size) for f in files], read=storage.read_if_exists, digest=storage.digest
    )
    plan = AuditPlan([chk], df.columns, table=ORDERS.dotted)
    [line] = evaluate(plan, df, ctx=AuditContext(this_table=ORDERS, delivery=delivery)).checks
    return line


def test_an_exact_delivery_publishes_and_a_short_one_blocks_with_both_figures(spark, lakehouse_factory, tmp_path):
    day1, day2 = tmp_path / "landing" / "day1", tmp_path / "landing" / "day2"
    a, b = orders(day1 / "a.parquet", range(1, 61)), orders(day1 / "b.parquet", range(61, 101))
    declare(day1, [a, b])
    c = orders(day2 / "c.parquet", range(101, 151))
    declare(day2, [c], rows=60)  # the producer sent 60 rows; 50 landed
    lh = lakehouse_factory({"shop.orders": {"checks": [{"check": "control_totals", "sums": ["amount"]}]}})

    ok = run_wap(lh, "shop.orders", [str(day1)])  # the folder: its manifest is skipped, never read as rows
    assert ok.status == "published", ok.message
    assert ok.rows_written == 100
    [line] = ok.checks
    assert line["status"] == "passed" and line["observed"] == "rows 100 = declared; sum(amount) 12625.00 = declared"

    short = run_wap(lh, "shop.orders", [str(day2)])
    assert short.status == "blocked" and short.exit_code == 1
    [line] = short.checks
    assert line["status"] == "failed"
    assert line["observed"].startswith("rows 50, declared 60 (difference 10, 16.67%)")
    assert line["sql"].startswith("SELECT count(*), sum(`amount`) FROM ")
    assert c.is_file()  # the source is kept

    table = reader(lh).load_table("shop.orders")
    assert table.current_snapshot().snapshot_id == ok.snapshot_id  # main unchanged by the blocked run
    assert table.scan().to_arrow().num_rows == 100


@pytest.mark.parametrize(
    "fault, expected",
    [
        ("a file sent twice", ["rows 160, declared 100", "1 file(s) of this batch not named in"]),
        ("a file that never landed", ["1 file(s) named in", "not in this batch: b.parquet"]),
        ("a truncated file", ["a.parquet is ", "bytes; its manifest declares", "a.parquet's sha256 is"]),
        ("a changed amount", ["sum(amount) 12626.00, declared 12625.00 (difference 1.00, 0.01%)"]),
        ("no manifest", ["no manifest at "]),
        ("a manifest that is not JSON", ["cannot be read: it is not valid JSON"]),
        ("a folder where the manifest should be", ["_manifest.json cannot be read: Is a directory"]),
        ("a sum of a column the table lacks", ["declares a sum of amt, a column the batch does not have"]),
    ],
)
def test_each_fault_of_a_delivery_fails_the_check_saying_what_differs(spark, tmp_path, fault, expected):
    day = tmp_path / "day"
    a, b = orders(day / "a.parquet", range(1, 61)), orders(day / "b.parquet", range(61, 101))
    manifest = declare(day, [a, b])
    files = [a, b]
    if fault == "a file sent twice":
        files.append(Path(shutil.copy(a, day / "a-copy.parquet")))
    elif fault == "a file that never landed":
        b.unlink()
        files = [a]
    elif fault == "a truncated file":
        orders(a, range(1, 31))  # rewritten shorter after the manifest was written
    elif fault == "a changed amount":
        write_parquet(
            b,
            pa.table(
                {
                    "order_id": pa.array(list(range(61, 101)), pa.int64()),
                    "amount": pa.array(
                        [Decimal(i * 250) / 100 + (1 if i == 70 else 0) for i in range(61, 101)], pa.decimal128(12, 2)
                    ),
                }
            ),
        )
        doc = json.loads(manifest.read_text())
        del doc["files"]  # totals only: the producer declares no per-file sizes here
        manifest.write_text(json.dumps(doc))
    elif fault == "no manifest":
        manifest.unlink()
    elif fault == "a folder where the manifest should be":
        manifest.unlink()
        manifest.mkdir()
    elif fault == "a manifest that is not JSON":
        manifest.write_text('{"rows": 100,')
    elif fault == "a sum of a column the table lacks":
        manifest.write_text(json.dumps({"rows": 100, "sums": {"amt": "1"}}))
    line = check_of(spark, files)
    assert line.status == "failed", line.observed
    for text in expected:
        assert text in line.observed, (text, line.observed)


def test_a_missing_manifest_only_warns_when_told_and_a_csv_manifest_per_file_counts(spark, tmp_path):
    day = tmp_path / "day"
    a, b = orders(day / "a.parquet", range(1, 61)), orders(day / "b.parquet", range(61, 101))
    warned = check_of(spark, [a, b], without_manifest="warn")
    assert warned.status == "warned" and warned.observed.startswith(f"no manifest at {day}/_manifest.json")

    for f, n, total in ((a, 60, "4575.00"), (b, 40, "8050.00")):
        Path(f"{f}.manifest.csv").write_text(f"file,rows,amount\n{f.name},{n},{total}\n")
    line = check_of(spark, [a, b], manifest="{name}.manifest.csv", sums=["amount"])
    assert line.status == "passed", line.observed
    assert line.observed == "rows 100 = declared; sum(amount) 12625.00 = declared"
    Path(f"{b}.manifest.csv").write_text(f"file,rows,amount\n{b.name},41,8050.00\n")
    line = check_of(spark, [a, b], manifest="{name}.manifest.csv", tolerance=0.01)
    assert line.status == "passed", line.observed  # 100 of 101 declared: within 1%
    assert line.observed.startswith("rows 100, declared 101 (difference 1, 0.99%)")
    assert check_of(spark, [a, b], manifest="{name}.manifest.csv").status == "failed"


def test_ingest_waits_for_whole_deliveries_and_batches_each_whole(spark, lakehouse_factory, tmp_path):
    """`wait`: `wap ingest` holds a landed file until its manifest is there and every file it names has landed
    (exit 5, saying why and until when, nothing in the ledger, main unchanged), then runs the delivery in one
    batch whatever max_files_per_run says; after the wait, an incomplete delivery runs and the check blocks it."""
    import os
    import time

    from wapflow.config import SourceConfig
    from wapflow.outer.ingest import ingest

    landing = tmp_path / "landing"
    check = {"check": "control_totals", "sums": ["amount"], "wait": "1h"}
    lh = lakehouse_factory({"shop.orders": {"checks": [check]}})
    lh.config.sources["orders"] = SourceConfig(
        table="shop.orders", location=str(landing), settle_seconds=0, max_files_per_run=2
    )
    day1 = landing / "day1"
    a, b = orders(day1 / "a.parquet", range(1, 31)), orders(day1 / "b.parquet", range(31, 61))

    early = ingest(lh, "orders")  # two files, no manifest yet
    assert early.exit_code == 5 and early.held.files == 2 and early.files == [], early.message()
    assert "held until their delivery is complete" in early.message() and "no manifest at" in early.message()
    assert lh.ledger.rows("orders") == [] and not reader(lh).table_exists("shop.orders")

    c = orders(day1 / "c.parquet", range(61, 91))
    declare(day1, [a, b, c])
    c.unlink()  # the manifest names c, which has not landed yet
    assert "names 1 file(s) not landed yet: c.parquet" in ingest(lh, "orders").message()
    orders(day1 / "c.parquet", range(61, 91))
    whole = ingest(lh, "orders")
    assert whole.exit_code == 0 and len(whole.runs) == 1, whole.message()  # 3 files, one batch (limit 2)
    assert whole.runs[0].status == "published" and whole.runs[0].rows_written == 90
    assert len(reader(lh).load_table("shop.orders").scan().to_arrow()) == 90

    day2 = landing / "day2"
    d = orders(day2 / "d.parquet", range(91, 101))
    orders(day2 / "e.parquet", range(101, 111))
    declare(day2, [d, day2 / "e.parquet"])
    (day2 / "e.parquet").unlink()  # e never lands
    old = time.time() - 7200
    os.utime(d, (old, old))  # d landed two hours ago: the hour's wait is over
    late = ingest(lh, "orders")
    assert late.exit_code == 1 and late.held.files == 0, late.message()
    [line] = late.runs[0].checks
    assert line["status"] == "failed" and "1 file(s) named in" in line["observed"] and "e.parquet" in line["observed"]
    assert len(reader(lh).load_table("shop.orders").scan().to_arrow()) == 90  # main unchanged


def test_files_that_declare_their_own_totals_in_their_metadata_publish_or_block(spark, lakehouse_factory, tmp_path):
    """declared_in = "metadata": each file's own attributes (here local user.* attributes; on S3 x-amz-meta-*)
    declare its rows and sums; an exact file publishes, one that lost rows on the way blocks, main unchanged."""
    import os

    def stamped(path: Path, rows: int, total: Decimal) -> Path:
        os.setxattr(path, "user.rows", str(rows).encode())
        os.setxattr(path, "user.sum-amount", str(total).encode())
        return path

    landing = tmp_path / "landing"
    a = stamped(orders(landing / "a.parquet", range(1, 61)), 60, Decimal("4575.00"))
    check = {"check": "control_totals", "declared_in": "metadata", "sums": ["amount"]}
    lh = lakehouse_factory({"shop.orders": {"checks": [check]}})
    ok = run_wap(lh, "shop.orders", [str(a)])
    assert ok.status == "published", ok.message
    [line] = ok.checks
    assert line["observed"] == "rows 60 = declared; sum(amount) 4575.00 = declared", line

    b = stamped(orders(landing / "b.parquet", range(61, 101)), 41, Decimal("8050.00"))  # one row lost
    short = run_wap(lh, "shop.orders", [str(b)])
    assert short.status == "blocked" and short.exit_code == 1, short.message
    [line] = short.checks
    assert line["observed"].startswith("rows 40, declared 41 (difference 1, 2.44%)"), line
    table = reader(lh).load_table("shop.orders")
    assert table.current_snapshot().snapshot_id == ok.snapshot_id and table.scan().to_arrow().num_rows == 60


def test_a_control_table_row_per_file_declares_the_delivery(spark, lakehouse_factory, tmp_path):
    """declared_in = "table": the producer writes a row per file it sends into a control table of the catalog
    (its name or URI, rows, the sums of columns, and columns of its own); a file without a row, a short file and
    two rows for one file each block, an exact delivery publishes."""
    landing = tmp_path / "landing"
    check = {"check": "control_totals", "declared_in": "table", "control_table": "ops.deliveries"}
    lh = lakehouse_factory({"shop.orders": {"checks": [check]}})
    t = f"{lh.catalog}.ops.deliveries"
    lh.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {lh.catalog}.ops")
    lh.spark.sql(f"CREATE TABLE {t} (file STRING, rows BIGINT, amount DECIMAL(12,2), batch_no INT) USING iceberg")
    a = orders(landing / "a.parquet", range(1, 61))
    b = orders(landing / "b.parquet", range(61, 101))
    lh.spark.sql(f"INSERT INTO {t} VALUES ('a.parquet', 60, 4575.00, 7), ('{b}', 41, 8050.00, 7)")

    ok = run_wap(lh, "shop.orders", [str(a)])
    assert ok.status == "published", ok.message
    [line] = ok.checks
    assert line["observed"] == "rows 60 = declared; sum(amount) 4575.00 = declared", line  # batch_no: the producer's

    short = run_wap(lh, "shop.orders", [str(b)])  # its row (by URI) declares 41 rows; 40 came
    assert short.status == "blocked", short.message
    assert short.checks[0]["observed"].startswith("rows 40, declared 41 (difference 1, 2.44%)"), short.checks

    c = orders(landing / "c.parquet", range(101, 111))
    none = run_wap(lh, "shop.orders", [str(c)])
    assert none.status == "blocked" and f"no row in control_table ops.deliveries for {c}" in none.checks[0]["observed"]
    lh.spark.sql(f"INSERT INTO {t} VALUES ('c.parquet', 10, 1325.00, 8), ('c.parquet', 10, 1325.00, 9)")
    twice = run_wap(lh, "shop.orders", [str(c)])
    assert twice.status == "blocked" and "has 2 rows for c.parquet" in twice.checks[0]["observed"], twice.checks
    table = reader(lh).load_table("shop.orders")
    assert table.current_snapshot().snapshot_id == ok.snapshot_id and table.scan().to_arrow().num_rows == 60


def test_a_csv_files_trailer_line_declares_it_and_is_never_read_as_a_row(spark, lakehouse_factory, tmp_path):
    """declared_in = "trailer": each CSV ends with `#rows=...,sum-amount=...`, which the table's read_options
    (`comment = "#"`) make Spark skip; an exact file publishes its rows only, a file cut short blocks."""
    landing = tmp_path / "landing"
    landing.mkdir()
    check = {"check": "control_totals", "declared_in": "trailer", "sums": ["amount"]}
    lh = lakehouse_factory({"shop.orders": {"checks": [check], "read_options": {"comment": "#"}}})
    body = "order_id,amount\n" + "".join(f"{i},{i * 2.5:.2f}\n" for i in range(1, 61))
    a = landing / "a.csv"
    a.write_text(body + "#rows=60,sum-amount=4575.00\n")
    ok = run_wap(lh, "shop.orders", [str(a)])
    assert ok.status == "published" and ok.rows_written == 60, ok.message
    # amount is read as a double: its sum prints as one (4575), compared within 1e-9 of the declared 4575.00.
    assert ok.checks[0]["observed"] == "rows 60 = declared; sum(amount) 4575 = declared", ok.checks

    b = landing / "b.csv"
    b.write_text("order_id,amount\n" + "".join(f"{i},1.00\n" for i in range(61, 70)) + "#rows=10,sum-amount=10.00\n")
    short = run_wap(lh, "shop.orders", [str(b)])
    assert short.status == "blocked", short.message
    assert short.checks[0]["observed"].startswith("rows 9, declared 10 (difference 1, 10.00%)"), short.checks
    assert reader(lh).load_table("shop.orders").scan().to_arrow().num_rows == 60
