"""Check types: each one class that owns its wap.toml parameters, how it is computed, and its documentation.

A check type is a pydantic model (the same keys and validation in wap.toml and Python; parameters are
checked here, columns and SQL against the batch before any write) plus the code the audit engine
(audit.checks) asks it for: validation against the batch, its per-row failure condition, the aggregates
it needs, exact answers from file metadata, its own scans or joins, its verdict, and how to show the
failing rows. `CHECK_MODELS` is the registry of every built-in type; audit.registry turns it into the
reference the docs render. Adding a check type means one class here (in `_BUILTIN`) and its tests.

How a check is computed, cheapest first (`CheckType.computed`):
- metadata: Iceberg metadata of the files the run added (record, null counts, bounds), or the table's
  history, without reading rows;
- write: a plain aggregate observed while the branch is written (a Spark Observation), at no extra scan,
  or one aggregation over the new rows when nothing was observed (a resumed run);
- scan: its own query over the new rows;
- join: a join of the new rows with a table's main.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable
from datetime import date, datetime, timedelta
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, NamedTuple, Union, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from wapflow.audit import sqlguard
from wapflow.errors import ConfigError, did_you_mean
from wapflow.lakehouse.identifiers import TableName, quote, sql_string

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import DataType

    from wapflow.audit.checks import AuditContext, Compiled
    from wapflow.lakehouse.tables import FileMetrics

Scalar = bool | int | float | str
Evidence = Literal["metadata", "write", "scan", "join"]

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|d|w)\s*$", re.IGNORECASE)
_UNIT_SECONDS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 604800}


def _read_only(check: Callable[[str, str], None], text: str, what: str) -> str:
    """Layer 1 of the SQL guard, at declaration: a validation error, so wap.toml errors name the key.

    PydanticCustomError is pydantic's ValueError with a message of our own: no "Value error, " prefix.
    """
    try:
        check(text, what)
    except sqlguard.UnsafeSql as e:
        raise PydanticCustomError("unsafe_sql", "{reason}", {"reason": e.one_line()}) from None
    return text


def parse_duration(text: str) -> timedelta:
    """'30m', '24h', '7d' as a timedelta (freshness's max_age), or ValueError naming the accepted units."""
    m = _DURATION.match(text)
    if not m:
        raise ValueError(f"duration {text!r} is not like '30m', '24h', '7d' (units: s, m, h, d, w)")
    return timedelta(seconds=float(m.group(1)) * _UNIT_SECONDS[m.group(2).lower()])


def _first_line(e: BaseException) -> str:
    from wapflow.lakehouse.spark_errors import describe

    return describe(e)


def _lit_sql(v: Scalar) -> str:
    """SQL text of a literal, for the reproduction query shown to people (never executed by wapflow)."""
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, (int, float)):
        return repr(v)
    return sql_string(str(v))


def _range_name(lo: object, hi: object) -> str:
    """'0, 10', 'min=0' or 'max=10': bounds in a check's name, leaving out the one not set."""
    if lo is not None and hi is not None:
        return f"{lo}, {hi}"
    return f"min={lo}" if lo is not None else f"max={hi}"


def _count_if(cond: Column) -> Column:
    from pyspark.sql import functions as F

    return F.sum(F.when(cond, F.lit(1)).otherwise(F.lit(0)))


class Rule(NamedTuple):
    """A check compiled against the batch's columns: its per-row failure (if any) and what it demands."""

    fail: Column | None  # per-row failure condition (row-level checks and null_rate)
    fail_sql: str | None  # the same as SQL, for the query that reproduces the failing rows
    threshold: str


class Verdict(NamedTuple):
    ok: bool
    observed: Any
    failing_rows: int


class CheckType(BaseModel):
    """One check type: its wap.toml parameters (the fields) and everything the audit engine asks of it."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    check: str = Field(description="the check type")  # each type narrows it to its one Literal value
    name: str | None = Field(default=None, description="the name in reports (default: from the parameters)")
    severity: Literal["error", "warn"] = Field(
        default="error", description="warn: a failure is reported and the run still publishes"
    )
    filter: str | None = Field(
        default=None, min_length=1, description="a SQL condition: the check applies only to rows where it is true"
    )

    description: ClassVar[str]  # one line: what it demands
    example: ClassVar[str]  # a wap.toml snippet declaring it
    computed: ClassVar[tuple[Evidence, ...]]  # where its verdict comes from, cheapest first
    row_level: ClassVar[bool] = False  # failing rows are individual rows (quarantine and samples apply)
    keyed: ClassVar[bool] = False  # its columns are a key of the table (a default for audit samples)

    @field_validator("filter")
    @classmethod
    def _filter_is_pure(cls, v: str | None) -> str | None:
        return None if v is None else _read_only(sqlguard.check_expression_text, v, "filter")

    @classmethod
    def type_name(cls) -> str:
        """The `check` key's value that selects this type."""
        return str(get_args(cls.model_fields["check"].annotation)[0])

    @property
    def observable(self) -> bool:
        """Its metric is a plain aggregate over rows: observed during the write, or one shared scan."""
        return "write" in self.computed

    def columns(self) -> list[str]:
        """Columns of the batch the check reads, validated before any write."""
        return []

    @property
    def blocks_rows(self) -> bool:
        """Rows failing it are quarantinable: row-level, error severity, no tolerance."""
        return False

    def display_name(self) -> str:
        base = self.name or self.default_name()
        return base if self.name or not self.filter else f"{base} where {self.filter}"

    def where(self, table: str | None) -> str:
        """The check (and its table) as error messages name it, printable whatever its SQL holds."""
        name = sqlguard.printable(self.display_name())
        return f"check '{name}' on {table}" if table else f"check '{name}'"

    def default_name(self) -> str:  # pragma: no cover - every check overrides it
        raise NotImplementedError

    # --- validation before any write ----------------------------------------------------------

    def sql_texts(self) -> list[tuple[str, str, bool]]:
        """(what, text, is_query) for every piece of the check that is user-written SQL."""
        return [("filter", self.filter, False)] if self.filter else []

    def guard_sql(self, spark: SparkSession, where: str) -> None:
        """Both layers of the SQL guard over the check's SQL: one read-only query / pure expression, or ConfigError.

        Declaration already ran layer 1 (pydantic); it runs again here, cheaply, because a model can be built
        without validation (model_construct) or changed afterwards.
        """
        for what, text, is_query in self.sql_texts():
            try:
                if is_query:
                    sqlguard.check_query_text(text, what)
                    sqlguard.check_query_plan(spark, text, what)
                else:
                    sqlguard.check_expression_text(text, what)
                    sqlguard.check_expression_plan(spark, text, what)
            except sqlguard.UnsafeSql as e:
                raise ConfigError(f"{where}: {e.problem}", hint=e.hint) from None

    def boolean_sql(self) -> list[tuple[str, str]]:
        """(key, text) of its SQL that must be a boolean condition over the batch's columns."""
        return [("filter", self.filter)] if self.filter else []

    def validate_on(
        self,
        df: DataFrame,
        col_type: DataType | None,
        where: str,
        *,
        table_exists: Callable[[TableName], bool] | None,
        table_columns: Callable[[TableName], list[str]] | None,
    ) -> None:
        """What only this type can find wrong against the batch (col_type: its first column's type)."""

    # --- compilation and evaluation -------------------------------------------------------------

    def compile(self, mapping: dict[str, str]) -> Rule:
        """Its failure condition against the batch's spelling of the columns (mapping: declared -> actual)."""
        raise NotImplementedError  # pragma: no cover - every check overrides it

    def aggregates(self, c: Compiled) -> list[Column]:
        """The plain aggregates its verdict needs (keys c<i>_f, c<i>_n, c<i>_max), for observable types."""
        if c.fail is None:
            return []
        return [_count_if(c.applies & c.fail).alias(f"{c.key}_f"), _count_if(c.applies).alias(f"{c.key}_n")]

    def from_metadata(self, c: Compiled, fm: FileMetrics) -> dict[str, Any] | None:
        """Exact values from file metrics, or None when metadata cannot answer this check exactly."""
        return None

    def measure(self, added: DataFrame, c: Compiled, ctx: AuditContext) -> tuple[dict[str, Any], Evidence]:
        """Values of a type that is not a plain aggregate, and where they came from."""
        raise NotImplementedError  # pragma: no cover - every type that is not observable overrides it

    def verdict(self, c: Compiled, values: dict[str, Any], rows: int, ctx: AuditContext) -> Verdict:
        """Default: a count of offending rows (c<i>_f), which must be 0."""
        failing = int(values.get(f"{c.key}_f") or 0)
        return Verdict(failing == 0, failing, failing)

    def reproduce_sql(self, c: Compiled, src: str) -> str | None:
        """SQL a person runs against the kept branch `src` to see the offending rows (types without fail_sql)."""
        return None

    def offending(self, added: DataFrame, c: Compiled, ctx: AuditContext) -> DataFrame | None:
        """The offending rows or keys, for samples (types without a per-row failure condition)."""
        return None

    def main_tables(self, this: TableName, tables_in_sql: Callable[[str], set[TableName]]) -> set[TableName]:
        """Tables whose main its verdict reads (re-checked at publish if they moved)."""
        return set()

    def _not_null_keys(self, df: DataFrame, c: Compiled) -> DataFrame:
        keys = [c.col(k) for k in self.columns()]
        cond = c.applies
        for k in keys:
            cond = cond & k.isNotNull()
        return df.where(cond).select(*[c.col(k).alias(k) for k in self.columns()])


def _mostly_suffix(threshold: str, mostly: float | None) -> str:
    return f"{threshold} (mostly {mostly})" if mostly else threshold


class _RowCheck(CheckType):
    """A per-row condition; `mostly` lets a fraction of rows fail (0.99: up to 1% may fail)."""

    mostly: float | None = Field(
        default=None, gt=0, le=1, description="the fraction of rows that must pass (0.99 lets 1% fail)"
    )
    row_level: ClassVar[bool] = True
    computed: ClassVar[tuple[Evidence, ...]] = ("write",)

    @property
    def blocks_rows(self) -> bool:
        return self.severity == "error" and self.mostly is None

    def compile(self, mapping: dict[str, str]) -> Rule:
        rule = self._rule(mapping)
        fail_sql = f"({self.filter}) AND ({rule.fail_sql})" if self.filter and rule.fail_sql else rule.fail_sql
        return Rule(rule.fail, fail_sql, _mostly_suffix(rule.threshold, self.mostly))

    def _rule(self, mapping: dict[str, str]) -> Rule:
        raise NotImplementedError  # pragma: no cover - every row check overrides it

    def verdict(self, c: Compiled, values: dict[str, Any], rows: int, ctx: AuditContext) -> Verdict:
        f = int(values.get(f"{c.key}_f") or 0)
        n = int(values.get(f"{c.key}_n") or 0)
        if self.mostly is not None:
            rate = (f / n) if n else 0.0
            return Verdict(rate <= 1 - self.mostly + 1e-12, f, f)
        return Verdict(f == 0, f, f)


class _RowColumnCheck(_RowCheck):
    """A row-level check on one column."""

    column: str = Field(description="the column")

    def columns(self) -> list[str]:
        return [self.column]

    def _col(self, mapping: dict[str, str]) -> tuple[Column, str]:
        """The column as a Spark column and as quoted SQL."""
        from pyspark.sql import functions as F

        return F.col(quote(mapping[self.column])), quote(mapping[self.column])


class _ColumnCheck(CheckType):
    """A batch-level check on one column."""

    column: str = Field(description="the column")

    def columns(self) -> list[str]:
        return [self.column]


def _string_column(chk: _RowColumnCheck, col_type: DataType | None, where: str) -> None:
    from pyspark.sql.types import StringType

    if not isinstance(col_type, StringType):
        raise ConfigError(
            f"{where}: column '{chk.columns()[0]}' is {col_type.simpleString() if col_type else '?'}, not a string",
            hint=f"{chk.type_name()} applies to string columns; use between or expression for others",
        )


class NotNullCheck(_RowColumnCheck):
    check: Literal["not_null"]

    description: ClassVar[str] = "Fails when a new row has NULL in the column."
    example: ClassVar[str] = '[[tables."nyc.trips".checks]]\ncheck = "not_null"\ncolumn = "passenger_count"\n'
    computed: ClassVar[tuple[Evidence, ...]] = ("metadata", "write")

    def default_name(self) -> str:
        return f"not_null({self.column})"

    def _rule(self, mapping: dict[str, str]) -> Rule:
        c, qc = self._col(mapping)
        return Rule(c.isNull(), f"{qc} IS NULL", "no NULLs")

    def from_metadata(self, c: Compiled, fm: FileMetrics) -> dict[str, Any] | None:
        return _null_counts(self, c, fm)


def _null_counts(chk: CheckType, c: Compiled, fm: FileMetrics) -> dict[str, Any] | None:
    """NULLs of the check's column from file metrics (exact when every file records them)."""
    if chk.filter:
        return None
    nulls = fm.null_counts.get(c.mapping[chk.columns()[0]].lower())
    if nulls is None:
        return None
    return {f"{c.key}_f": nulls, f"{c.key}_n": fm.rows}


def _coerce(bound: Any, like: Any) -> Any:
    if isinstance(like, datetime) and isinstance(bound, str):
        return datetime.fromisoformat(bound)
    if isinstance(like, date) and not isinstance(like, datetime) and isinstance(bound, str):
        return date.fromisoformat(bound)
    return bound


class BetweenCheck(_RowColumnCheck):
    check: Literal["between"]
    min: Scalar | None = Field(default=None, description="lower bound (numbers; timestamps and dates as strings)")
    max: Scalar | None = Field(default=None, description="upper bound (numbers; timestamps and dates as strings)")
    min_inclusive: bool = Field(default=True, description="whether a value equal to min passes")
    max_inclusive: bool = Field(default=True, description="whether a value equal to max passes")

    description: ClassVar[str] = (
        "Fails when a non-null value is outside min and/or max (NULLs are not_null's business)."
    )
    example: ClassVar[str] = (
        '[[tables."nyc.trips".checks]]\ncheck = "between"\ncolumn = "fare_amount"\nmin = 0\nmax = 1000\n'
        'severity = "warn"\n'
    )
    computed: ClassVar[tuple[Evidence, ...]] = ("metadata", "write")

    @model_validator(mode="after")
    def _bounds(self) -> BetweenCheck:
        if self.min is None and self.max is None:
            raise ValueError("between needs at least one of 'min' or 'max'")
        if (
            isinstance(self.min, (int, float))
            and isinstance(self.max, (int, float))
            and not isinstance(self.min, bool)
            and self.min > self.max
        ):
            raise ValueError(f"between: min ({self.min}) is greater than max ({self.max})")
        return self

    def default_name(self) -> str:
        if self.min is None or self.max is None:  # one bound: as declared, e.g. between(fare, min=0)
            inclusive = self.min_inclusive if self.max is None else self.max_inclusive
            which = "min" if self.max is None else "max"
            flag = "" if inclusive else f", {which}_inclusive=false"
            return f"between({self.column}, {_range_name(self.min, self.max)}{flag})"
        if self.min_inclusive and self.max_inclusive:
            return f"between({self.column}, {self.min}, {self.max})"
        lo = "[" if self.min_inclusive else "("
        hi = "]" if self.max_inclusive else ")"
        return f"between({self.column}, {lo}{self.min}, {self.max}{hi})"

    def validate_on(
        self,
        df: DataFrame,
        col_type: DataType | None,
        where: str,
        *,
        table_exists: Callable[[TableName], bool] | None,
        table_columns: Callable[[TableName], list[str]] | None,
    ) -> None:
        from pyspark.sql.types import NumericType

        if isinstance(col_type, NumericType):
            for bound in (self.min, self.max):
                if isinstance(bound, str):
                    raise ConfigError(f"{where}: bound {bound!r} is a string but '{self.column}' is numeric")

    def _rule(self, mapping: dict[str, str]) -> Rule:
        from pyspark.sql import functions as F

        c, qc = self._col(mapping)
        outside = F.lit(False)
        parts = []
        if self.min is not None:
            outside = outside | ((c < F.lit(self.min)) if self.min_inclusive else (c <= F.lit(self.min)))
            parts.append(f"{qc} {'<' if self.min_inclusive else '<='} {_lit_sql(self.min)}")
        if self.max is not None:
            outside = outside | ((c > F.lit(self.max)) if self.max_inclusive else (c >= F.lit(self.max)))
            parts.append(f"{qc} {'>' if self.max_inclusive else '>='} {_lit_sql(self.max)}")
        lo = "[" if self.min_inclusive else "("
        hi = "]" if self.max_inclusive else ")"
        if self.min is None:
            threshold = f"<{'=' if self.max_inclusive else ''} {self.max}"
        elif self.max is None:
            threshold = f">{'=' if self.min_inclusive else ''} {self.min}"
        else:
            threshold = f"{lo}{self.min}, {self.max}{hi}"
        # NULLs are not "outside": not_null says whether NULLs are allowed.
        return Rule(c.isNotNull() & outside, f"{qc} IS NOT NULL AND ({' OR '.join(parts)})", threshold)

    def from_metadata(self, c: Compiled, fm: FileMetrics) -> dict[str, Any] | None:
        if self.filter:
            return None
        col = c.mapping[self.column].lower()
        lo, hi = fm.lower.get(col), fm.upper.get(col)
        if lo is None or hi is None or isinstance(lo, str) or isinstance(hi, str):
            return None  # unknown, or string bounds (Iceberg truncates them): scan instead
        if fm.nan_counts.get(col):
            return None
        try:
            ok_lo = self.min is None or (
                lo >= _coerce(self.min, lo) if self.min_inclusive else lo > _coerce(self.min, lo)
            )
            ok_hi = self.max is None or (
                hi <= _coerce(self.max, hi) if self.max_inclusive else hi < _coerce(self.max, hi)
            )
        except (TypeError, ValueError):
            return None
        if ok_lo and ok_hi:
            return {f"{c.key}_f": 0, f"{c.key}_n": fm.rows}
        return None  # bounds outside the range do not say how many rows: the scan counts them


class AcceptedValuesCheck(_RowColumnCheck):
    check: Literal["accepted_values"]
    values: list[Scalar] = Field(min_length=1, description="the values allowed (case-sensitive)")

    description: ClassVar[str] = "Fails when a non-null value is not in the list (case-sensitive)."
    example: ClassVar[str] = (
        '[[tables."nyc.trips".checks]]\ncheck = "accepted_values"\ncolumn = "payment_type"\n'
        "values = [1, 2, 3, 4, 5, 6]\n"
    )

    def default_name(self) -> str:
        return f"accepted_values({self.column})"

    def _rule(self, mapping: dict[str, str]) -> Rule:
        c, qc = self._col(mapping)
        return Rule(
            c.isNotNull() & ~c.isin(list(self.values)),
            f"{qc} IS NOT NULL AND {qc} NOT IN ({', '.join(_lit_sql(v) for v in self.values)})",
            f"in {list(self.values)}",
        )


class RegexCheck(_RowColumnCheck):
    check: Literal["regex"]
    # Java regex syntax (\p{L}, possessive quantifiers...): Spark validates it before any write.
    pattern: str = Field(min_length=1, description="a Java regex; matches anywhere (anchor with ^...$)")

    description: ClassVar[str] = "Fails when a non-null value of a string column does not match the pattern."
    example: ClassVar[str] = (
        '[[tables."nyc.trips".checks]]\ncheck = "regex"\ncolumn = "vendor"\npattern = \'^\\p{L}+$\'\n'
    )

    def default_name(self) -> str:
        return f"regex({self.column}, {self.pattern})"

    def validate_on(
        self,
        df: DataFrame,
        col_type: DataType | None,
        where: str,
        *,
        table_exists: Callable[[TableName], bool] | None,
        table_columns: Callable[[TableName], list[str]] | None,
    ) -> None:
        from pyspark.sql import functions as F

        _string_column(self, col_type, where)
        try:
            df.sparkSession.range(1).select(F.lit("").rlike(self.pattern)).collect()
        except Exception as e:  # noqa: BLE001 - Java regex dialect differs slightly from Python's
            raise ConfigError(f"{where}: Spark rejects the pattern: {_first_line(e)}") from None

    def _rule(self, mapping: dict[str, str]) -> Rule:
        c, qc = self._col(mapping)
        return Rule(
            c.isNotNull() & ~c.rlike(self.pattern),
            f"{qc} IS NOT NULL AND NOT ({qc} RLIKE {_lit_sql(self.pattern)})",
            f"matches {self.pattern}",
        )


class MaxLengthCheck(_RowColumnCheck):
    check: Literal["max_length"]
    max: int = Field(ge=0, description="the longest value allowed, in characters")

    description: ClassVar[str] = "Fails when a value of a string column is longer than max characters."
    example: ClassVar[str] = '[[tables."nyc.trips".checks]]\ncheck = "max_length"\ncolumn = "vendor"\nmax = 64\n'

    def default_name(self) -> str:
        return f"max_length({self.column}, {self.max})"

    def validate_on(
        self,
        df: DataFrame,
        col_type: DataType | None,
        where: str,
        *,
        table_exists: Callable[[TableName], bool] | None,
        table_columns: Callable[[TableName], list[str]] | None,
    ) -> None:
        _string_column(self, col_type, where)

    def _rule(self, mapping: dict[str, str]) -> Rule:
        from pyspark.sql import functions as F

        c, qc = self._col(mapping)
        return Rule(
            c.isNotNull() & (F.length(c) > F.lit(self.max)), f"length({qc}) > {self.max}", f"length <= {self.max}"
        )


class ExpressionCheck(_RowCheck):
    check: Literal["expression"]
    sql: str = Field(min_length=1, description="a Spark SQL boolean over the row's columns")

    description: ClassVar[str] = "Fails for a row where the SQL condition is false or NULL."
    example: ClassVar[str] = '[[tables."nyc.trips".checks]]\ncheck = "expression"\nsql = "dropoff_at >= pickup_at"\n'

    @field_validator("sql")
    @classmethod
    def _sql_is_pure(cls, v: str) -> str:
        return _read_only(sqlguard.check_expression_text, v, "expression")

    def default_name(self) -> str:
        return f"expression({self.sql})"

    def sql_texts(self) -> list[tuple[str, str, bool]]:
        return [*super().sql_texts(), ("expression", self.sql, False)]

    def boolean_sql(self) -> list[tuple[str, str]]:
        return [*super().boolean_sql(), ("sql", self.sql)]

    def _rule(self, mapping: dict[str, str]) -> Rule:
        from pyspark.sql import functions as F

        # A row passes only when the condition is true; NULL (unknown) fails, as in SQL CHECK constraints.
        return Rule(
            ~F.coalesce(F.expr(self.sql), F.lit(False)), f"NOT coalesce(({self.sql}), FALSE)", "true for every row"
        )


class NullRateCheck(_ColumnCheck):
    check: Literal["null_rate"]
    max: float = Field(ge=0, le=1, description="the largest fraction of NULLs allowed (0..1)")

    description: ClassVar[str] = "Fails when the fraction of NULLs in the column is above max."
    example: ClassVar[str] = '[[tables."nyc.trips".checks]]\ncheck = "null_rate"\ncolumn = "tip_amount"\nmax = 0.2\n'
    computed: ClassVar[tuple[Evidence, ...]] = ("metadata", "write")

    def default_name(self) -> str:
        return f"null_rate({self.column}) <= {self.max}"

    def compile(self, mapping: dict[str, str]) -> Rule:
        from pyspark.sql import functions as F

        qc = quote(mapping[self.column])
        fail_sql = f"({self.filter}) AND ({qc} IS NULL)" if self.filter else f"{qc} IS NULL"
        return Rule(F.col(qc).isNull(), fail_sql, f"null rate <= {self.max}")

    def from_metadata(self, c: Compiled, fm: FileMetrics) -> dict[str, Any] | None:
        return _null_counts(self, c, fm)

    def verdict(self, c: Compiled, values: dict[str, Any], rows: int, ctx: AuditContext) -> Verdict:
        f = int(values.get(f"{c.key}_f") or 0)
        n = int(values.get(f"{c.key}_n") or 0)
        rate = (f / n) if n else 0.0
        return Verdict(rate <= self.max, round(rate, 6), f)


class RowCountCheck(CheckType):
    check: Literal["row_count"]
    min: int | None = Field(default=None, ge=0, description="the fewest rows a batch may have")
    max: int | None = Field(default=None, ge=0, description="the most rows a batch may have")

    description: ClassVar[str] = "Fails when the batch's row count is outside min and/or max."
    example: ClassVar[str] = '[[tables."nyc.trips".checks]]\ncheck = "row_count"\nmin = 1\n'
    computed: ClassVar[tuple[Evidence, ...]] = ("metadata", "write")

    @model_validator(mode="after")
    def _bounds(self) -> RowCountCheck:
        if self.min is None and self.max is None:
            raise ValueError("row_count needs at least one of 'min' or 'max'")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"row_count: min ({self.min}) is greater than max ({self.max})")
        return self

    def default_name(self) -> str:
        return f"row_count({_range_name(self.min, self.max)})"

    def compile(self, mapping: dict[str, str]) -> Rule:
        if self.min is None:
            return Rule(None, None, f"<= {self.max}")
        if self.max is None:
            return Rule(None, None, f">= {self.min}")
        return Rule(None, None, f"[{self.min}, {self.max}]")

    def aggregates(self, c: Compiled) -> list[Column]:
        return [_count_if(c.applies).alias(f"{c.key}_n")]

    def from_metadata(self, c: Compiled, fm: FileMetrics) -> dict[str, Any] | None:
        return None if self.filter else {f"{c.key}_n": fm.rows}

    def verdict(self, c: Compiled, values: dict[str, Any], rows: int, ctx: AuditContext) -> Verdict:
        n = int(values.get(f"{c.key}_n") or 0)
        return Verdict((self.min is None or n >= self.min) and (self.max is None or n <= self.max), n, 0)


class _KeyCheck(CheckType):
    """A check on a key of one or more columns (`columns` in wap.toml)."""

    check: Literal["unique", "unique_in_table"]
    columns_: list[str] = Field(alias="columns", min_length=1, description="the key's columns")
    keyed: ClassVar[bool] = True

    def columns(self) -> list[str]:
        return list(self.columns_)

    def default_name(self) -> str:
        return f"{self.check}({', '.join(self.columns_)})"


class UniqueCheck(_KeyCheck):
    check: Literal["unique"]

    description: ClassVar[str] = (
        "Fails when two new rows share the key, within the batch (NULL keys ignored, as in SQL)."
    )
    example: ClassVar[str] = '[[tables."nyc.trips".checks]]\ncheck = "unique"\ncolumns = ["trip_id"]\n'
    computed: ClassVar[tuple[Evidence, ...]] = ("scan",)

    def compile(self, mapping: dict[str, str]) -> Rule:
        return Rule(None, None, "no duplicate keys")

    def _duplicate_groups(self, added: DataFrame, c: Compiled) -> DataFrame:
        from pyspark.sql import functions as F

        return self._not_null_keys(added, c).groupBy(*self.columns()).count().where(F.col("count") > 1)

    def measure(self, added: DataFrame, c: Compiled, ctx: AuditContext) -> tuple[dict[str, Any], Evidence]:
        """Rows beyond the first for each key (NULL keys are ignored, as in SQL UNIQUE and dbt's test)."""
        from pyspark.sql import functions as F

        row = self._duplicate_groups(added, c).agg(F.sum(F.col("count") - 1).alias("d")).collect()[0]  # one row
        return {f"{c.key}_f": int(row["d"] or 0)}, "scan"

    def reproduce_sql(self, c: Compiled, src: str) -> str | None:
        cols = ", ".join(quote(c.mapping.get(x, x)) for x in self.columns())
        where = f" WHERE {self.filter}" if self.filter else ""
        cond = (" AND " if where else " WHERE ") + " AND ".join(f"{quote(x)} IS NOT NULL" for x in self.columns())
        return f"SELECT {cols}, count(*) AS n FROM {src}{where}{cond} GROUP BY {cols} HAVING count(*) > 1"

    def offending(self, added: DataFrame, c: Compiled, ctx: AuditContext) -> DataFrame | None:
        return self._duplicate_groups(added, c)


class UniqueInTableCheck(_KeyCheck):
    """The batch's keys must not already be on main (re-delivered files, overlapping extracts)."""

    check: Literal["unique_in_table"]

    description: ClassVar[str] = (
        "Fails when a new row's key is already on main (re-delivered files, overlapping extracts)."
    )
    example: ClassVar[str] = '[[tables."nyc.trips".checks]]\ncheck = "unique_in_table"\ncolumns = ["trip_id"]\n'
    computed: ClassVar[tuple[Evidence, ...]] = ("join",)

    def compile(self, mapping: dict[str, str]) -> Rule:
        return Rule(None, None, "no key already on main")

    def _collisions(self, added: DataFrame, c: Compiled, ctx: AuditContext) -> DataFrame:
        assert ctx.main_table is not None and ctx.this_table is not None
        cols = self.columns()
        main = ctx.main_table(ctx.this_table)
        main_keys = main.select(*[main[quote(k)].alias(k) for k in cols]).distinct()
        return self._not_null_keys(added, c).join(main_keys, on=cols, how="left_semi")

    def measure(self, added: DataFrame, c: Compiled, ctx: AuditContext) -> tuple[dict[str, Any], Evidence]:
        has_main = ctx.main_table is not None and ctx.this_table is not None
        return {f"{c.key}_f": self._collisions(added, c, ctx).count() if has_main else 0}, "join"

    def offending(self, added: DataFrame, c: Compiled, ctx: AuditContext) -> DataFrame | None:
        if ctx.main_table is None or ctx.this_table is None:
            return None
        return self._collisions(added, c, ctx)

    def main_tables(self, this: TableName, tables_in_sql: Callable[[str], set[TableName]]) -> set[TableName]:
        return {this}


class ForeignKeyCheck(_ColumnCheck):
    check: Literal["foreign_key"]
    table: str = Field(description="the referenced table, namespace.name")
    references: str | None = Field(default=None, description="its column (default: the same name)")

    description: ClassVar[str] = "Fails when a non-null value is missing from the referenced table's main."
    example: ClassVar[str] = (
        '[[tables."nyc.trips".checks]]\ncheck = "foreign_key"\ncolumn = "zone_id"\ntable = "nyc.zones"\n'
        'references = "id"\n'
    )
    computed: ClassVar[tuple[Evidence, ...]] = ("join",)

    @property
    def ref_column(self) -> str:
        return self.references or self.column

    def default_name(self) -> str:
        return f"foreign_key({self.column} -> {self.table}.{self.ref_column})"

    def validate_on(
        self,
        df: DataFrame,
        col_type: DataType | None,
        where: str,
        *,
        table_exists: Callable[[TableName], bool] | None,
        table_columns: Callable[[TableName], list[str]] | None,
    ) -> None:
        ref = TableName.parse(self.table)
        if table_exists is not None and not table_exists(ref):
            raise ConfigError(
                f"{where}: the referenced table {ref} does not exist",
                hint="create and publish the referenced table first, or fix 'table'",
            )
        if table_columns is not None:
            cols = table_columns(ref)
            if self.ref_column.lower() not in {c.lower() for c in cols}:
                raise ConfigError(
                    f"{where}: {ref} has no column '{self.ref_column}'{did_you_mean(self.ref_column, cols)}",
                    hint=f"its columns are: {', '.join(cols)}",
                )

    def compile(self, mapping: dict[str, str]) -> Rule:
        return Rule(None, None, f"every value in {self.table}.{self.ref_column}")

    def _orphans(self, added: DataFrame, c: Compiled, ctx: AuditContext) -> DataFrame:
        if ctx.main_table is None:
            raise ConfigError(f"check '{self.display_name()}' needs access to {self.table}")
        ref = ctx.main_table(TableName.parse(self.table))
        ref_keys = ref.select(ref[quote(self.ref_column)].alias(self.column)).distinct()
        return self._not_null_keys(added, c).join(ref_keys, on=[self.column], how="left_anti")

    def measure(self, added: DataFrame, c: Compiled, ctx: AuditContext) -> tuple[dict[str, Any], Evidence]:
        return {f"{c.key}_f": self._orphans(added, c, ctx).count()}, "join"

    def reproduce_sql(self, c: Compiled, src: str) -> str | None:
        ref = TableName.parse(self.table)
        return (
            f"SELECT * FROM {src} b WHERE b.{quote(self.column)} IS NOT NULL AND NOT EXISTS "
            f"(SELECT 1 FROM {ref.dotted} r WHERE r.{quote(self.ref_column)} = b.{quote(self.column)})"
        )

    def offending(self, added: DataFrame, c: Compiled, ctx: AuditContext) -> DataFrame | None:
        return self._orphans(added, c, ctx)

    def main_tables(self, this: TableName, tables_in_sql: Callable[[str], set[TableName]]) -> set[TableName]:
        return {TableName.parse(self.table)}


class FreshnessCheck(_ColumnCheck):
    check: Literal["freshness"]
    max_age: str = Field(description="a duration: 30m, 24h, 7d (units s, m, h, d, w)")

    description: ClassVar[str] = "Fails when the newest value of a timestamp or date column is older than max_age."
    example: ClassVar[str] = (
        '[[tables."nyc.trips".checks]]\ncheck = "freshness"\ncolumn = "pickup_at"\nmax_age = "24h"\n'
    )
    computed: ClassVar[tuple[Evidence, ...]] = ("write",)

    @field_validator("max_age")
    @classmethod
    def _duration(cls, v: str) -> str:
        parse_duration(v)
        return v

    def default_name(self) -> str:
        return f"freshness({self.column}, {self.max_age})"

    def validate_on(
        self,
        df: DataFrame,
        col_type: DataType | None,
        where: str,
        *,
        table_exists: Callable[[TableName], bool] | None,
        table_columns: Callable[[TableName], list[str]] | None,
    ) -> None:
        from pyspark.sql.types import DateType, TimestampNTZType, TimestampType

        if not isinstance(col_type, (TimestampType, TimestampNTZType, DateType)):
            raise ConfigError(
                f"{where}: column '{self.column}' is {col_type.simpleString() if col_type else '?'}, "
                "not a timestamp or date",
                hint="freshness compares the newest value with the current time",
            )

    def compile(self, mapping: dict[str, str]) -> Rule:
        return Rule(None, None, f"newest within {self.max_age}")

    def aggregates(self, c: Compiled) -> list[Column]:
        from pyspark.sql import functions as F

        return [F.max(F.when(c.applies, c.col(self.column))).alias(f"{c.key}_max")]

    def verdict(self, c: Compiled, values: dict[str, Any], rows: int, ctx: AuditContext) -> Verdict:
        newest = values.get(f"{c.key}_max")
        if newest is None:
            return Verdict(False, None, 0)
        if isinstance(newest, datetime):
            now = datetime.now(newest.tzinfo) if newest.tzinfo else datetime.now()
        else:
            newest = datetime.combine(newest, datetime.max.time())
            now = datetime.now()
        return Verdict(now - newest <= parse_duration(self.max_age), str(newest), 0)


class VolumeCheck(CheckType):
    """Row count within a band around the median of the table's last published runs."""

    check: Literal["volume"]
    runs: int = Field(default=10, ge=1, le=1000, description="how many of the table's last published runs")
    tolerance: float = Field(default=0.5, gt=0, description="the band around their median (0.5: ±50%)")
    min_history: int = Field(default=3, ge=1, description="passes until this many published runs exist")

    description: ClassVar[str] = (
        "Fails when the row count is outside ±tolerance of the median of the table's last published runs."
    )
    example: ClassVar[str] = '[[tables."nyc.trips".checks]]\ncheck = "volume"\nruns = 10\ntolerance = 0.5\n'
    computed: ClassVar[tuple[Evidence, ...]] = ("metadata",)

    def default_name(self) -> str:
        return f"volume(±{self.tolerance:.0%} of median of last {self.runs} runs)"

    def compile(self, mapping: dict[str, str]) -> Rule:
        return Rule(None, None, f"within ±{self.tolerance:.0%} of the median of the last {self.runs} runs")

    def measure(self, added: DataFrame, c: Compiled, ctx: AuditContext) -> tuple[dict[str, Any], Evidence]:
        return {}, "metadata"  # the batch's row count, which every audit has, and the table's history

    def verdict(self, c: Compiled, values: dict[str, Any], rows: int, ctx: AuditContext) -> Verdict:
        history = ctx.history()[: self.runs] if ctx.history else []
        if len(history) < self.min_history:
            c.threshold = f"not enough history ({len(history)} of {self.min_history} runs): passes"
            return Verdict(True, rows, 0)
        med = statistics.median(history)
        lo, hi = med * (1 - self.tolerance), med * (1 + self.tolerance)
        c.threshold = f"[{lo:.0f}, {hi:.0f}] (median {med:.0f} of last {len(history)} runs)"
        return Verdict(lo <= rows <= hi, rows, 0)

    def main_tables(self, this: TableName, tables_in_sql: Callable[[str], set[TableName]]) -> set[TableName]:
        return {this}


class CustomSqlCheck(CheckType):
    """A query over the batch (a view named `batch`) that must return no rows."""

    check: Literal["custom_sql"]
    sql: str = Field(min_length=1, description="one read-only query over the view `batch` (the new rows)")

    description: ClassVar[str] = "Fails when the query over the new rows (the view `batch`) returns any row."
    example: ClassVar[str] = (
        '[[tables."nyc.trips".checks]]\ncheck = "custom_sql"\nsql = "SELECT * FROM batch WHERE fare_amount < 0"\n'
    )
    computed: ClassVar[tuple[Evidence, ...]] = ("scan",)

    @field_validator("sql")
    @classmethod
    def _sql_is_read_only(cls, v: str) -> str:
        return _read_only(sqlguard.check_query_text, v, "custom_sql")

    def default_name(self) -> str:
        return "custom_sql"

    def sql_texts(self) -> list[tuple[str, str, bool]]:
        return [*super().sql_texts(), ("custom_sql", self.sql, True)]

    def validate_on(
        self,
        df: DataFrame,
        col_type: DataType | None,
        where: str,
        *,
        table_exists: Callable[[TableName], bool] | None,
        table_columns: Callable[[TableName], list[str]] | None,
    ) -> None:
        spark = df.sparkSession
        df.limit(0).createOrReplaceTempView("batch")
        try:
            _ = spark.sql(self.sql).schema  # analysis only: the guard let only a pure read through
        except Exception as e:  # noqa: BLE001 - AnalysisException / ParseException: the user's query is wrong
            raise ConfigError(
                f"{where}: its query is not valid: {_first_line(e)}",
                hint="the new rows are the view `batch`, e.g. SELECT * FROM batch WHERE amount < 0",
            ) from None

    def compile(self, mapping: dict[str, str]) -> Rule:
        return Rule(None, None, "no rows returned")

    def _rows(self, added: DataFrame, c: Compiled) -> DataFrame:
        spark = added.sparkSession
        # spark.sql runs commands at once: only SQL both guard layers accept gets there, checked again right here
        # (a resumed run audits without validate_checks).
        self.guard_sql(spark, self.where(None))
        added.where(c.applies).createOrReplaceTempView("batch")
        return spark.sql(self.sql)

    def measure(self, added: DataFrame, c: Compiled, ctx: AuditContext) -> tuple[dict[str, Any], Evidence]:
        return {f"{c.key}_f": self._rows(added, c).count()}, "scan"

    def reproduce_sql(self, c: Compiled, src: str) -> str | None:
        return f"-- with the new rows as view `batch`:\n{self.sql}"

    def offending(self, added: DataFrame, c: Compiled, ctx: AuditContext) -> DataFrame | None:
        return self._rows(added, c)

    def main_tables(self, this: TableName, tables_in_sql: Callable[[str], set[TableName]]) -> set[TableName]:
        return tables_in_sql(self.sql)


# Every built-in check type, in the order the reference lists them. The one list: the wap.toml union and
# CHECK_MODELS below are made from it.
_BUILTIN: tuple[type[CheckType], ...] = (
    NotNullCheck,
    BetweenCheck,
    AcceptedValuesCheck,
    RegexCheck,
    MaxLengthCheck,
    ExpressionCheck,
    NullRateCheck,
    RowCountCheck,
    UniqueCheck,
    UniqueInTableCheck,
    ForeignKeyCheck,
    FreshnessCheck,
    VolumeCheck,
    CustomSqlCheck,
)

if TYPE_CHECKING:
    Check = CheckType
else:
    # pydantic picks the model by the `check` key (a discriminated union of every built-in type).
    Check = Annotated[Union[_BUILTIN], Field(discriminator="check")]  # noqa: UP007 - a union built from a tuple

# check type (the `check` key's value) -> its class: the registry of check types
CHECK_MODELS: dict[str, type[CheckType]] = {m.type_name(): m for m in _BUILTIN}
CHECK_TYPES = list(CHECK_MODELS)
