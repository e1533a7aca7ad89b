"""Each check type fails on the rows it should, counted the same whether the metrics were observed
during the write or computed by scanning the branch (the resume path)."""

from __future__ import annotations

from datetime import datetime

import pyarrow as pa
import pytest

from support.data import write_parquet
from wapflow.audit.checks import run_checks
from wapflow.config import TableConfig
from wapflow.pipeline import WapRun, run_wap
from wapflow.sql.identifiers import TableName

pytestmark = pytest.mark.spark

CHECKS = [
    {"check": "not_null", "column": "qty"},
    {"check": "between", "column": "qty", "min": 0, "max": 10},
    {"check": "accepted_values", "column": "color", "values": ["red", "blue"]},
    {"check": "unique", "columns": ["id"]},
    {"check": "unique", "columns": ["id", "color"], "severity": "warn"},
    {"check": "row_count", "min": 1, "max": 5},
    {"check": "expression", "sql": "ended_at >= started_at"},
    {"check": "between", "column": "started_at", "min": "2026-01-01 00:00:00", "max": "2026-12-31 23:59:59"},
]


def batch() -> pa.Table:
    t0, t1 = datetime(2026, 3, 1, 10), datetime(2026, 3, 1, 11)
    return pa.table(
        {
            "id": pa.array([1, 2, 2, 3, None, None, 7], pa.int64()),
            "qty": pa.array([1, None, 5, 11, -1, 3, 10], pa.int32()),
            "color": ["red", "blue", "green", "red", None, "RED", "blue"],
            "started_at": [t0, t0, t0, datetime(2025, 12, 31), t0, t0, t0],
            "ended_at": [t1, t1, t1, t1, None, t0, datetime(2026, 3, 1, 9)],
        }
    )


EXPECTED = {
    "not_null(qty)": ("failed", 1),
    "between(qty, 0, 10)": ("failed", 2),  # 11 and -1; NULL is not_null's business; 10 is inclusive
    "accepted_values(color)": ("failed", 2),  # green, RED (case-sensitive); NULL ignored
    "unique(id)": ("failed", 1),  # 2 twice; NULL keys ignored
    "unique(id, color)": ("passed", 0),  # (2, blue) and (2, green) differ
    "row_count(1, 5)": ("failed", 0),
    "expression(ended_at >= started_at)": ("failed", 2),  # NULL counts as failing, 09:00 < 10:00
    "between(started_at, 2026-01-01 00:00:00, 2026-12-31 23:59:59)": ("failed", 1),
}


def test_every_check_type_observed_and_scanned_agree(lakehouse_factory, landing):
    lh = lakehouse_factory({"shop.items": {"checks": CHECKS}})
    f = write_parquet(landing / "items.parquet", batch())
    res = run_wap(lh, "shop.items", [str(f)])
    assert res.status == "blocked"
    got = {c["name"]: (c["status"], c["failing_rows"]) for c in res.checks}
    assert got == EXPECTED
    rc = next(c for c in res.checks if c["check"] == "row_count")
    assert rc["observed"] == 7

    # The resume path: no observed metrics, everything from the branch's new rows.
    t = TableName.parse("shop.items")
    added = lh.tables.read_increment(t, res.base_snapshot_id, res.snapshot_id)
    cfg = TableConfig.model_validate({"checks": CHECKS})
    scanned = run_checks(added, cfg.checks, table="shop.items")
    assert {c.name: (c.status, c.failing_rows) for c in scanned.checks} == EXPECTED
    assert scanned.rows == 7


def test_empty_batch(lakehouse_factory, landing):
    lh = lakehouse_factory(
        {"shop.items": {"checks": [{"check": "row_count", "min": 1}, {"check": "not_null", "column": "qty"}]}}
    )
    f = write_parquet(landing / "empty.parquet", batch().slice(0, 0))
    res = run_wap(lh, "shop.items", [str(f)])
    assert res.status == "blocked"
    assert [(c["status"], c["observed"]) for c in res.checks] == [("failed", 0), ("passed", 0)]


def test_all_null_column(lakehouse_factory, landing):
    lh = lakehouse_factory({"shop.items": {"checks": [{"check": "between", "column": "qty", "max": 3}]}})
    t = batch()
    t = t.set_column(1, "qty", pa.nulls(t.num_rows, pa.int32()))
    res = run_wap(lh, "shop.items", [str(write_parquet(landing / "nulls.parquet", t))])
    assert res.status == "published" and res.checks[0]["failing_rows"] == 0


def test_resumed_run_audits_from_the_branch(lakehouse_factory, landing):
    lh = lakehouse_factory({"shop.items": {"checks": CHECKS}})
    f = write_parquet(landing / "items.parquet", batch())
    first = WapRun(lh, "shop.items", [str(f)])
    first.prepare()
    first.write()  # crash: the observed metrics are lost with the process
    res = run_wap(lh, "shop.items", [str(f)], run_id=first.run_id)
    assert {c["name"]: (c["status"], c["failing_rows"]) for c in res.checks} == EXPECTED


def _dup_rows(values: list[int | None]) -> int:
    """Rows beyond the first for each non-NULL value, counted in Python."""
    seen = [v for v in values if v is not None]
    return len(seen) - len(set(seen))


def test_unique_of_an_integer_key_counted_by_bit_words_equals_the_grouping(spark):
    """`unique` on one integer key counts 64 values per group, one bit each: exact at the groups' edges, at
    negative values, at the ends of BIGINT and over a range as wide as BIGINT's; the grouping (every other key)
    agrees. The audit takes that way for a key whose bounds are dense; a sparse key, one without bounds and a
    key of text go to the grouping."""
    import random

    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StructField, StructType

    from wapflow.audit.batch_checks import duplicate_rows_by_bit_words
    from wapflow.audit.checks import compile_check
    from wapflow.audit.checktype import AuditContext
    from wapflow.audit.metrics import FileMetrics
    from wapflow.audit.spec import UniqueCheck

    lo64, hi64 = -(2**63), 2**63 - 1
    rng = random.Random(7)
    cases = {
        "around zero": [0, 0, -1, 1, -63, -64, -64, -65, 63, 64, 64, 65, 127, 128, -32768, 32768, None, None, 5, 5, 5],
        "BIGINT's lowest": [lo64, lo64, lo64 + 1, lo64 + 63, lo64 + 64, lo64 + 64, None],
        "BIGINT's highest": [hi64, hi64, hi64 - 1, hi64 - 63, hi64 - 64, hi64 - 64],
        "both ends": [lo64, hi64, 0, lo64, hi64, 2**40, 2**40, -(2**40)],
        "many, some twice": [rng.randrange(-100_000, 100_000) for _ in range(20_000)],
        "sparse, some twice": [rng.randrange(lo64, hi64) for _ in range(2_000)] * 2 + [rng.randrange(lo64, hi64)],
        "no duplicate": list(range(-70_000, 70_000, 7)),
    }
    schema = StructType([StructField("k", LongType())])
    chk = UniqueCheck(check="unique", columns=["k"])
    c = compile_check(chk, 0, {"k": "k"})
    for name, values in cases.items():
        df = spark.createDataFrame([(v,) for v in values], schema).repartition(3)
        by_words = duplicate_rows_by_bit_words(df.where("k IS NOT NULL"))
        grouped = chk._duplicate_groups(df, c, AuditContext()).agg(F.sum(F.col("count") - 1)).collect()[0][0] or 0
        assert by_words == grouped == _dup_rows(values), name
        known = [v for v in values if v is not None]
        fm = FileMetrics(rows=len(values), lower={"k": min(known)}, upper={"k": max(known)})
        assert chk.measure(df, c, AuditContext(file_metrics=lambda fm=fm: fm))[0] == {"c0_f": _dup_rows(values)}

    # The audit counts by bit words a key whose bounds span at most 16 values a row, with its filter; an INT
    # key too.
    df = spark.createDataFrame([(v,) for v in [1, 1, 2, 2, -3, -3]], "k INT")
    fm = FileMetrics(rows=6, lower={"k": -3}, upper={"k": 2})
    filtered = UniqueCheck(check="unique", columns=["k"], filter="k > 1")
    assert (
        filtered._by_bit_words(df, compile_check(filtered, 0, {"k": "k"}), AuditContext(file_metrics=lambda: fm)) == 1
    )

    # Sparser than that, no bounds, no metrics, a key of text: the grouping counts (None here).
    df = spark.createDataFrame([(0,), (2**40,), (2**40,)], schema)
    sparse = FileMetrics(rows=3, lower={"k": 0}, upper={"k": 2**40})
    assert chk._by_bit_words(df, c, AuditContext(file_metrics=lambda: sparse)) is None
    assert chk.measure(df, c, AuditContext(file_metrics=lambda: sparse))[0] == {"c0_f": 1}
    unbounded = FileMetrics(rows=3, lower={"k": None}, upper={"k": None})
    assert chk._by_bit_words(df, c, AuditContext(file_metrics=lambda: unbounded)) is None
    assert chk._by_bit_words(df, c, AuditContext()) is None
    dense = FileMetrics(rows=3, lower={"k": 0}, upper={"k": 48})
    assert chk._by_bit_words(df, c, AuditContext(file_metrics=lambda: dense)) == 1
    text = spark.createDataFrame([("a",), ("a",)], "k STRING")
    strings = FileMetrics(rows=2, lower={"k": "a"}, upper={"k": "a"})
    assert chk._by_bit_words(text, c, AuditContext(file_metrics=lambda: strings)) is None
    assert chk.measure(text, c, AuditContext(file_metrics=lambda: strings))[0] == {"c0_f": 1}
