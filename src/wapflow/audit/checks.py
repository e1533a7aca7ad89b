"""Checks compiled to Spark, evaluated with the least reading possible.

Evidence, cheapest first:
1. Iceberg metadata of the files the run added (record counts, null counts, bounds): exact answers
   for row_count, not_null, null_rate and passing `between`, without reading data.
2. Metrics observed while the branch was written (a Spark Observation on the write): every
   row-level check and plain aggregate, at no extra scan.
3. One aggregation over the new rows for whatever is still unknown (a resumed run), plus one
   group-by per `unique`, one join per `unique_in_table` / `foreign_key`, one query per `custom_sql`.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime
from typing import TYPE_CHECKING, Any

from wapflow.audit import sqlguard

# FileMetrics belongs to the lakehouse layer that reads it from Iceberg metadata; re-exported for callers that
# import it from here.
from wapflow.audit.metrics import FileMetrics as FileMetrics
from wapflow.audit.report import AuditReport, CheckResult, Status
from wapflow.audit.spec import (
    AcceptedValuesCheck,
    BetweenCheck,
    Check,
    CustomSqlCheck,
    ExpressionCheck,
    ForeignKeyCheck,
    FreshnessCheck,
    MaxLengthCheck,
    NotNullCheck,
    NullRateCheck,
    RegexCheck,
    RowCountCheck,
    Scalar,
    UniqueCheck,
    UniqueInTableCheck,
    VolumeCheck,
    parse_duration,
)
from wapflow.errors import ConfigError, did_you_mean
from wapflow.sql.identifiers import TableName, quote, sql_string

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

SAMPLE_ROWS = 20
QUARANTINE_COLUMN = "_wap_failed_checks"


# --- validation before any write ------------------------------------------------------------


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


def _first_line(e: BaseException) -> str:
    from wapflow.spark.errors import describe

    return describe(e)


def _sql_texts(chk: Check) -> list[tuple[str, str, bool]]:
    """(what, text, is_query) for every piece of the check that is user-written SQL."""
    texts: list[tuple[str, str, bool]] = [("filter", chk.filter, False)] if chk.filter else []
    if isinstance(chk, ExpressionCheck):
        texts.append(("expression", chk.sql, False))
    if isinstance(chk, CustomSqlCheck):
        texts.append(("custom_sql", chk.sql, True))
    return texts


def guard_sql(chk: Check, spark: SparkSession, where: str) -> None:
    """Both layers of the SQL guard over the check's SQL: one read-only query / pure expression, or ConfigError.

    Declaration already ran layer 1 (pydantic); it runs again here, cheaply, because a model can be built
    without validation (model_construct) or changed afterwards.
    """
    for what, text, is_query in _sql_texts(chk):
        try:
            if is_query:
                sqlguard.check_query_text(text, what)
                sqlguard.check_query_plan(spark, text, what)
            else:
                sqlguard.check_expression_text(text, what)
                sqlguard.check_expression_plan(spark, text, what)
        except sqlguard.UnsafeSql as e:
            raise ConfigError(f"{where}: {e.problem}", hint=e.hint) from None


def _where(chk: Check, table: str | None) -> str:
    name = sqlguard.printable(chk.display_name())
    return f"check '{name}' on {table}" if table else f"check '{name}'"


def validate_checks(
    checks: list[Check],
    df: DataFrame,
    *,
    table: str,
    table_exists: Callable[[TableName], bool] | None = None,
    table_columns: Callable[[TableName], list[str]] | None = None,
) -> None:
    """Everything that can be wrong with a declaration, found against the batch schema, before writing."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BooleanType, DateType, NumericType, StringType, TimestampNTZType, TimestampType

    # First, before anything parses, analyses or runs it: user SQL must be a pure read (audit.sqlguard).
    for chk in checks:
        guard_sql(chk, df.sparkSession, _where(chk, table))
    resolve_columns(checks, df.columns, table=table)
    types = {f.name.lower(): f.dataType for f in df.schema.fields}
    for chk in checks:
        name = chk.display_name()
        where = f"check '{name}' on {table}"
        sqls = [("filter", chk.filter)] if chk.filter else []
        if isinstance(chk, ExpressionCheck):
            sqls.append(("sql", chk.sql))
        for what, text in sqls:
            try:
                dtype = df.select(F.expr(text).alias("_c")).schema["_c"].dataType
            except Exception as e:  # noqa: BLE001 - AnalysisException / ParseException
                raise ConfigError(
                    f"{where}: its {what} is not valid here: {_first_line(e)}",
                    hint=f"write a SQL condition over the columns: {', '.join(df.columns)}",
                ) from None
            if not isinstance(dtype, BooleanType):
                raise ConfigError(
                    f"{where}: its {what} is a {dtype.simpleString()}, not a boolean",
                    hint="write a condition that is true for the rows it is about, e.g. dropoff_at >= pickup_at",
                )
        col_type = types.get(chk.columns()[0].lower()) if chk.columns() else None
        if isinstance(chk, (RegexCheck, MaxLengthCheck)) and not isinstance(col_type, StringType):
            raise ConfigError(
                f"{where}: column '{chk.columns()[0]}' is {col_type.simpleString() if col_type else '?'}, not a string",
                hint=f"{chk.check} applies to string columns; use between or expression for others",
            )
        if isinstance(chk, RegexCheck):
            try:
                df.sparkSession.range(1).select(F.lit("").rlike(chk.pattern)).collect()
            except Exception as e:  # noqa: BLE001 - Java regex dialect differs slightly from Python's
                raise ConfigError(f"{where}: Spark rejects the pattern: {_first_line(e)}") from None
        if isinstance(chk, FreshnessCheck) and not isinstance(col_type, (TimestampType, TimestampNTZType, DateType)):
            raise ConfigError(
                f"{where}: column '{chk.column}' is {col_type.simpleString() if col_type else '?'}, "
                "not a timestamp or date",
                hint="freshness compares the newest value with the current time",
            )
        if isinstance(chk, BetweenCheck) and isinstance(col_type, NumericType):
            for bound in (chk.min, chk.max):
                if isinstance(bound, str):
                    raise ConfigError(f"{where}: bound {bound!r} is a string but '{chk.column}' is numeric")
        if isinstance(chk, ForeignKeyCheck):
            ref = TableName.parse(chk.table)
            if table_exists is not None and not table_exists(ref):
                raise ConfigError(
                    f"{where}: the referenced table {ref} does not exist",
                    hint="create and publish the referenced table first, or fix 'table'",
                )
            if table_columns is not None:
                cols = table_columns(ref)
                if chk.ref_column.lower() not in {c.lower() for c in cols}:
                    raise ConfigError(
                        f"{where}: {ref} has no column '{chk.ref_column}'{did_you_mean(chk.ref_column, cols)}",
                        hint=f"its columns are: {', '.join(cols)}",
                    )
        if isinstance(chk, CustomSqlCheck):
            _validate_custom_sql(chk, df, where)


def _validate_custom_sql(chk: CustomSqlCheck, df: DataFrame, where: str) -> None:
    spark = df.sparkSession
    df.limit(0).createOrReplaceTempView("batch")
    try:
        _ = spark.sql(chk.sql).schema  # analysis only: the guard above let only a pure read through
    except Exception as e:  # noqa: BLE001 - AnalysisException / ParseException: the user's query is wrong
        raise ConfigError(
            f"{where}: its query is not valid: {_first_line(e)}",
            hint="the new rows are the view `batch`, e.g. SELECT * FROM batch WHERE amount < 0",
        ) from None


# --- compilation ------------------------------------------------------------------------------


def _lit_sql(v: Scalar) -> str:
    """SQL text of a literal, for the reproduction query shown to people (never executed by wapflow)."""
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, (int, float)):
        return repr(v)
    return sql_string(str(v))


@dataclass
class Compiled:
    """One check as Spark expressions plus the SQL a person can run to see its failing rows."""

    index: int
    check: Check
    applies: Column  # the check's filter (or TRUE)
    fail: Column | None  # per-row failure condition (row-level checks and null_rate)
    fail_sql: str | None
    threshold: str
    mapping: dict[str, str]

    @property
    def key(self) -> str:
        return f"c{self.index}"

    @property
    def row_level(self) -> bool:
        return bool(getattr(self.check, "row_level", False))

    @property
    def blocks_rows(self) -> bool:
        """Rows failing it are quarantinable: row-level, error severity, no tolerance."""
        return self.row_level and self.check.severity == "error" and getattr(self.check, "mostly", None) is None

    def col(self, name: str) -> Column:
        from pyspark.sql import functions as F

        return F.col(quote(self.mapping[name]))


def _qc(mapping: dict[str, str], name: str) -> str:
    return quote(mapping[name])


def compile_check(chk: Check, i: int, mapping: dict[str, str]) -> Compiled:
    from pyspark.sql import functions as F

    # Defence in depth: the expressions compiled here run inside the write and the audit.
    for what, text, is_query in _sql_texts(chk):
        if not is_query:
            try:
                sqlguard.check_expression_text(text, what)
            except sqlguard.UnsafeSql as e:
                raise ConfigError(f"{_where(chk, None)}: {e.problem}", hint=e.hint) from None
    applies = F.expr(chk.filter) if chk.filter else F.lit(True)
    fail: Column | None = None
    fail_sql: str | None = None
    threshold = ""
    if isinstance(chk, NotNullCheck):
        c = F.col(quote(mapping[chk.column]))
        fail, fail_sql, threshold = c.isNull(), f"{_qc(mapping, chk.column)} IS NULL", "no NULLs"
    elif isinstance(chk, BetweenCheck):
        c = F.col(quote(mapping[chk.column]))
        qc = _qc(mapping, chk.column)
        outside = F.lit(False)
        parts = []
        if chk.min is not None:
            outside = outside | ((c < F.lit(chk.min)) if chk.min_inclusive else (c <= F.lit(chk.min)))
            parts.append(f"{qc} {'<' if chk.min_inclusive else '<='} {_lit_sql(chk.min)}")
        if chk.max is not None:
            outside = outside | ((c > F.lit(chk.max)) if chk.max_inclusive else (c >= F.lit(chk.max)))
            parts.append(f"{qc} {'>' if chk.max_inclusive else '>='} {_lit_sql(chk.max)}")
        # NULLs are not "outside": not_null says whether NULLs are allowed.
        fail = c.isNotNull() & outside
        fail_sql = f"{qc} IS NOT NULL AND ({' OR '.join(parts)})"
        lo = "[" if chk.min_inclusive else "("
        hi = "]" if chk.max_inclusive else ")"
        threshold = f"{lo}{chk.min}, {chk.max}{hi}"
    elif isinstance(chk, AcceptedValuesCheck):
        c = F.col(quote(mapping[chk.column]))
        fail = c.isNotNull() & ~c.isin(list(chk.values))
        qc = _qc(mapping, chk.column)
        fail_sql = f"{qc} IS NOT NULL AND {qc} NOT IN ({', '.join(_lit_sql(v) for v in chk.values)})"
        threshold = f"in {list(chk.values)}"
    elif isinstance(chk, RegexCheck):
        c = F.col(quote(mapping[chk.column]))
        fail = c.isNotNull() & ~c.rlike(chk.pattern)
        qc = _qc(mapping, chk.column)
        fail_sql = f"{qc} IS NOT NULL AND NOT ({qc} RLIKE {_lit_sql(chk.pattern)})"
        threshold = f"matches {chk.pattern}"
    elif isinstance(chk, MaxLengthCheck):
        c = F.col(quote(mapping[chk.column]))
        fail = c.isNotNull() & (F.length(c) > F.lit(chk.max))
        fail_sql = f"length({_qc(mapping, chk.column)}) > {chk.max}"
        threshold = f"length <= {chk.max}"
    elif isinstance(chk, ExpressionCheck):
        # A row passes only when the condition is true; NULL (unknown) fails, as in SQL CHECK constraints.
        fail = ~F.coalesce(F.expr(chk.sql), F.lit(False))
        fail_sql = f"NOT coalesce(({chk.sql}), FALSE)"
        threshold = "true for every row"
    elif isinstance(chk, NullRateCheck):
        c = F.col(quote(mapping[chk.column]))
        fail, fail_sql, threshold = c.isNull(), f"{_qc(mapping, chk.column)} IS NULL", f"null rate <= {chk.max}"
    elif isinstance(chk, RowCountCheck):
        threshold = f"[{chk.min}, {chk.max}]"
    elif isinstance(chk, UniqueCheck):
        threshold = "no duplicate keys"
    elif isinstance(chk, UniqueInTableCheck):
        threshold = "no key already on main"
    elif isinstance(chk, ForeignKeyCheck):
        threshold = f"every value in {chk.table}.{chk.ref_column}"
    elif isinstance(chk, FreshnessCheck):
        threshold = f"newest within {chk.max_age}"
    elif isinstance(chk, VolumeCheck):
        threshold = f"within ±{chk.tolerance:.0%} of the median of the last {chk.runs} runs"
    elif isinstance(chk, CustomSqlCheck):
        threshold = "no rows returned"
    if mostly := getattr(chk, "mostly", None):
        threshold += f" (mostly {mostly})"
    if chk.filter and fail_sql:
        fail_sql = f"({chk.filter}) AND ({fail_sql})"
    return Compiled(i, chk, applies, fail, fail_sql, threshold, mapping)


def _count_if(cond: Column) -> Column:
    from pyspark.sql import functions as F

    return F.sum(F.when(cond, F.lit(1)).otherwise(F.lit(0)))


def plain_aggregates(compiled: list[Compiled]) -> list[Column]:
    """Every metric that is a plain aggregate over rows: observable during the write, or one scan."""
    from pyspark.sql import functions as F

    aggs = [F.count(F.lit(1)).alias("_rows")]
    for c in compiled:
        chk = c.check
        if c.fail is not None:
            aggs.append(_count_if(c.applies & c.fail).alias(f"{c.key}_f"))
            aggs.append(_count_if(c.applies).alias(f"{c.key}_n"))
        elif isinstance(chk, RowCountCheck):
            aggs.append(_count_if(c.applies).alias(f"{c.key}_n"))
        elif isinstance(chk, FreshnessCheck):
            aggs.append(F.max(F.when(c.applies, c.col(chk.column))).alias(f"{c.key}_max"))
    return aggs


def quarantine_flags(compiled: list[Compiled]) -> Column:
    """Per row: the names of the quarantinable checks it fails (an empty array for good rows)."""
    from pyspark.sql import functions as F

    flags = [
        F.when(c.applies & c.fail, F.lit(c.check.display_name()))
        for c in compiled
        if c.blocks_rows and c.fail is not None  # blocks_rows: a row-level check, so fail is set
    ]
    if not flags:
        return F.array().cast("array<string>")
    return F.filter(F.array(*flags), lambda x: x.isNotNull())


class AuditPlan:
    """The table's checks compiled against one batch schema."""

    def __init__(self, checks: list[Check], columns: list[str], *, table: str, key: list[str] | None = None) -> None:
        self.table = table
        self.checks = checks
        self.mapping = resolve_columns(checks, columns, table=table)
        by_lower = {c.lower(): c for c in columns}
        self.key = [by_lower[k.lower()] for k in (key or []) if k.lower() in by_lower]
        self.compiled = [compile_check(chk, i, self.mapping) for i, chk in enumerate(checks)]

    def observable(self) -> list[Column]:
        return plain_aggregates(self.compiled)

    def quarantine_flags(self) -> Column:
        return quarantine_flags(self.compiled)

    @property
    def quarantinable(self) -> bool:
        return any(c.blocks_rows for c in self.compiled)


# --- evaluation -------------------------------------------------------------------------------


@dataclass
class AuditContext:
    """What evaluation may look at beyond the new rows."""

    main_table: Callable[[TableName], DataFrame] | None = None  # main of a table (joins)
    this_table: TableName | None = None
    history: Callable[[], list[int]] | None = None  # rows added by earlier published runs, newest first
    branch_sql: str | None = None  # `cat`.`ns`.`t` VERSION AS OF 'branch', for reproduction queries
    file_metrics: Callable[[], FileMetrics | None] | None = None


def _from_metadata(c: Compiled, fm: FileMetrics) -> dict[str, Any] | None:
    """Exact values from file metrics, or None when metadata cannot answer this check exactly."""
    from wapflow.audit.spec import BetweenCheck as B

    chk = c.check
    if chk.filter:
        return None
    if isinstance(chk, RowCountCheck):
        return {f"{c.key}_n": fm.rows}
    if isinstance(chk, (NotNullCheck, NullRateCheck)):
        col = c.mapping[chk.column].lower()
        nulls = fm.null_counts.get(col)
        if nulls is None:
            return None
        return {f"{c.key}_f": nulls, f"{c.key}_n": fm.rows}
    if isinstance(chk, B):
        col = c.mapping[chk.column].lower()
        lo, hi = fm.lower.get(col), fm.upper.get(col)
        if lo is None or hi is None or isinstance(lo, str) or isinstance(hi, str):
            return None  # unknown, or string bounds (Iceberg truncates them): scan instead
        if fm.nan_counts.get(col):
            return None
        try:
            ok_lo = chk.min is None or (lo >= _coerce(chk.min, lo) if chk.min_inclusive else lo > _coerce(chk.min, lo))
            ok_hi = chk.max is None or (hi <= _coerce(chk.max, hi) if chk.max_inclusive else hi < _coerce(chk.max, hi))
        except (TypeError, ValueError):
            return None
        if ok_lo and ok_hi:
            return {f"{c.key}_f": 0, f"{c.key}_n": fm.rows}
        return None  # bounds outside the range do not say how many rows: the scan counts them
    return None


def _coerce(bound: Any, like: Any) -> Any:
    if isinstance(like, datetime) and isinstance(bound, str):
        return datetime.fromisoformat(bound)
    if isinstance(like, date) and not isinstance(like, datetime) and isinstance(bound, str):
        return date.fromisoformat(bound)
    return bound


def evaluate(
    plan: AuditPlan,
    added: DataFrame,
    *,
    observed: dict[str, Any] | None = None,
    ctx: AuditContext | None = None,
    samples: bool = True,
) -> AuditReport:
    """Evaluate every check of the plan over `added` (the rows the run added)."""

    ctx = ctx or AuditContext()
    values: dict[str, Any] = {}
    source: dict[int, str] = {}
    fm = ctx.file_metrics() if ctx.file_metrics else None
    if fm is not None:
        values["_rows"] = fm.rows
        for c in plan.compiled:
            got = _from_metadata(c, fm)
            if got is not None:
                values.update(got)
                source[c.index] = "metadata"
    if observed:
        for k, v in observed.items():
            values.setdefault(k, v)
        for c in plan.compiled:
            if c.index not in source and ({f"{c.key}_n", f"{c.key}_max"} & set(observed)):
                source[c.index] = "write"
    needed = [
        c for c in plan.compiled if _plain(c) and not ({f"{c.key}_n", f"{c.key}_f", f"{c.key}_max"} & set(values))
    ]
    if needed or "_rows" not in values:
        values.update(added.agg(*plain_aggregates(needed)).collect()[0].asDict())  # a global aggregate: one row
        for c in needed:
            source[c.index] = "scan"
    for c in plan.compiled:
        chk = c.check
        if isinstance(chk, UniqueCheck):
            values[f"{c.key}_f"] = _duplicate_rows(added, c)
            source[c.index] = "scan"
        elif isinstance(chk, UniqueInTableCheck):
            values[f"{c.key}_f"] = _collisions(added, c, ctx).count() if _has_main(ctx, ctx.this_table) else 0
            source[c.index] = "join"
        elif isinstance(chk, ForeignKeyCheck):
            values[f"{c.key}_f"] = _orphans(added, c, ctx).count()
            source[c.index] = "join"
        elif isinstance(chk, CustomSqlCheck):
            values[f"{c.key}_f"] = _custom(added, c).count()
            source[c.index] = "scan"
        elif isinstance(chk, VolumeCheck):
            source[c.index] = "metadata"
    rows = int(values.get("_rows") or 0)
    results = [_result(c, values, rows, ctx) for c in plan.compiled]
    for c, r in zip(plan.compiled, results, strict=True):
        r.source = source.get(c.index, "scan")
    if samples:
        for c, r in zip(plan.compiled, results, strict=True):
            if r.status in ("failed", "warned", "quarantined"):
                r.sql = _reproduce_sql(c, ctx)
                r.samples = _samples(added, c, plan, ctx)
    return AuditReport(rows=rows, checks=results)


def _plain(c: Compiled) -> bool:
    return c.fail is not None or isinstance(c.check, (RowCountCheck, FreshnessCheck))


def _has_main(ctx: AuditContext, table: TableName | None) -> bool:
    return ctx.main_table is not None and table is not None


def _not_null_keys(df: DataFrame, c: Compiled) -> DataFrame:

    keys = [c.col(k) for k in c.check.columns()]
    cond = c.applies
    for k in keys:
        cond = cond & k.isNotNull()
    return df.where(cond).select(*[c.col(k).alias(k) for k in c.check.columns()])


def _duplicate_groups(added: DataFrame, c: Compiled) -> DataFrame:
    from pyspark.sql import functions as F

    return _not_null_keys(added, c).groupBy(*c.check.columns()).count().where(F.col("count") > 1)


def _duplicate_rows(added: DataFrame, c: Compiled) -> int:
    """Rows beyond the first for each key (NULL keys are ignored, as in SQL UNIQUE and dbt's test)."""
    from pyspark.sql import functions as F

    row = _duplicate_groups(added, c).agg(F.sum(F.col("count") - 1).alias("d")).collect()[0]  # one row
    return int(row["d"] or 0)


def _collisions(added: DataFrame, c: Compiled, ctx: AuditContext) -> DataFrame:
    assert ctx.main_table is not None and ctx.this_table is not None
    cols = c.check.columns()
    main = ctx.main_table(ctx.this_table)
    main_keys = main.select(*[main[quote(k)].alias(k) for k in cols]).distinct()
    return _not_null_keys(added, c).join(main_keys, on=cols, how="left_semi")


def _orphans(added: DataFrame, c: Compiled, ctx: AuditContext) -> DataFrame:
    chk = c.check
    assert isinstance(chk, ForeignKeyCheck)
    if ctx.main_table is None:
        raise ConfigError(f"check '{chk.display_name()}' needs access to {chk.table}")
    ref = ctx.main_table(TableName.parse(chk.table))
    ref_keys = ref.select(ref[quote(chk.ref_column)].alias(chk.column)).distinct()
    return _not_null_keys(added, c).join(ref_keys, on=[chk.column], how="left_anti")


def _custom(added: DataFrame, c: Compiled) -> DataFrame:
    chk = c.check
    assert isinstance(chk, CustomSqlCheck)
    spark = added.sparkSession
    # spark.sql runs commands at once: only SQL both guard layers accept gets there, checked again right here
    # (a resumed run audits without validate_checks).
    guard_sql(chk, spark, _where(chk, None))
    added.where(c.applies).createOrReplaceTempView("batch")
    return spark.sql(chk.sql)


def _result(c: Compiled, v: dict[str, Any], rows: int, ctx: AuditContext) -> CheckResult:
    chk = c.check
    k = c.key
    failing = 0
    observed: Any
    if c.fail is not None:
        f = int(v.get(f"{k}_f") or 0)
        n = int(v.get(f"{k}_n") or 0)
        if isinstance(chk, NullRateCheck):
            rate = (f / n) if n else 0.0
            ok, observed, failing = rate <= chk.max, round(rate, 6), f
        elif (mostly := getattr(chk, "mostly", None)) is not None:
            rate = (f / n) if n else 0.0
            ok, observed, failing = rate <= 1 - mostly + 1e-12, f, f
        else:
            ok, observed, failing = f == 0, f, f
    elif isinstance(chk, RowCountCheck):
        n = int(v.get(f"{k}_n") or 0)
        ok = (chk.min is None or n >= chk.min) and (chk.max is None or n <= chk.max)
        observed = n
    elif isinstance(chk, FreshnessCheck):
        newest = v.get(f"{k}_max")
        if newest is None:
            ok, observed = False, None
        else:
            if isinstance(newest, datetime):
                now = datetime.now(newest.tzinfo) if newest.tzinfo else datetime.now()
            else:
                newest = datetime.combine(newest, datetime.max.time())
                now = datetime.now()
            age = now - newest
            ok = age <= parse_duration(chk.max_age)
            observed = str(newest)
    elif isinstance(chk, VolumeCheck):
        history = ctx.history()[: chk.runs] if ctx.history else []
        observed = rows
        if len(history) < chk.min_history:
            ok = True
            c.threshold = f"not enough history ({len(history)} of {chk.min_history} runs): passes"
        else:
            med = statistics.median(history)
            lo, hi = med * (1 - chk.tolerance), med * (1 + chk.tolerance)
            ok = lo <= rows <= hi
            c.threshold = f"[{lo:.0f}, {hi:.0f}] (median {med:.0f} of last {len(history)} runs)"
    else:  # unique, unique_in_table, foreign_key, custom_sql: counts of offending rows
        failing = int(v.get(f"{k}_f") or 0)
        ok, observed = failing == 0, failing
    status: Status = "passed" if ok else ("warned" if chk.severity == "warn" else "failed")
    return CheckResult(
        name=chk.display_name(),
        check=chk.check,
        severity=chk.severity,
        status=status,
        observed=observed,
        failing_rows=failing,
        threshold=c.threshold,
        columns=chk.columns(),
    )


def _reproduce_sql(c: Compiled, ctx: AuditContext) -> str | None:
    src = ctx.branch_sql
    if src is None:
        return None
    chk = c.check
    cols = ", ".join(quote(c.mapping.get(x, x)) for x in chk.columns()) or "*"
    where = f" WHERE {chk.filter}" if chk.filter else ""
    if c.fail_sql:
        return f"SELECT * FROM {src} WHERE {c.fail_sql}"
    if isinstance(chk, UniqueCheck):
        cond = (" AND " if where else " WHERE ") + " AND ".join(f"{quote(x)} IS NOT NULL" for x in chk.columns())
        return f"SELECT {cols}, count(*) AS n FROM {src}{where}{cond} GROUP BY {cols} HAVING count(*) > 1"
    if isinstance(chk, ForeignKeyCheck):
        ref = TableName.parse(chk.table)
        return (
            f"SELECT * FROM {src} b WHERE b.{quote(chk.column)} IS NOT NULL AND NOT EXISTS "
            f"(SELECT 1 FROM {ref.dotted} r WHERE r.{quote(chk.ref_column)} = b.{quote(chk.column)})"
        )
    if isinstance(chk, CustomSqlCheck):
        return f"-- with the new rows as view `batch`:\n{chk.sql}"
    return None


def _samples(added: DataFrame, c: Compiled, plan: AuditPlan, ctx: AuditContext) -> list[dict[str, Any]]:
    """Up to 20 offending rows: the check's columns plus the table's key."""
    chk = c.check
    cols = list(dict.fromkeys([*plan.key, *[c.mapping[x] for x in chk.columns() if x in c.mapping]]))
    try:
        if c.fail is not None:
            df = added.where(c.applies & c.fail)
            df = df.select(*[quote(x) for x in cols]) if cols else df
        elif isinstance(chk, UniqueCheck):
            df = _duplicate_groups(added, c)
        elif isinstance(chk, UniqueInTableCheck) and _has_main(ctx, ctx.this_table):
            df = _collisions(added, c, ctx)
        elif isinstance(chk, ForeignKeyCheck):
            df = _orphans(added, c, ctx)
        elif isinstance(chk, CustomSqlCheck):
            df = _custom(added, c)
        else:
            return []
        return [{k: _jsonable(v) for k, v in r.asDict().items()} for r in df.limit(SAMPLE_ROWS).collect()]
    except Exception:  # noqa: BLE001 - samples are a courtesy; the verdict stands without them
        return []


def _jsonable(v: Any) -> Any:
    if isinstance(v, (datetime, date)):
        return v.isoformat()
    if isinstance(v, (bytes, bytearray)):
        return v.hex()
    return v


# --- compatibility: a one-call API ------------------------------------------------------------


def run_checks(
    df: DataFrame, checks: list[Check], *, table: str, observed: dict[str, Any] | None = None
) -> AuditReport:
    """Evaluate checks over df with no context (no joins to other tables, no history, no samples)."""
    plan = AuditPlan(checks, df.columns, table=table)
    return evaluate(plan, df, observed=observed, samples=False)
