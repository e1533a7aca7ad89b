"""wapflow.display, the one formatter of values for people, and the places issue 62 found numbers printed wrong:
`wap diff`'s `10001 → 1.2e+04`, the dashboard's review page with main's timestamp bound in epoch microseconds,
reconcile's `difference 4.36557456851e-10 (0.00%)`, and big counts in tables without thousands separators. All
without Spark: service-level functions fed plain data."""

from __future__ import annotations

import json
from datetime import date, datetime
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

import pytest

from wapflow import checks as C
from wapflow import display
from wapflow.audit.checks import AuditContext
from wapflow.audit.metrics import FileMetrics
from wapflow.service.diff import notable_change, side_by_side
from wapflow.sql.identifiers import TableName


@pytest.mark.parametrize(
    ("v", "shown"),
    [
        (12001, "12001"),
        (12001.0, "12001"),  # a whole float (an id the audit recorded as a float) exactly, no exponent
        (1234567.0, "1234567"),
        (2**53, "9007199254740992"),
        (Decimal("12001"), "12001"),
        (Decimal("12001.00"), "12001"),
        (1234567.8, "1234568"),  # the whole part is never rounded away
        (759.34, "759.3"),
        (212.5, "212.5"),
        (0.003, "0.003"),
        (0.0001234, "0.0001234"),  # ordinary small magnitudes without an exponent
        (0.5, "0.5"),
        (-42.25, "-42.25"),
        (0.0, "0"),
        (4.36557456851e-10, "< 0.000001"),
        (-1e-9, "> -0.000001"),
        (float("nan"), "NaN"),
        (float("inf"), "∞"),
        (True, "yes"),
    ],
)
def test_a_number_reads_exactly_or_to_four_significant_digits(v: Any, shown: str) -> None:
    assert display.number(v) == shown


def test_thousands_are_separated_only_when_asked() -> None:
    assert display.number(1234567, grouped=True) == "1,234,567"
    assert display.number(12001.0, grouped=True) == "12,001"
    assert display.number(-1234567.8, grouped=True) == "-1,234,568"
    assert display.number(999, grouped=True) == "999"
    assert display.number(1234567) == "1234567"


def test_a_share_is_a_percentage_to_two_decimals_and_a_tiny_one_is_not_zero() -> None:
    assert display.percent(0.045) == "4.50%"
    assert display.percent(0.0) == "0.00%"
    assert display.percent(3.6e-14) == "< 0.01%"
    assert display.percent(-3.6e-14) == "> -0.01%"


def test_iceberg_time_bounds_read_as_times_where_the_type_says_so() -> None:
    assert display.time_bound("timestamp", 1795132800000000) == datetime(2026, 11, 20)
    assert display.time_bound("timestamp_ns", 1795132800000000123) == datetime(2026, 11, 20)
    assert display.time_bound("date", 20000) == date(2024, 10, 4)
    local = display.time_bound("timestamptz", 1795132800000000)
    assert isinstance(local, datetime) and local.tzinfo is None  # Spark's TIMESTAMP: naive local time
    assert local == datetime.fromtimestamp(1795132800)
    assert display.time_bound("long", 1795132800000000) == 1795132800000000
    assert display.time_bound("timestamp", "2026-11-20 00:00:00") == "2026-11-20 00:00:00"
    assert display.when(datetime(2026, 11, 20, 8, 30, 1, 500)) == "2026-11-20 08:30:01"
    assert display.when(date(2026, 11, 20)) == "2026-11-20"


def _batch(**bounds: tuple[float | str, float | str]) -> dict[tuple[str, str], float | str]:
    out: dict[tuple[str, str], float | str] = {("schema", ""): json.dumps(list(bounds))}
    for col, (lo, hi) in bounds.items():
        out[("min", col)], out[("max", col)] = lo, hi
        out[("null_fraction", col)] = 0.0
    return out


def test_diff_shows_a_whole_bound_exactly() -> None:
    """Symptom 1: main's int bound beside the batch's recorded float read `10001 → 1.2e+04`."""
    main = FileMetrics(rows=10, null_counts={"order_id": 0}, lower={"order_id": 9000}, upper={"order_id": 10001})
    main.columns.add("order_id")
    [col] = side_by_side(main, _batch(order_id=(9500.0, 12001.0)))
    assert notable_change(col) == "order_id: max 10001 → 12001"


def test_the_diff_table_cell_of_a_whole_float_is_exact_and_grouped() -> None:
    from wapflow.cli.review import _stat

    side: Any = {"null_fraction": 0.0, "min": 12001.0, "max": 1234567.0, "mean": 759.34}
    assert [_stat(side, s) for s in ("min", "max", "mean", "null_fraction")] == ["12,001", "1,234,567", "759.3", "0"]


def test_the_review_page_reads_main_s_timestamp_bounds_as_times() -> None:
    """Symptom 2: the dashboard's review queue decoded main's bounds with from_bytes alone, so a timestamp column's
    min was its epoch microseconds (1795132800000000) beside the batch's time."""
    pytest.importorskip("pyiceberg")
    from pyiceberg.conversions import to_bytes
    from pyiceberg.schema import Schema
    from pyiceberg.types import DateType, LongType, NestedField, TimestampType

    from wapflow.service.review_queue import _main_metrics

    schema = Schema(
        NestedField(1, "ordered_at", TimestampType(), required=False),
        NestedField(2, "day", DateType(), required=False),
        NestedField(3, "order_id", LongType(), required=False),
    )
    lo = {1: to_bytes(TimestampType(), 1795132800000000), 2: to_bytes(DateType(), 20000), 3: to_bytes(LongType(), 7)}
    file = SimpleNamespace(
        record_count=3,
        value_counts={1: 3, 2: 3, 3: 3},
        null_value_counts={1: 0, 2: 0, 3: 0},
        lower_bounds=lo,
        upper_bounds=lo,
    )
    tbl: Any = SimpleNamespace(
        schema=lambda: schema,
        current_snapshot=lambda: object(),
        scan=lambda: SimpleNamespace(plan_files=lambda: [SimpleNamespace(file=file)]),
    )
    main = _main_metrics(tbl)
    assert main.lower == {"ordered_at": datetime(2026, 11, 20), "day": date(2024, 10, 4), "order_id": 7}
    col = side_by_side(main, _batch(ordered_at=("2036-01-01 00:00:00", "2036-01-02 00:00:00")))[0]
    assert col["main"] is not None and col["main"]["min"] == "2026-11-20 00:00:00"
    assert notable_change(col) == "ordered_at: max 2026-11-20 00:00:00 → 2036-01-02 00:00:00"


def test_reconcile_says_a_tiny_float_difference_in_words() -> None:
    """Symptom 3: a float sum's rounding noise read `difference 4.36557456851e-10 (0.00%)`."""
    chk = C.reconcile("sum", "shop.orders", "amount", against_column="total", tolerance=0.01)
    c: Any = SimpleNamespace(key="c0")
    ctx = AuditContext(this_table=TableName.parse("shop.order_lines"))
    mine = 12001.5 + 4.36557456851e-10
    v = chk.verdict(c, {"c0_v": mine, "c0_a": 12001.5}, 3, ctx)
    assert v.ok
    assert v.observed.endswith("; difference < 0.000001 (< 0.01%)"), v.observed
    v = chk.verdict(c, {"c0_v": 12001.5, "c0_a": 12100.25}, 3, ctx)
    assert v.observed.endswith("; difference 98.75 (0.82%)"), v.observed


def test_big_counts_in_tables_are_grouped_and_json_keeps_the_number(capsys: pytest.CaptureFixture[str]) -> None:
    """Symptom 4: `wap` tables printed 1234567 rows as `1234567`; --json keeps the number."""
    from rich.console import Console

    from wapflow.cli.output import cell, emit_json, rows_table

    assert cell(1234567) == "1,234,567" and cell(12001.0) == "12,001" and cell(None) == "" and cell(True) == "yes"
    console = Console(width=200, record=True)
    console.print(rows_table(None, [{"table": "shop.orders", "rows": 1234567}], ["table", "rows"]))
    assert "1,234,567" in console.export_text()
    capsys.readouterr()
    emit_json({"rows": 1234567})
    assert json.loads(capsys.readouterr().out) == {"rows": 1234567}


def test_a_metric_value_in_wap_metrics_is_exact() -> None:
    from wapflow.cli.runs import _value

    row: Any = {"value": 1234567.0, "text": None, "metric": "row_count"}
    assert _value(row) == "1,234,567"
    assert _value({**row, "value": 4.36557456851e-10}) == "< 0.000001"


def test_ids_in_tables_are_never_grouped(monkeypatch: pytest.MonkeyPatch) -> None:
    """A snapshot id or an order id is copied, not counted: no separators in an id column, nor in the bounds of an
    id column in `wap diff`'s table."""
    from rich.console import Console

    from wapflow.cli.output import rows_table
    from wapflow.cli.review import _show_diff

    console = Console(width=200, record=True)
    rows = [{"snapshot_id": 6226255924117664365, "order_id": 12001, "rows": 12001}]
    console.print(rows_table(None, rows, ["snapshot_id", "order_id", "rows"]))
    shown = console.export_text()
    assert "6226255924117664365" in shown and "│ 12001 " in shown and "12,001" in shown

    doc: Any = {
        "message": "publishing run r1 would add 2,000 row(s)",
        "rows": {"added": 2000, "updated": 0, "deleted": 0, "replaced": 0, "main_rows": 10},
        "keys": None,
        "columns": [
            {
                "column": "order_id",
                "on": "both",
                "main": {"null_fraction": 0.0, "min": 9000, "max": 10001, "mean": None},
                "batch": {"null_fraction": 0.0, "min": 9500.0, "max": 12001.0, "mean": None},
            }
        ],
    }
    console = Console(width=200, record=True)
    monkeypatch.setattr("wapflow.cli.review.out", console)
    _show_diff(doc)
    shown = console.export_text()
    assert "10001 → 12001" in shown and "1.2e+04" not in shown and "2,000" in shown, shown


def test_rounded_keeps_a_number_as_number_shows_it() -> None:
    from wapflow.display import number, rounded

    for v in (0.16666666, 12.3456, 759.308, 0.000123456, 1234567.89, -2.71828):
        assert number(rounded(v)) == number(v), v
    assert rounded(0.16666666) == 0.1667 and rounded(1234567.89) == 1234568.0
    assert rounded(3.0) == 3.0 and rounded(1e-9) == 1e-9 and rounded(float("inf")) == float("inf")
