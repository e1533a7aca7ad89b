"""The reconcile check's declaration (refused when wap.toml loads, naming the table and the key) and its verdict
rule: |this - other| <= max(tolerance * |other|, abs_tolerance), counts and decimals exactly, floats within
FLOAT_SLACK. Evaluation on real DataFrames: tests/spark/test_reconcile.py."""

from __future__ import annotations

import tomllib
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import ValidationError

from wapflow import checks as C
from wapflow.audit.batch_checks import ReconcileCheck, reconciles
from wapflow.audit.checks import AuditContext
from wapflow.config import parse_config
from wapflow.errors import EXIT_USAGE, ConfigError
from wapflow.sql.identifiers import TableName

HEAD = '[[tables."shop.order_lines".checks]]\ncheck = "reconcile"\n'


def load(body: str) -> ReconcileCheck:
    cfg = parse_config(tomllib.loads(HEAD + body))
    [chk] = cfg.tables["shop.order_lines"].checks
    assert isinstance(chk, ReconcileCheck)
    return chk


def refused(body: str) -> ConfigError:
    with pytest.raises(ConfigError) as e:
        load(body)
    assert e.value.exit_code == EXIT_USAGE
    assert '[tables."shop.order_lines"] checks[0]' in e.value.message  # names the table and the check
    assert "Value error" not in e.value.message
    return e.value


def test_a_declaration_loads_with_its_defaults() -> None:
    chk = load('metric = "sum"\ncolumn = "amount"\nagainst = "shop.orders"\n')
    assert (chk.other_column, chk.tolerance, chk.abs_tolerance, chk.severity) == ("amount", 0.0, 0.0, "error")
    assert chk.display_name() == "reconcile(sum(amount) = sum(amount) of shop.orders)"
    rows = load('metric = "rows"\nagainst = "shop.orders"\n')
    assert rows.columns() == [] and rows.display_name() == "reconcile(rows = rows of shop.orders)"


def test_a_sum_without_its_column_is_refused() -> None:
    e = refused('metric = "sum"\nagainst = "shop.orders"\nagainst_column = "total"\n')
    assert 'metric = "sum" needs column = "..."' in e.message


def test_a_count_of_rows_with_a_column_is_refused() -> None:
    e = refused('metric = "rows"\ncolumn = "amount"\nagainst = "shop.orders"\n')
    assert 'write metric = "sum"' in e.message


@pytest.mark.parametrize("key", ["tolerance", "abs_tolerance"])
@pytest.mark.parametrize("value", ["-0.01", "nan", "inf"])
def test_a_negative_or_endless_tolerance_is_refused(key: str, value: str) -> None:
    e = refused(f'metric = "rows"\nagainst = "shop.orders"\n{key} = {value}\n')
    assert f"checks[0].{key}:" in e.message


def test_against_must_be_a_table_name() -> None:
    e = refused('metric = "rows"\nagainst = "orders"\n')
    assert "checks[0].against:" in e.message and "needs a namespace" in e.message and "default.orders" in e.message
    e = refused('metric = "rows"\n')
    assert "missing required key 'against'" in e.message


def test_an_unknown_metric_is_refused_with_the_ones_known() -> None:
    e = refused('metric = "count"\nagainst = "shop.orders"\n')
    assert "'rows' or 'sum'" in e.message


def test_the_python_constructor_validates_as_wap_toml_does() -> None:
    chk = C.reconcile("sum", "shop.orders", "amount", against_column="total", tolerance=0.01)
    assert chk == load(
        'metric = "sum"\ncolumn = "amount"\nagainst = "shop.orders"\nagainst_column = "total"\ntolerance = 0.01\n'
    )
    with pytest.raises(ValidationError, match=r'needs column = "\.\.\."'):
        C.reconcile("sum", "shop.orders")
    with pytest.raises(ValidationError, match="greater than or equal to 0"):
        C.reconcile("rows", "shop.orders", tolerance=-1)


def test_the_threshold_says_what_is_allowed() -> None:
    def threshold(chk: ReconcileCheck) -> str:
        return chk.compile({}).threshold

    assert threshold(C.reconcile("rows", "shop.orders")) == "= rows of shop.orders"
    assert threshold(C.reconcile("sum", "shop.orders", "amount", tolerance=0.001)) == (
        "within 0.1% of sum(amount) of shop.orders"
    )
    assert threshold(C.reconcile("rows", "shop.orders", tolerance=0.02, abs_tolerance=3)) == (
        "within the larger of 2% and 3 of rows of shop.orders"
    )


@pytest.mark.parametrize(
    ("mine", "theirs", "tolerance", "abs_tolerance", "ok"),
    [
        (10, 10, 0.0, 0.0, True),
        (11, 10, 0.0, 0.0, False),
        (11, 10, 0.1, 0.0, True),  # 1 <= 0.1 * 10
        (12, 10, 0.1, 0.0, False),
        (12, 10, 0.1, 2.0, True),  # the larger tolerance applies
        (1, 0, 0.5, 0.0, False),  # a relative tolerance of 0 allows nothing
        (1, 0, 0.5, 1.0, True),
        (Decimal("100.01"), Decimal("100.00"), 0.0001, 0.0, True),  # exactly 0.01 <= 0.0001 * 100
        (Decimal("100.02"), Decimal("100.00"), 0.0001, 0.0, False),
        (0.1 + 0.2, 0.3, 0.0, 0.0, True),  # float rounding, within FLOAT_SLACK
        (0.31, 0.3, 0.0, 0.0, False),
        (Decimal("0.30"), 0.3, 0.0, 0.0, True),
    ],
)
def test_the_rule(mine: object, theirs: object, tolerance: float, abs_tolerance: float, ok: bool) -> None:
    assert reconciles(mine, theirs, tolerance, abs_tolerance)[0] is ok


def test_the_verdict_shows_both_figures_and_the_difference() -> None:
    chk = C.reconcile("sum", "shop.orders", "amount", against_column="total", tolerance=0.01)
    c: Any = SimpleNamespace(key="c0")  # the verdict reads its values by the check's key only (no Spark here)
    ctx = AuditContext(this_table=TableName.parse("shop.order_lines"))
    v = chk.verdict(c, {"c0_v": Decimal("95.50"), "c0_a": Decimal("100.00")}, 3, ctx)
    assert not v.ok and v.failing_rows == 0
    assert v.observed == (
        "shop.order_lines sum(amount) = 95.50; shop.orders sum(total) = 100.00; difference 4.50 (4.50%)"
    )
    v = chk.verdict(c, {"c0_v": Decimal("99.50"), "c0_a": Decimal("100.00")}, 3, ctx)
    assert v.ok
