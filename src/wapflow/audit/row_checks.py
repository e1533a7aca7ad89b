"""Row-level check types: a condition per row (failing rows can be sampled, quarantined, tolerated with `mostly`)."""

from __future__ import annotations

from datetime import date, datetime
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeGuard

from pydantic import Field, field_validator, model_validator

from wapflow.audit import sqlguard
from wapflow.audit.checktype import (
    Against,
    Evidence,
    RowCheck,
    RowColumnCheck,
    Rule,
    Scalar,
    first_line,
    null_counts,
    range_name,
    read_only,
)
from wapflow.errors import ConfigError
from wapflow.sql.layout import INTEGER_TYPES

# wapflow.sql.identifiers is imported where it is used: wap.toml holds these models, and reading it (or the
# run store) must not load the lakehouse (tests/test_layers.py).
if TYPE_CHECKING:
    from pyspark.sql.types import DataType

    from wapflow.audit.checktype import Compiled
    from wapflow.audit.metrics import FileMetrics


def _lit_sql(v: Scalar) -> str:
    """SQL text of a literal, for the reproduction query shown to people (never executed by wapflow)."""
    from wapflow.sql.identifiers import sql_string

    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, (int, float)):
        return repr(v)
    return sql_string(str(v))


def _string_column(chk: RowColumnCheck, col_type: DataType | None, where: str) -> None:
    from pyspark.sql.types import StringType

    if not isinstance(col_type, StringType):
        raise ConfigError(
            f"{where}: column '{chk.columns()[0]}' is {col_type.simpleString() if col_type else '?'}, not a string",
            hint=f"{chk.type_name()} applies to string columns; use between or expression for others",
        )


class NotNullCheck(RowColumnCheck):
    check: Literal["not_null"]

    description: ClassVar[str] = "Fails when a new row has NULL in the column."
    example: ClassVar[str] = '[[tables."nyc.trips".checks]]\ncheck = "not_null"\ncolumn = "passenger_count"\n'
    computed: ClassVar[tuple[Evidence, ...]] = ("metadata", "write")

    def default_name(self) -> str:
        return f"not_null({self.column})"

    def _rule(self, mapping: dict[str, str]) -> Rule:
        c, qc = self._col(mapping)
        return Rule(c.isNull(), f"{qc} IS NULL", "no NULLs")

    @property
    def counted_by_iceberg(self) -> bool:
        return not self.filter

    def from_metadata(self, c: Compiled, fm: FileMetrics) -> dict[str, Any] | None:
        return null_counts(self, c, fm)


_FRACTIONAL = frozenset({"float", "double"})  # Spark's simpleString() of the types


def _number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _whole(v: object) -> TypeGuard[int]:
    """An integer (a bound of an integer column), not a bool."""
    return isinstance(v, int) and not isinstance(v, bool)


def _coerce(bound: Any, like: Any) -> Any:
    if isinstance(like, datetime) and isinstance(bound, str):
        return datetime.fromisoformat(bound)
    if isinstance(like, date) and not isinstance(like, datetime) and isinstance(bound, str):
        return date.fromisoformat(bound)
    return bound


class BetweenCheck(RowColumnCheck):
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
            return f"between({self.column}, {range_name(self.min, self.max)}{flag})"
        if self.min_inclusive and self.max_inclusive:
            return f"between({self.column}, {self.min}, {self.max})"
        lo = "[" if self.min_inclusive else "("
        hi = "]" if self.max_inclusive else ")"
        return f"between({self.column}, {lo}{self.min}, {self.max}{hi})"

    def validate_on(self, on: Against) -> None:
        from pyspark.sql.types import NumericType

        if isinstance(on.col_type, NumericType):
            for bound in (self.min, self.max):
                if isinstance(bound, str):
                    raise ConfigError(f"{on.where}: bound {bound!r} is a string but '{self.column}' is numeric")

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

    def bounds_settle_a_pass(self, col_type: str | None) -> bool:
        # Numbers on a numeric column only: string bounds may be of dates, times or text Iceberg truncates.
        numeric = col_type is not None and (col_type in INTEGER_TYPES | _FRACTIONAL or col_type.startswith("decimal"))
        return numeric and not self.filter and all(_number(b) for b in (self.min, self.max) if b is not None)

    def from_metadata(self, c: Compiled, fm: FileMetrics) -> dict[str, Any] | None:
        if self.filter:
            return None
        col = c.mapping[self.column].lower()
        lo, hi = fm.lower.get(col), fm.upper.get(col)
        if lo is None or hi is None or isinstance(lo, str) or isinstance(hi, str):
            return None  # unknown, or string bounds (Iceberg truncates them): scan instead
        if (isinstance(lo, float) or isinstance(hi, float)) and fm.nan_counts.get(col) != 0:
            return None  # bounds leave NaNs out (and NaN fails a max): only a NaN count known to be 0 settles it
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


class AcceptedValuesCheck(RowColumnCheck):
    check: Literal["accepted_values"]
    values: list[Scalar] = Field(min_length=1, description="the values allowed (case-sensitive)")
    computed: ClassVar[tuple[Evidence, ...]] = ("metadata", "write")

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

    def _whole_range(self) -> tuple[int, int] | None:
        """(lowest, highest) when the values are every integer between them: bounds inside that range settle it."""
        ints = {v for v in self.values if _whole(v)}
        if len(ints) != len(self.values) or max(ints) - min(ints) + 1 != len(ints):
            return None
        return min(ints), max(ints)

    def bounds_settle_a_pass(self, col_type: str | None) -> bool:
        # An integer column's only: a float or decimal 2.5 lies between 1 and 6.
        return col_type in INTEGER_TYPES and not self.filter and self._whole_range() is not None

    def from_metadata(self, c: Compiled, fm: FileMetrics) -> dict[str, Any] | None:
        span = self._whole_range()
        if self.filter or span is None:
            return None
        col = c.mapping[self.column].lower()
        lo, hi = fm.lower.get(col), fm.upper.get(col)
        # Unknown bounds, or a column of other values (a float 2.5 lies between 1 and 6), settle nothing; nor do
        # bounds outside the range: the scan counts those rows.
        if _whole(lo) and _whole(hi) and span[0] <= lo and hi <= span[1]:
            return {f"{c.key}_f": 0, f"{c.key}_n": fm.rows}
        return None


class RegexCheck(RowColumnCheck):
    check: Literal["regex"]
    # Java regex syntax (\p{L}, possessive quantifiers...): Spark validates it before any write.
    pattern: str = Field(min_length=1, description="a Java regex; matches anywhere (anchor with ^...$)")

    description: ClassVar[str] = "Fails when a non-null value of a string column does not match the pattern."
    example: ClassVar[str] = (
        '[[tables."nyc.trips".checks]]\ncheck = "regex"\ncolumn = "vendor"\npattern = \'^\\p{L}+$\'\n'
    )

    def default_name(self) -> str:
        return f"regex({self.column}, {self.pattern})"

    def validate_on(self, on: Against) -> None:
        from pyspark.sql import functions as F

        _string_column(self, on.col_type, on.where)
        try:
            on.df.sparkSession.range(1).select(F.lit("").rlike(self.pattern)).collect()
        except Exception as e:  # noqa: BLE001 - Java regex dialect differs slightly from Python's
            raise ConfigError(f"{on.where}: Spark rejects the pattern: {first_line(e)}") from None

    def _rule(self, mapping: dict[str, str]) -> Rule:
        c, qc = self._col(mapping)
        return Rule(
            c.isNotNull() & ~c.rlike(self.pattern),
            f"{qc} IS NOT NULL AND NOT ({qc} RLIKE {_lit_sql(self.pattern)})",
            f"matches {self.pattern}",
        )


class MaxLengthCheck(RowColumnCheck):
    check: Literal["max_length"]
    max: int = Field(ge=0, description="the longest value allowed, in characters")

    description: ClassVar[str] = "Fails when a value of a string column is longer than max characters."
    example: ClassVar[str] = '[[tables."nyc.trips".checks]]\ncheck = "max_length"\ncolumn = "vendor"\nmax = 64\n'

    def default_name(self) -> str:
        return f"max_length({self.column}, {self.max})"

    def validate_on(self, on: Against) -> None:
        _string_column(self, on.col_type, on.where)

    def _rule(self, mapping: dict[str, str]) -> Rule:
        from pyspark.sql import functions as F

        c, qc = self._col(mapping)
        return Rule(
            c.isNotNull() & (F.length(c) > F.lit(self.max)), f"length({qc}) > {self.max}", f"length <= {self.max}"
        )


class ExpressionCheck(RowCheck):
    check: Literal["expression"]
    sql: str = Field(min_length=1, description="a Spark SQL boolean over the row's columns")

    description: ClassVar[str] = "Fails for a row where the SQL condition is false or NULL."
    example: ClassVar[str] = '[[tables."nyc.trips".checks]]\ncheck = "expression"\nsql = "dropoff_at >= pickup_at"\n'

    @field_validator("sql")
    @classmethod
    def _sql_is_pure(cls, v: str) -> str:
        return read_only(sqlguard.check_expression_text, v, "expression")

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
