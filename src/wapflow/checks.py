"""Declare checks from Python, with the same validation as wap.toml.

    from wapflow import checks as C
    run_wap(lh, "nyc.trips", files, extra_checks=[C.not_null("passenger_count"), C.unique("trip_id")])
"""

from __future__ import annotations

from typing import Any

from wapflow.audit.spec import (
    AcceptedValuesCheck,
    BetweenCheck,
    CustomSqlCheck,
    ExpressionCheck,
    ForeignKeyCheck,
    FreshnessCheck,
    MaxLengthCheck,
    NotNullCheck,
    NullRateCheck,
    RegexCheck,
    RowCountCheck,
    UniqueCheck,
    UniqueInTableCheck,
    VolumeCheck,
)


def not_null(column: str, **kw: Any) -> NotNullCheck:
    return NotNullCheck(check="not_null", column=column, **kw)


def between(column: str, min: Any = None, max: Any = None, **kw: Any) -> BetweenCheck:  # noqa: A002
    return BetweenCheck(check="between", column=column, min=min, max=max, **kw)


def accepted_values(column: str, values: list[Any], **kw: Any) -> AcceptedValuesCheck:
    return AcceptedValuesCheck(check="accepted_values", column=column, values=values, **kw)


def regex(column: str, pattern: str, **kw: Any) -> RegexCheck:
    return RegexCheck(check="regex", column=column, pattern=pattern, **kw)


def max_length(column: str, max: int, **kw: Any) -> MaxLengthCheck:  # noqa: A002
    return MaxLengthCheck(check="max_length", column=column, max=max, **kw)


def expression(sql: str, **kw: Any) -> ExpressionCheck:
    return ExpressionCheck(check="expression", sql=sql, **kw)


def null_rate(column: str, max: float, **kw: Any) -> NullRateCheck:  # noqa: A002
    return NullRateCheck(check="null_rate", column=column, max=max, **kw)


def row_count(min: int | None = None, max: int | None = None, **kw: Any) -> RowCountCheck:  # noqa: A002
    return RowCountCheck(check="row_count", min=min, max=max, **kw)


def unique(*columns: str, **kw: Any) -> UniqueCheck:
    return UniqueCheck(check="unique", columns=list(columns), **kw)


def unique_in_table(*columns: str, **kw: Any) -> UniqueInTableCheck:
    return UniqueInTableCheck(check="unique_in_table", columns=list(columns), **kw)


def foreign_key(column: str, table: str, references: str | None = None, **kw: Any) -> ForeignKeyCheck:
    return ForeignKeyCheck(check="foreign_key", column=column, table=table, references=references, **kw)


def freshness(column: str, max_age: str, **kw: Any) -> FreshnessCheck:
    return FreshnessCheck(check="freshness", column=column, max_age=max_age, **kw)


def volume(runs: int = 10, tolerance: float = 0.5, **kw: Any) -> VolumeCheck:
    return VolumeCheck(check="volume", runs=runs, tolerance=tolerance, **kw)


def custom_sql(sql: str, **kw: Any) -> CustomSqlCheck:
    return CustomSqlCheck(check="custom_sql", sql=sql, **kw)
