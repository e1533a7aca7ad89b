"""The reconcile check on real Spark: a table's new rows (or a column's sum) against another table's new rows of
the same multi-table run, given to the audit as AuditContext.batch_of, as the audit step gives a group's
siblings. Outside a multi-table run it fails the run (exit 2) before anything is published."""

from __future__ import annotations

import json
import os
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from support.data import write_parquet
from wapflow import checks as C
from wapflow.audit.checks import AuditContext, AuditPlan, evaluate, validate_checks
from wapflow.audit.report import AuditReport
from wapflow.cli import app
from wapflow.config import load_config
from wapflow.errors import EXIT_USAGE, ConfigError
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.pipeline import run_wap
from wapflow.sql.identifiers import TableName

pytestmark = pytest.mark.spark

ORDERS, LINES = TableName.parse("shop.orders"), TableName.parse("shop.order_lines")
ORDER_SCHEMA = "order_id BIGINT, total DECIMAL(12,2), total_f DOUBLE"
LINE_SCHEMA = "order_id BIGINT, line INT, amount DECIMAL(12,2), amount_f DOUBLE, status STRING"


def order_rows(spark: Any, totals: list[str]) -> Any:
    rows = [(i + 1, Decimal(t), float(t)) for i, t in enumerate(totals)]
    return spark.createDataFrame(rows, ORDER_SCHEMA)


def line_rows(spark: Any, amounts: list[str], status: list[str] | None = None) -> Any:
    status = status or ["ok"] * len(amounts)
    rows = [(1 + i // 2, i, Decimal(a), float(a), s) for i, (a, s) in enumerate(zip(amounts, status, strict=True))]
    return spark.createDataFrame(rows, LINE_SCHEMA)


def group_of(**batches: Any) -> Any:
    """AuditContext.batch_of of a multi-table run of these tables (table name -> its new rows), as the audit step
    makes it: a table outside the run is a ConfigError."""

    def batch_of(t: TableName) -> Any:
        if t.dotted not in batches:
            raise ConfigError(f"{t} is not a table of this multi-table run ({', '.join(sorted(batches))})")
        return batches[t.dotted]

    return batch_of


def audit(checks: list[Any], lines: Any, batch_of: Any) -> AuditReport:
    plan = AuditPlan(checks, lines.columns, table=LINES.dotted)
    return evaluate(plan, lines, ctx=AuditContext(this_table=LINES, batch_of=batch_of))


def test_a_sum_within_the_tolerance_passes_and_outside_it_fails(spark: Any) -> None:
    orders = order_rows(spark, ["60.00", "40.00"])  # 100.00
    lines = line_rows(spark, ["30.00", "30.00", "20.00", "20.50"])  # 100.50: 0.5% above
    group = group_of(**{"shop.orders": orders})
    checks = [
        C.reconcile("sum", "shop.orders", "amount", against_column="total", tolerance=0.01, name="within 1%"),
        C.reconcile("sum", "shop.orders", "amount", against_column="total", tolerance=0.001, name="within 0.1%"),
        C.reconcile("sum", "shop.orders", "amount", against_column="total", abs_tolerance=0.5, name="within 0.5"),
        C.reconcile("sum", "shop.orders", "amount", against_column="total", name="exact"),
    ]
    report = audit(checks, lines, group)
    got = {c.name: c for c in report.checks}
    assert {n: c.status for n, c in got.items()} == {
        "within 1%": "passed",
        "within 0.1%": "failed",
        "within 0.5": "passed",  # 0.50 <= 0.5, exactly: decimals are compared as decimals
        "exact": "failed",
    }
    assert not report.passed
    exact = got["exact"]
    assert exact.observed == (
        "shop.order_lines sum(amount) = 100.50; shop.orders sum(total) = 100.00; difference 0.50 (0.50%)"
    )
    assert exact.threshold == "= sum(total) of shop.orders" and exact.source == "scan"
    assert got["within 0.1%"].threshold == "within 0.1% of sum(total) of shop.orders"


def test_double_sums_of_the_same_amounts_reconcile_exactly_and_a_cent_apart_do_not(spark: Any) -> None:
    orders = order_rows(spark, ["0.30"])
    same = line_rows(spark, ["0.10", "0.20"])  # 0.1 + 0.2 is 0.30000000000000004 in doubles
    cent = line_rows(spark, ["0.10", "0.21"])
    chk = C.reconcile("sum", "shop.orders", "amount_f", against_column="total_f")
    group = group_of(**{"shop.orders": orders})
    assert audit([chk], same, group).checks[0].status == "passed"
    failed = audit([chk], cent, group).checks[0]
    assert failed.status == "failed" and failed.observed.startswith("shop.order_lines sum(amount_f) = 0.31;")


def test_rows_against_rows_and_a_filter_on_this_tables_rows(spark: Any) -> None:
    orders = order_rows(spark, ["1", "2", "3"])
    lines = line_rows(spark, ["1", "2", "3", "4", "5"], ["ok", "ok", "ok", "void", "void"])
    group = group_of(**{"shop.orders": orders})
    checks = [
        C.reconcile("rows", "shop.orders", name="all lines"),
        C.reconcile("rows", "shop.orders", abs_tolerance=2, name="within 2"),
        C.reconcile("rows", "shop.orders", filter="status = 'ok'", name="ok lines"),
        C.reconcile("sum", "shop.orders", "amount", against_column="total", filter="status = 'ok'", name="ok sum"),
    ]
    got = {c.name: c for c in audit(checks, lines, group).checks}
    assert got["all lines"].status == "failed"
    assert got["all lines"].observed == "shop.order_lines rows = 5; shop.orders rows = 3; difference 2 (66.67%)"
    assert got["within 2"].status == "passed"
    assert got["ok lines"].status == "passed" and got["ok sum"].status == "passed"  # 1 + 2 + 3 = 6.00


def test_an_empty_batch_against_an_empty_one_reconciles(spark: Any) -> None:
    group = group_of(**{"shop.orders": order_rows(spark, []).limit(0)})
    chk = C.reconcile("sum", "shop.orders", "amount", against_column="total")
    assert audit([chk], line_rows(spark, []).limit(0), group).checks[0].status == "passed"  # no rows: a sum of 0


def test_outside_a_multi_table_run_it_is_refused(spark: Any) -> None:
    chk = C.reconcile("rows", "shop.orders")
    with pytest.raises(ConfigError) as e:
        audit([chk], line_rows(spark, ["1"]), None)
    assert e.value.exit_code == EXIT_USAGE
    assert e.value.message == (
        "check 'reconcile(rows = rows of shop.orders)' on shop.order_lines: reconcile compares tables of one "
        "multi-table run; run them together with wap run-tables"
    )
    assert e.value.hint is not None and "wap run-tables shop.order_lines=" in e.value.hint


def test_a_table_outside_the_run_or_a_column_it_lacks_is_named(spark: Any) -> None:
    group = group_of(**{"shop.orders": order_rows(spark, ["1"])})
    lines = line_rows(spark, ["1"])
    with pytest.raises(ConfigError, match=r"on shop.order_lines: shop.invoices is not a table of this multi-table"):
        audit([C.reconcile("rows", "shop.invoices")], lines, group)
    with pytest.raises(ConfigError) as e:
        audit([C.reconcile("sum", "shop.orders", "amount", against_column="totl")], lines, group)
    assert "shop.orders has no column 'totl' (did you mean 'total'" in e.value.message
    with pytest.raises(ConfigError, match=r"column 'amount' of shop.orders is .*not a number"):
        audit([C.reconcile("sum", "shop.orders", "amount")], lines, group_of(**{"shop.orders": lines_as_text(spark)}))


def lines_as_text(spark: Any) -> Any:
    return spark.createDataFrame([("a",)], "amount STRING")


def test_before_any_write_its_own_table_and_a_column_without_a_sum_are_refused(spark: Any) -> None:
    lines = line_rows(spark, ["1"])
    with pytest.raises(ConfigError) as e:
        validate_checks([C.reconcile("rows", "shop.order_lines")], lines, table=LINES.dotted)
    assert 'on shop.order_lines: against = "shop.order_lines" is the check\'s own table' in e.value.message
    assert e.value.hint is not None and "name another table of the run" in e.value.hint
    with pytest.raises(ConfigError, match=r"column 'status' is string, not a number"):
        validate_checks([C.reconcile("sum", "shop.orders", "status")], lines, table=LINES.dotted)
    validate_checks([C.reconcile("sum", "shop.orders", "amount", against_column="total")], lines, table=LINES.dotted)


def test_a_run_of_one_table_with_reconcile_fails_with_exit_2_and_main_unchanged(
    lakehouse_factory: Any, landing: Path
) -> None:
    lh = lakehouse_factory({"shop.order_lines": {"checks": [{"check": "not_null", "column": "amount"}]}})

    def lines_file(name: str, amounts: list[float]) -> str:
        ids = pa.array([1] * len(amounts), pa.int64())
        return str(write_parquet(landing / name, pa.table({"order_id": ids, "amount": pa.array(amounts)})))

    assert run_wap(lh, LINES.dotted, [lines_file("a.parquet", [5.0, 6.0])]).status == "published"
    reconcile = C.reconcile("sum", "shop.orders", "amount", against_column="total")
    res = run_wap(lh, LINES.dotted, [lines_file("b.parquet", [7.0])], extra_checks=[reconcile])
    assert res.status == "failed" and res.exit_code == EXIT_USAGE
    assert "reconcile compares tables of one multi-table run; run them together with wap run-tables" in res.message
    assert main_rows(lh, LINES) == 2


def catalog_of(lh: Any) -> Any:
    """PyIceberg's own client of the embedded catalog (not wapflow's Spark session): what a reader sees on main."""
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog(lh.catalog, uri=f"sqlite:///{lh.config.embedded_catalog_path()}", warehouse="file:///x")


def main_rows(lh: Any, table: TableName) -> int:
    catalog = catalog_of(lh)
    if not catalog.table_exists((*table.namespace, table.name)):
        return 0
    tbl = catalog.load_table((*table.namespace, table.name))
    return 0 if tbl.current_snapshot() is None else len(tbl.scan().to_arrow())


def main_head(lh: Any, table: TableName) -> int | None:
    snap = catalog_of(lh).load_table((*table.namespace, table.name)).current_snapshot()
    return None if snap is None else snap.snapshot_id


# --- end to end: `wap run-tables` on the embedded (SQLite) catalog -------------------------------------------


def shop_files(landing: Path, name: str, orders: dict[int, str], lines: list[tuple[int, str]]) -> list[str]:
    money = pa.decimal128(12, 2)
    o = pa.table(
        {
            "order_id": pa.array(list(orders), pa.int64()),
            "total": pa.array([Decimal(t) for t in orders.values()], money),
        }
    )
    ln = pa.table(
        {
            "order_id": pa.array([i for i, _ in lines], pa.int64()),
            "amount": pa.array([Decimal(a) for _, a in lines], money),
        }
    )
    return [
        f"shop.orders={write_parquet(landing / f'{name}_orders.parquet', o)}",
        f"shop.order_lines={write_parquet(landing / f'{name}_lines.parquet', ln)}",
    ]


def test_run_tables_whose_line_amounts_do_not_add_up_to_the_order_totals_is_blocked_mains_unchanged(
    spark: Any, tmp_path: Path, landing: Path
) -> None:
    """The lines' amounts must add up to their orders' totals: a run whose lines do not is blocked as a whole."""
    cfg = tmp_path / "wap.toml"
    cfg.write_text(
        f"""
[lakehouse]
warehouse = "{tmp_path / "lh"}"
catalog_name = "reconcile{os.getpid()}"
master = "local[2]"

[tables."shop.orders"]
checks = [{{ check = "not_null", column = "order_id" }}]

[[tables."shop.order_lines".checks]]
check = "reconcile"
metric = "sum"
column = "amount"
against = "shop.orders"
against_column = "total"
""",
        encoding="utf-8",
    )
    lh = Lakehouse(load_config(cfg), spark=spark)  # for catalog_of: where the catalog is, and its name
    runner = CliRunner()

    def run_tables(name: str, orders: dict[int, str], lines: list[tuple[int, str]]) -> Any:
        args = ["run-tables", *shop_files(landing, name, orders, lines), "--config", str(cfg), "--json"]
        return runner.invoke(app, args)

    first = run_tables("a", {1: "60.00", 2: "40.00"}, [(1, "30.00"), (1, "30.00"), (2, "40.00")])
    assert first.exit_code == 0, first.output
    heads = {t: main_head(lh, t) for t in (ORDERS, LINES)}
    assert main_rows(lh, ORDERS) == 2 and main_rows(lh, LINES) == 3

    # The lines add up to 45.00, the order says 50.00.
    second = run_tables("b", {3: "50.00"}, [(3, "20.00"), (3, "25.00")])
    assert second.exit_code == 1, second.output
    doc = json.loads(second.stdout)
    assert doc["status"] == "blocked" and "reconcile" in doc["message"]
    [lines_result] = [t for t in doc["tables"] if t["table"] == LINES.dotted]
    [chk] = [c for c in lines_result["checks"] if c["check"] == "reconcile"]
    assert chk["status"] == "failed"
    assert chk["observed"] == (
        "shop.order_lines sum(amount) = 45.00; shop.orders sum(total) = 50.00; difference 5.00 (10.00%)"
    )
    assert {t: main_head(lh, t) for t in (ORDERS, LINES)} == heads
    assert main_rows(lh, ORDERS) == 2 and main_rows(lh, LINES) == 3
