"""Checks compiled to Spark aggregate expressions.

Row-level checks and row_count are plain aggregates, so they ride along the write itself as a Spark
Observation: no extra scan at all. `unique` needs a shuffle of its key columns (one job per unique
check, reading only those columns of the new rows). A run resumed from its branch evaluates
everything with one aggregation over the new rows instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from wapflow.audit.report import AuditReport, CheckResult
from wapflow.config import (
    AcceptedValuesCheck,
    BetweenCheck,
    Check,
    ExpressionCheck,
    NotNullCheck,
    RowCountCheck,
    UniqueCheck,
)
from wapflow.errors import ConfigError, did_you_mean

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


def resolve_columns(checks: list[Check], columns: list[str], *, table: str) -> dict[str, str]:
    """Map every column a check names to the batch's spelling; unknown names are config errors."""
    by_lower = {c.lower(): c for c in columns}
    mapping: dict[str, str] = {}
    for chk in checks:
        for col in chk.columns():
            actual = by_lower.get(col.lower())
            if actual is None:
                raise ConfigError(
                    f"check '{chk.display_name()}' on {table} names column '{col}', which the data does not have"
                    f"{did_you_mean(col, columns)}",
                    hint=f"columns are: {', '.join(columns)}",
                )
            mapping[col] = actual
    return mapping


def _analysis_message(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def validate_expressions(checks: list[Check], df: "DataFrame", *, table: str) -> None:
    """Analyze each expression check against the batch schema before anything is written."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BooleanType

    for chk in checks:
        if not isinstance(chk, ExpressionCheck):
            continue
        try:
            dtype = df.select(F.expr(chk.sql).alias("_c")).schema["_c"].dataType
        except Exception as e:  # noqa: BLE001 - AnalysisException / ParseException
            raise ConfigError(
                f"check '{chk.display_name()}' on {table}: {_analysis_message(e)}",
                hint=f"the SQL must be a boolean over the columns: {', '.join(df.columns)}",
            ) from None
        if not isinstance(dtype, BooleanType):
            raise ConfigError(
                f"check '{chk.display_name()}' on {table} is a {dtype.simpleString()}, not a boolean",
                hint="write a condition that is true for good rows, e.g. dropoff_at >= pickup_at",
            )


@dataclass
class _Compiled:
    check: Check
    agg: "Column"
    threshold: str


def _col(name: str, mapping: dict[str, str]) -> "Column":
    from pyspark.sql import functions as F

    return F.col(f"`{mapping[name]}`")


def _count_if(cond: "Column") -> "Column":
    from pyspark.sql import functions as F

    return F.sum(F.when(cond, F.lit(1)).otherwise(F.lit(0)))


def _compile(chk: Check, mapping: dict[str, str], i: int) -> _Compiled:
    from pyspark.sql import functions as F

    alias = f"c{i}"
    if isinstance(chk, NotNullCheck):
        return _Compiled(chk, _count_if(_col(chk.column, mapping).isNull()).alias(alias), "0 nulls")
    if isinstance(chk, BetweenCheck):
        c = _col(chk.column, mapping)
        outside = F.lit(False)
        if chk.min is not None:
            outside = outside | (c < F.lit(chk.min))
        if chk.max is not None:
            outside = outside | (c > F.lit(chk.max))
        # Nulls are not "outside": not_null says whether nulls are allowed.
        return _Compiled(chk, _count_if(c.isNotNull() & outside).alias(alias), f"[{chk.min}, {chk.max}]")
    if isinstance(chk, AcceptedValuesCheck):
        c = _col(chk.column, mapping)
        return _Compiled(
            chk, _count_if(c.isNotNull() & ~c.isin(list(chk.values))).alias(alias), f"in {list(chk.values)}"
        )
    if isinstance(chk, ExpressionCheck):
        # A row passes only when the condition is true; NULL (unknown) fails, as in SQL CHECK constraints.
        return _Compiled(chk, _count_if(~F.coalesce(F.expr(chk.sql), F.lit(False))).alias(alias), "true for every row")
    if isinstance(chk, RowCountCheck):
        return _Compiled(chk, F.count(F.lit(1)).alias(alias), f"[{chk.min}, {chk.max}]")
    if isinstance(chk, UniqueCheck):
        # Not an aggregate over rows: evaluated by _duplicates() with a group-by on the key.
        return _Compiled(chk, F.lit(None).alias(alias), "0 duplicates")
    raise ConfigError(f"unsupported check {chk!r}")  # pragma: no cover - the config union is closed


def _needs_shuffle(chk: Check) -> bool:
    return isinstance(chk, UniqueCheck)


def observed_metrics(checks: list[Check], columns: list[str], *, table: str) -> list["Column"]:
    """Aggregates that can be computed while the batch is being written (Spark Observation)."""
    from pyspark.sql import functions as F

    mapping = resolve_columns(checks, columns, table=table)
    aggs = [F.count(F.lit(1)).alias("_rows")]
    aggs += [_compile(chk, mapping, i).agg for i, chk in enumerate(checks) if not _needs_shuffle(chk)]
    return aggs


def _duplicates(df: "DataFrame", chk: UniqueCheck, mapping: dict[str, str]) -> int:
    """Rows beyond the first for each key (NULL keys are ignored, as in SQL UNIQUE and dbt's test)."""
    from pyspark.sql import functions as F

    keys = [_col(c, mapping) for c in chk.columns()]
    not_null = F.lit(True)
    for k in keys:
        not_null = not_null & k.isNotNull()
    groups = df.select(*keys).where(not_null).groupBy(*keys).count().where(F.col("count") > 1)
    row = groups.agg(F.sum(F.col("count") - 1).alias("d")).first()
    return int(row["d"] or 0)


def run_checks(
    df: "DataFrame", checks: list[Check], *, table: str, observed: dict[str, Any] | None = None
) -> AuditReport:
    """Evaluate every check over df (the new rows).

    `observed` holds metrics already computed during the write; what is missing is computed with
    one aggregation over df, plus one key group-by per unique check.
    """
    from pyspark.sql import functions as F

    mapping = resolve_columns(checks, df.columns, table=table)
    compiled = [_compile(chk, mapping, i) for i, chk in enumerate(checks)]
    values: dict[str, Any] = dict(observed or {})
    missing = [
        c.agg for i, c in enumerate(compiled) if not _needs_shuffle(c.check) and f"c{i}" not in values
    ]
    if missing or "_rows" not in values:
        values.update(df.agg(F.count(F.lit(1)).alias("_rows"), *missing).first().asDict())
    for i, c in enumerate(compiled):
        if isinstance(c.check, UniqueCheck) and f"c{i}" not in values:
            values[f"c{i}"] = _duplicates(df, c.check, mapping)
    rows = int(values["_rows"] or 0)
    results = [_result(comp, int(values[f"c{i}"] or 0), rows) for i, comp in enumerate(compiled)]
    return AuditReport(rows=rows, checks=results)


def _result(comp: _Compiled, value: int, rows: int) -> CheckResult:
    chk = comp.check
    observed: Any
    if isinstance(chk, RowCountCheck):
        ok = (chk.min is None or value >= chk.min) and (chk.max is None or value <= chk.max)
        observed, failing = value, 0
    else:
        ok = value == 0
        observed, failing = value, value
    status = "passed" if ok else ("warned" if chk.severity == "warn" else "failed")
    return CheckResult(
        name=chk.display_name(),
        check=chk.check,
        severity=chk.severity,
        status=status,  # type: ignore[arg-type]
        observed=observed,
        failing_rows=failing,
        threshold=comp.threshold,
        columns=chk.columns(),
    )
