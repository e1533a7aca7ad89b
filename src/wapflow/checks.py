"""Declare checks from Python, with the same validation as wap.toml.

from wapflow import checks as C
run_wap(lh, "nyc.trips", files, extra_checks=[C.not_null("passenger_count"), C.unique("trip_id")])
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict, Unpack

from wapflow.audit import batch_checks as B
from wapflow.audit import row_checks as R
from wapflow.audit.checktype import Scalar


class Options(TypedDict, total=False):
    """What every check accepts besides its own parameters (the same keys as in wap.toml)."""

    name: str | None
    severity: Literal["error", "warn"]
    filter: str | None


class RowOptions(Options, total=False):
    """Row-level checks also take `mostly`: the fraction of rows that must pass."""

    mostly: float | None


# `min` and `max` shadow builtins on purpose: they are the keys wap.toml uses for the same checks.


def _named(params: dict[str, Any]) -> dict[str, Any]:
    """A helper's own parameters (its `locals()` on entry) as the check's fields of the same names; `kw`, the
    options every check takes, is passed on by itself."""
    return {k: v for k, v in params.items() if k != "kw"}


def not_null(column: str, **kw: Unpack[RowOptions]) -> R.NotNullCheck:
    return R.NotNullCheck(check="not_null", column=column, **kw)


def between(
    column: str,
    min: Scalar | None = None,  # noqa: A002 - the wap.toml key
    max: Scalar | None = None,  # noqa: A002 - the wap.toml key
    *,
    min_inclusive: bool = True,
    max_inclusive: bool = True,
    **kw: Unpack[RowOptions],
) -> R.BetweenCheck:
    return R.BetweenCheck(check="between", **_named(locals()), **kw)


def accepted_values(column: str, values: list[Scalar], **kw: Unpack[RowOptions]) -> R.AcceptedValuesCheck:
    return R.AcceptedValuesCheck(check="accepted_values", column=column, values=values, **kw)


def regex(column: str, pattern: str, **kw: Unpack[RowOptions]) -> R.RegexCheck:
    return R.RegexCheck(check="regex", column=column, pattern=pattern, **kw)


def max_length(column: str, max: int, **kw: Unpack[RowOptions]) -> R.MaxLengthCheck:  # noqa: A002 - the wap.toml key
    return R.MaxLengthCheck(check="max_length", column=column, max=max, **kw)


def expression(sql: str, **kw: Unpack[RowOptions]) -> R.ExpressionCheck:
    return R.ExpressionCheck(check="expression", sql=sql, **kw)


def null_rate(column: str, max: float, **kw: Unpack[Options]) -> B.NullRateCheck:  # noqa: A002 - the wap.toml key
    return B.NullRateCheck(check="null_rate", column=column, max=max, **kw)


def row_count(
    min: int | None = None,  # noqa: A002 - the wap.toml key
    max: int | None = None,  # noqa: A002 - the wap.toml key
    **kw: Unpack[Options],
) -> B.RowCountCheck:
    return B.RowCountCheck(check="row_count", min=min, max=max, **kw)


def unique(*columns: str, **kw: Unpack[Options]) -> B.UniqueCheck:
    return B.UniqueCheck(check="unique", columns_=list(columns), **kw)


def unique_in_table(*columns: str, **kw: Unpack[Options]) -> B.UniqueInTableCheck:
    return B.UniqueInTableCheck(check="unique_in_table", columns_=list(columns), **kw)


def foreign_key(column: str, table: str, references: str | None = None, **kw: Unpack[Options]) -> B.ForeignKeyCheck:
    return B.ForeignKeyCheck(check="foreign_key", column=column, table=table, references=references, **kw)


def reconcile(
    metric: Literal["rows", "sum"],
    against: str,
    column: str | None = None,
    *,
    against_column: str | None = None,
    tolerance: float = 0.0,
    abs_tolerance: float = 0.0,
    **kw: Unpack[Options],
) -> B.ReconcileCheck:
    return B.ReconcileCheck(
        check="reconcile",
        metric=metric,
        against=against,
        column=column,
        against_column=against_column,
        tolerance=tolerance,
        abs_tolerance=abs_tolerance,
        **kw,
    )


def control_totals(
    manifest: str = "_manifest.json",
    *,
    declared_in: Literal["manifest", "metadata", "table", "trailer"] = "manifest",
    control_table: str | None = None,
    trailer: str = "#",
    sums: list[str] | None = None,
    tolerance: float = 0.0,
    abs_tolerance: float = 0.0,
    without_manifest: Literal["block", "warn"] = "block",
    wait: str | None = None,
    **kw: Unpack[Options],
) -> B.ControlTotalsCheck:
    return B.ControlTotalsCheck(check="control_totals", **_named(locals()), **kw)


def freshness(column: str, max_age: str, **kw: Unpack[Options]) -> B.FreshnessCheck:
    return B.FreshnessCheck(check="freshness", column=column, max_age=max_age, **kw)


def volume(
    runs: int = 10,
    tolerance: float | None = None,
    min_history: int = 3,
    *,
    sensitivity: float = 3.0,
    seasonality: Literal["auto", "none", "weekly"] = "auto",
    on_short_history: Literal["pass", "warn"] = "warn",
    **kw: Unpack[Options],
) -> B.VolumeCheck:
    return B.VolumeCheck(check="volume", **_named(locals()), **kw)


def anomaly(
    metric: Literal[
        "row_count", "duplicate_fraction", "null_fraction", "distinct", "min", "max", "mean", "sum", "mean_length"
    ],
    column: str | None = None,
    *,
    min_history: int = 7,
    sensitivity: float = 3.0,
    window: int = 30,
    seasonality: Literal["auto", "none", "weekly"] = "auto",
    on_short_history: Literal["pass", "warn"] = "warn",
    **kw: Unpack[Options],
) -> B.AnomalyCheck:
    return B.AnomalyCheck(check="anomaly", **_named(locals()), **kw)


def schema_change(
    allow: list[Literal["added", "dropped", "retyped"]] | None = None, **kw: Unpack[Options]
) -> B.SchemaChangeCheck:
    return B.SchemaChangeCheck(check="schema_change", allow=allow or [], **kw)


def max_change(
    metric: str, *, max_rows: int | None = None, max_fraction: float | None = None, **kw: Unpack[Options]
) -> B.MaxChangeCheck:
    return B.MaxChangeCheck(check="max_change", metric=metric, max_rows=max_rows, max_fraction=max_fraction, **kw)


def custom_sql(sql: str, **kw: Unpack[Options]) -> B.CustomSqlCheck:
    return B.CustomSqlCheck(check="custom_sql", sql=sql, **kw)
