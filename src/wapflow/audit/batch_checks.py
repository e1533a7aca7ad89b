"""Batch-level check types: one verdict for the whole batch (a rate, a count, a key, a join, a query)."""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from wapflow import display
from wapflow.audit import sqlguard
from wapflow.audit.anomaly import (
    APPEAR_SHARE,
    BLOCKS_BEYOND,
    COLD_START_RUNS,
    DISTINCT_RSD,
    DUPLICATE_RSD,
    METRICS,
    MODELS,
    RECENT_RUNS,
    RHYTHM_HISTORY,
    RHYTHM_RUNS,
    TAIL_MEMORY,
    VALUES_CAP,
    VALUES_MEMORY,
    VANISH_EXPECTED,
    WEEKDAY_RUNS,
    WEEKDAYS,
    Explained,
    Judged,
    Seasonality,
    Shifted,
    as_counts,
    as_number,
    category_changes,
    history_of,
    judge,
    made_of,
    mean_shifted,
    nulls_explained,
    same_weekday,
    weekday_band,
    weekday_of,
    weekly_rhythm,
)
from wapflow.audit.checktype import (
    Against,
    CheckType,
    ColumnCheck,
    Evidence,
    Rule,
    Verdict,
    count_if,
    first_line,
    null_counts,
    parse_duration,
    range_name,
    read_only,
)
from wapflow.errors import ConfigError, InvalidIdentifier, did_you_mean
from wapflow.spark.shared_session import session_change
from wapflow.sql.layout import INTEGER_TYPES

# wapflow.sql.identifiers is imported where it is used: wap.toml holds these models, and reading it (or the
# run store) must not load the lakehouse (tests/test_layers.py).
if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from wapflow.audit.checktype import AuditContext, Compiled
    from wapflow.audit.metrics import FileMetrics
    from wapflow.sql.identifiers import TableName


class NullRateCheck(ColumnCheck):
    check: Literal["null_rate"]
    max: float = Field(ge=0, le=1, description="the largest fraction of NULLs allowed (0..1)")

    description: ClassVar[str] = "Fails when the fraction of NULLs in the column is above max."
    example: ClassVar[str] = '[[tables."nyc.trips".checks]]\ncheck = "null_rate"\ncolumn = "tip_amount"\nmax = 0.2\n'
    computed: ClassVar[tuple[Evidence, ...]] = ("metadata", "write")

    def default_name(self) -> str:
        return f"null_rate({self.column}) <= {self.max}"

    def compile(self, mapping: dict[str, str]) -> Rule:
        from pyspark.sql import functions as F

        from wapflow.sql.identifiers import quote

        qc = quote(mapping[self.column])
        fail_sql = f"({self.filter}) AND ({qc} IS NULL)" if self.filter else f"{qc} IS NULL"
        return Rule(F.col(qc).isNull(), fail_sql, f"null rate <= {self.max}")

    @property
    def counted_by_iceberg(self) -> bool:
        return not self.filter

    def from_metadata(self, c: Compiled, fm: FileMetrics) -> dict[str, Any] | None:
        return null_counts(self, c, fm)

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
        return f"row_count({range_name(self.min, self.max)})"

    def compile(self, mapping: dict[str, str]) -> Rule:
        if self.min is None:
            return Rule(None, None, f"<= {self.max}")
        if self.max is None:
            return Rule(None, None, f">= {self.min}")
        return Rule(None, None, f"[{self.min}, {self.max}]")

    def aggregates(self, c: Compiled) -> list[Column]:
        return [count_if(c.applies).alias(f"{c.key}_n")]

    @property
    def counted_by_iceberg(self) -> bool:
        return not self.filter

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


# Groups of 64 keys pay where each holds several: a key whose range (the added files' bounds) spans at most this
# many values per row, 4 keys a group on average. Sparser keys (hashes, random ids) are grouped by themselves,
# which is faster for them: 5.4 s against 6.4 s for 10M hashed keys.
BIT_WORD_VALUES_PER_ROW = 16


def duplicate_rows_by_bit_words(keys: DataFrame) -> int:
    """Rows beyond the first for each value of the one BIGINT column of `keys` (no NULLs), in one hash
    aggregate that Spark generates code for: each row sets bit `k & 63` of its group `k >> 6` (a bit OR), so
    rows minus the bits set is exact for every BIGINT. 10M consecutive keys make 160k groups and take 0.55 s,
    where Spark's bitmap aggregates (a sort and an interpreted update per row) took 1.0 s and grouping the keys
    themselves 6 s."""
    from pyspark.sql import functions as F

    k = keys.toDF("k")
    # A fixed expression over the alias above: no name of the user's reaches this SQL text.
    bits = F.bit_or(F.expr("shiftleft(1L, CAST(k & 63 AS INT))"))
    words = k.groupBy(F.shiftright(F.col("k"), 6)).agg(F.count(F.lit(1)).alias("n"), bits.alias("b"))
    row = words.agg(F.sum("n").alias("n"), F.sum(F.bit_count("b")).alias("d")).collect()[0]  # one row
    return int(row["n"] or 0) - int(row["d"] or 0)


class UniqueCheck(_KeyCheck):
    check: Literal["unique"]

    description: ClassVar[str] = (
        "Fails when two new rows share the key, within the batch (NULL keys ignored, as in SQL). On a merge "
        '(mode = "merge"): when the table, after the merge on the run\'s branch, holds a key the batch touched '
        "more than once (only those keys are looked up)."
    )
    example: ClassVar[str] = '[[tables."nyc.trips".checks]]\ncheck = "unique"\ncolumns = ["trip_id"]\n'
    computed: ClassVar[tuple[Evidence, ...]] = ("scan", "join")

    def compile(self, mapping: dict[str, str]) -> Rule:
        return Rule(None, None, "no duplicate keys")

    def _duplicate_groups(self, added: DataFrame, c: Compiled, ctx: AuditContext) -> DataFrame:
        """Keys held by more than one row: of the batch, or (a merge) of the table after it, semi-joined with
        the batch's distinct keys so only the keys it touched are grouped, not the whole table."""
        from pyspark.sql import functions as F

        keys = self._not_null_keys(added, c)
        if ctx.table_after is not None:
            touched = keys.distinct()
            keys = self._not_null_keys(ctx.table_after(), c).join(touched, on=self.columns(), how="left_semi")
        return keys.groupBy(*self.columns()).count().where(F.col("count") > 1)

    def measure(self, added: DataFrame, c: Compiled, ctx: AuditContext) -> tuple[dict[str, Any], Evidence]:
        """Rows beyond the first for each key (NULL keys are ignored, as in SQL UNIQUE and dbt's test)."""
        from pyspark.sql import functions as F

        if ctx.table_after is None:
            counted = self._by_bit_words(added, c, ctx)
            if counted is not None:
                return {f"{c.key}_f": counted}, "scan"
        groups = self._duplicate_groups(added, c, ctx)
        row = groups.agg(F.sum(F.col("count") - 1).alias("d")).collect()[0]  # one row
        return {f"{c.key}_f": int(row["d"] or 0)}, "join" if ctx.table_after is not None else "scan"

    def _by_bit_words(self, added: DataFrame, c: Compiled, ctx: AuditContext) -> int | None:
        """The same count for one integer key whose range is dense (duplicate_rows_by_bit_words), without
        shuffling the rows. None where it does not apply, and the grouping counts: a key of several or
        non-integer columns, one without bounds in the added files' metrics, or one sparser than
        BIT_WORD_VALUES_PER_ROW."""
        if len(self.columns()) != 1 or ctx.file_metrics is None:
            return None
        name = c.mapping[self.columns()[0]]
        field = next((f for f in added.schema.fields if f.name == name), None)
        if field is None or field.dataType.simpleString() not in INTEGER_TYPES:
            return None
        fm = ctx.file_metrics()
        lo, hi = (fm.lower.get(name.lower()), fm.upper.get(name.lower())) if fm is not None else (None, None)
        if fm is None or type(lo) is not int or type(hi) is not int or hi - lo > BIT_WORD_VALUES_PER_ROW * fm.rows:
            return None
        key = c.col(self.columns()[0])
        return duplicate_rows_by_bit_words(added.where(c.applies & key.isNotNull()).select(key.cast("bigint")))

    def reproduce_sql(self, c: Compiled, src: str) -> str | None:
        from wapflow.sql.identifiers import quote

        cols = ", ".join(quote(c.mapping.get(x, x)) for x in self.columns())
        where = f" WHERE {self.filter}" if self.filter else ""
        cond = (" AND " if where else " WHERE ") + " AND ".join(f"{quote(x)} IS NOT NULL" for x in self.columns())
        return f"SELECT {cols}, count(*) AS n FROM {src}{where}{cond} GROUP BY {cols} HAVING count(*) > 1"

    def offending(self, added: DataFrame, c: Compiled, ctx: AuditContext) -> DataFrame | None:
        return self._duplicate_groups(added, c, ctx)


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
        from wapflow.sql.identifiers import quote

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


class ForeignKeyCheck(ColumnCheck):
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

    def validate_on(self, on: Against) -> None:
        from wapflow.sql.identifiers import TableName

        ref = TableName.parse(self.table)
        if on.table_exists is not None and not on.table_exists(ref):
            raise ConfigError(
                f"{on.where}: the referenced table {ref} does not exist",
                hint="create and publish the referenced table first, or fix 'table'",
            )
        if on.table_columns is not None:
            cols = on.table_columns(ref)
            if self.ref_column.lower() not in {c.lower() for c in cols}:
                raise ConfigError(
                    f"{on.where}: {ref} has no column '{self.ref_column}'{did_you_mean(self.ref_column, cols)}",
                    hint=f"its columns are: {', '.join(cols)}",
                )

    def compile(self, mapping: dict[str, str]) -> Rule:
        return Rule(None, None, f"every value in {self.table}.{self.ref_column}")

    def _orphans(self, added: DataFrame, c: Compiled, ctx: AuditContext) -> DataFrame:
        from wapflow.sql.identifiers import TableName, quote

        if ctx.main_table is None:
            raise ConfigError(f"check '{self.display_name()}' needs access to {self.table}")
        ref = ctx.main_table(TableName.parse(self.table))
        ref_keys = ref.select(ref[quote(self.ref_column)].alias(self.column)).distinct()
        return self._not_null_keys(added, c).join(ref_keys, on=[self.column], how="left_anti")

    def measure(self, added: DataFrame, c: Compiled, ctx: AuditContext) -> tuple[dict[str, Any], Evidence]:
        return {f"{c.key}_f": self._orphans(added, c, ctx).count()}, "join"

    def reproduce_sql(self, c: Compiled, src: str) -> str | None:
        from wapflow.sql.identifiers import TableName, quote

        ref = TableName.parse(self.table)
        return (
            f"SELECT * FROM {src} b WHERE b.{quote(self.column)} IS NOT NULL AND NOT EXISTS "
            f"(SELECT 1 FROM {ref.dotted} r WHERE r.{quote(self.ref_column)} = b.{quote(self.column)})"
        )

    def offending(self, added: DataFrame, c: Compiled, ctx: AuditContext) -> DataFrame | None:
        return self._orphans(added, c, ctx)

    def main_tables(self, this: TableName, tables_in_sql: Callable[[str], set[TableName]]) -> set[TableName]:
        from wapflow.sql.identifiers import TableName

        return {TableName.parse(self.table)}


# Two float or double sums of the same amounts, added in another order, differ in their last digits: within this
# fraction of the larger of them, reconcile takes them as equal (on top of its tolerances).
FLOAT_SLACK = 1e-9


class ReconcileCheck(CheckType):
    """The batch's rows, or a column's sum, against the new rows of another table of the same multi-table run."""

    check: Literal["reconcile"]
    metric: Literal["rows", "sum"] = Field(description='what is compared: "rows" (a count) or "sum" (of `column`)')
    column: str | None = Field(default=None, description='metric = "sum": the column of this table to add up')
    against: str = Field(
        description="another table of the same multi-table run (`wap run-tables`), namespace.name: its new rows "
        "in this run are compared"
    )
    against_column: str | None = Field(
        default=None, description='metric = "sum": the column of the other table (default: `column`)'
    )
    tolerance: float = Field(
        default=0.0,
        ge=0,
        allow_inf_nan=False,
        description="the difference allowed, as a fraction of the other table's figure (0.01: 1%)",
    )
    abs_tolerance: float = Field(
        default=0.0,
        ge=0,
        allow_inf_nan=False,
        description="the difference allowed, in the metric's units (rows, or the column's); the larger of the two "
        "tolerances applies",
    )

    description: ClassVar[str] = (
        "Fails when the batch's rows, or a column's sum, differ from those of another table's new rows in the "
        "same multi-table run by more than the tolerance: |this - other| <= max(tolerance * |other|, abs_tolerance)."
    )
    example: ClassVar[str] = (
        '[[tables."shop.order_lines".checks]]\ncheck = "reconcile"\nmetric = "sum"\ncolumn = "amount"\n'
        'against = "shop.orders"\nagainst_column = "total"\ntolerance = 0.001\n'
    )
    computed: ClassVar[tuple[Evidence, ...]] = ("scan",)

    @field_validator("against")
    @classmethod
    def _table_name(cls, v: str) -> str:
        from wapflow.sql.identifiers import TableName

        try:
            return TableName.parse(v).dotted
        except InvalidIdentifier as e:
            raise PydanticCustomError("table_name", "{reason}", {"reason": f"{e.message} ({e.hint})"}) from None

    @model_validator(mode="after")
    def _columns(self) -> ReconcileCheck:
        # PydanticCustomError: the message as written, without pydantic's "Value error, " in front.
        if self.metric == "sum" and not self.column:
            raise PydanticCustomError(
                "reconcile_column",
                'reconcile with metric = "sum" needs column = "...", the column of this table to add up (and '
                "against_column, if the other table names it differently)",
            )
        if self.metric == "rows" and (self.column or self.against_column):
            raise PydanticCustomError(
                "reconcile_column",
                'reconcile with metric = "rows" counts rows and takes no column; to compare a column\'s totals, '
                'write metric = "sum"',
            )
        return self

    @property
    def other_column(self) -> str | None:
        return self.against_column or self.column

    def _figure(self, column: str | None) -> str:
        return "rows" if self.metric == "rows" else f"sum({column})"

    def default_name(self) -> str:
        return f"reconcile({self._figure(self.column)} = {self._figure(self.other_column)} of {self.against})"

    def columns(self) -> list[str]:
        return [self.column] if self.metric == "sum" and self.column else []

    def validate_on(self, on: Against) -> None:
        from pyspark.sql.types import NumericType

        if on.table is not None and self.against == on.table:
            raise ConfigError(
                f'{on.where}: against = "{self.against}" is the check\'s own table; reconcile compares two tables '
                "of one multi-table run",
                hint="name another table of the run in 'against', e.g. the orders whose totals these lines add up to",
            )
        if self.metric == "sum" and not isinstance(on.col_type, NumericType):
            got = on.col_type.simpleString() if on.col_type else "?"
            raise ConfigError(
                f"{on.where}: column '{self.column}' is {got}, not a number, so it has no sum",
                hint="name a numeric column in 'column', or compare rows with metric = \"rows\"",
            )

    def compile(self, mapping: dict[str, str]) -> Rule:
        other = f"{self._figure(self.other_column)} of {self.against}"
        allowed = [f"{format(self.tolerance * 100, '.4g')}%"] if self.tolerance else []
        allowed += [format(self.abs_tolerance, ".12g")] if self.abs_tolerance else []
        if not allowed:
            return Rule(None, None, f"= {other}")
        within = allowed[0] if len(allowed) == 1 else f"the larger of {' and '.join(allowed)}"
        return Rule(None, None, f"within {within} of {other}")

    def measure(self, added: DataFrame, c: Compiled, ctx: AuditContext) -> tuple[dict[str, Any], Evidence]:
        from wapflow.sql.identifiers import TableName

        where = self.where(ctx.this_table.dotted if ctx.this_table else None)
        if ctx.batch_of is None:
            raise ConfigError(
                f"{where}: reconcile compares tables of one multi-table run; run them together with wap run-tables",
                hint=f"e.g. wap run-tables {ctx.this_table or 'THIS.TABLE'}=FILES {self.against}=FILES, or a "
                "[runs.NAME] section in wap.toml naming both tables",
            )
        other_table = TableName.parse(self.against)
        if ctx.this_table is not None and other_table == ctx.this_table:
            raise ConfigError(
                f'{where}: against = "{self.against}" is the check\'s own table',
                hint="name another table of the run in 'against'",
            )
        try:
            other = ctx.batch_of(other_table)
        except ConfigError as e:
            raise ConfigError(f"{where}: {e.message}", hint=e.hint) from None
        mine = self._measure(added.where(c.applies), c.mapping.get(self.column) if self.column else None)
        theirs = self._measure(other, self._other_column_in(other, where))
        return {f"{c.key}_v": mine, f"{c.key}_a": theirs}, "scan"

    def _other_column_in(self, other: DataFrame, where: str) -> str | None:
        """The other table's column as its batch spells it, numeric, or a ConfigError naming it."""
        from pyspark.sql.types import NumericType

        name = self.other_column
        if self.metric == "rows" or name is None:
            return None
        field = next((f for f in other.schema.fields if f.name.lower() == name.lower()), None)
        if field is None:
            cols = other.columns
            raise ConfigError(
                f"{where}: {self.against} has no column '{name}'{did_you_mean(name, cols)}",
                hint=f"name one of its columns in 'against_column': {', '.join(cols)}",
            )
        if not isinstance(field.dataType, NumericType):
            raise ConfigError(
                f"{where}: column '{name}' of {self.against} is {field.dataType.simpleString()}, not a number",
                hint="name a numeric column of it in 'against_column'",
            )
        return field.name

    def _measure(self, df: DataFrame, column: str | None) -> Any:
        """The batch's count, or the sum of its column (0 for no rows or only NULLs): int, Decimal or float."""
        from pyspark.sql import functions as F

        from wapflow.sql.identifiers import quote

        if column is None:
            return df.count()
        total = df.agg(F.sum(F.col(quote(column)))).collect()[0][0]  # a global aggregate: one row
        return 0 if total is None else total

    def verdict(self, c: Compiled, values: dict[str, Any], rows: int, ctx: AuditContext) -> Verdict:
        # A figure not gathered is a sum over no rows, as `measure` counts one: 0.
        mine, theirs = (values.get(f"{c.key}_{k}") for k in ("v", "a"))
        mine, theirs = 0 if mine is None else mine, 0 if theirs is None else theirs
        ok, diff = reconciles(mine, theirs, self.tolerance, self.abs_tolerance)
        this = ctx.this_table.dotted if ctx.this_table else "this table"
        share = f" ({display.percent(float(diff) / abs(float(theirs)))})" if theirs else ""  # of the other's figure
        observed = (
            f"{this} {self._figure(self.column)} = {_shown(mine)}; {self.against} {self._figure(self.other_column)} "
            f"= {_shown(theirs)}; difference {_difference(diff)}{share}"
        )
        return Verdict(ok, observed, 0)


def reconciles(mine: Any, theirs: Any, tolerance: float, abs_tolerance: float) -> tuple[bool, Any]:
    """Whether two figures agree: |mine - theirs| <= max(tolerance * |theirs|, abs_tolerance), and for a float
    figure also within FLOAT_SLACK of the larger. Counts and decimal sums are compared exactly (as Decimal).
    Returns the verdict and |mine - theirs|."""
    if isinstance(mine, float) or isinstance(theirs, float):
        a, b = float(mine), float(theirs)
        diff = abs(a - b)
        allowed = max(tolerance * abs(b), abs_tolerance, FLOAT_SLACK * max(abs(a), abs(b)))
        return diff <= allowed, diff
    da, db = Decimal(mine), Decimal(theirs)
    exact = abs(da - db)
    limit = max(Decimal(repr(tolerance)) * abs(db), Decimal(repr(abs_tolerance)))
    return exact <= limit, exact


def _shown(v: Any) -> str:
    """A figure as reports print it: counts and decimals as they are, floats to 12 significant digits (a float
    sum is compared to FLOAT_SLACK of itself, so its digits matter)."""
    return format(v, ".12g") if isinstance(v, float) else str(v)


def _difference(v: Any) -> str:
    """|mine - theirs| as reports print it: a count or decimal exactly, a float's as wapflow.display words it
    (a float sum's rounding noise, 4.4e-10, is `< 0.000001`, not an exponent)."""
    return display.number(v) if isinstance(v, float) else str(v)


class FreshnessCheck(ColumnCheck):
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

    def validate_on(self, on: Against) -> None:
        from pyspark.sql.types import DateType, TimestampNTZType, TimestampType

        if not isinstance(on.col_type, (TimestampType, TimestampNTZType, DateType)):
            raise ConfigError(
                f"{on.where}: column '{self.column}' is {on.col_type.simpleString() if on.col_type else '?'}, "
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
    """Row count within a band around the median of the table's last published runs (Iceberg's history)."""

    check: Literal["volume"]
    runs: int = Field(default=10, ge=1, le=1000, description="how many of the table's last published runs")
    sensitivity: float = Field(
        default=3.0,
        gt=0,
        description="the band's width in spreads of the runs' log row counts (as anomaly on row_count)",
    )
    tolerance: float | None = Field(
        default=None, gt=0, description="instead of the model's band: a fixed band around their median (0.5: ±50%)"
    )
    min_history: int = Field(default=3, ge=1, description="passes (or warns) until this many published runs exist")
    seasonality: Seasonality = Field(
        default="auto",
        description="auto: the runs moved onto this weekday's level when the history has a weekly rhythm; weekly: "
        "only the published runs committed on the same weekday (UTC) as this run started on make the band (the "
        "last `runs` of them; min_history of them needed); none: the last runs as they are",
    )
    on_short_history: Literal["pass", "warn"] = Field(
        default="warn",
        description="what the check does until min_history published runs exist: warns (never a silent pass; a "
        'table with review = "on_warn" holds the run for a person), or passes',
    )

    description: ClassVar[str] = (
        "Fails when the row count is outside the band of the table's last published runs: the anomaly check's "
        "multiplicative band on row_count (median x/÷ e^(sensitivity x the MAD of the logs), a least change of 25%), "
        'or ±tolerance of the median; with seasonality = "weekly", of the runs on the same weekday only.'
    )
    example: ClassVar[str] = '[[tables."nyc.trips".checks]]\ncheck = "volume"\nruns = 30\nsensitivity = 3.0\n'
    computed: ClassVar[tuple[Evidence, ...]] = ("metadata",)

    def default_name(self) -> str:
        weekly = " on the same weekday" if self.seasonality == "weekly" else ""
        if self.tolerance is not None:
            return f"volume(±{self.tolerance:.0%} of median of last {self.runs} runs{weekly})"
        return f"volume(median ± {self.sensitivity:g} MAD of last {self.runs} runs{weekly})"

    def compile(self, mapping: dict[str, str]) -> Rule:
        return Rule(None, None, f"within the band of the last {self.runs} runs")

    def measure(self, added: DataFrame, c: Compiled, ctx: AuditContext) -> tuple[dict[str, Any], Evidence]:
        return {}, "metadata"  # the batch's row count, which every audit has, and the table's history

    def verdict(self, c: Compiled, values: dict[str, Any], rows: int, ctx: AuditContext) -> Verdict:
        if ctx.batch_at is not None and ctx.metric_history:
            # The table names a time column: the runs' row counts keyed on their batch's own day (the metric
            # history), as the anomaly check's, so a backfill or a late delivery is judged by its day.
            weekday = weekday_of(ctx.day()) if self.seasonality == "weekly" else None
            keyed = ctx.metric_history("row_count", "", self.runs, weekday)
            if len(keyed) >= self.min_history:
                return self._judged(c, list(keyed), rows, weekday, ctx, keyed)
        weekday = weekday_of(ctx.run_at or datetime.now(UTC)) if self.seasonality == "weekly" else None
        runs = list(ctx.history()) if ctx.history else []
        history = same_weekday(runs, weekday, self.runs)
        if len(history) < self.min_history:
            return short_history(c, rows, len(history), self.min_history, self.on_short_history, weekday)
        rhythm = None
        if self.seasonality == "auto" and self.tolerance is None:
            today = weekday_of(ctx.run_at or datetime.now(UTC))
            levels = {w: same_weekday(runs, w, RHYTHM_RUNS) for w in range(7)}
            rhythm = weekly_rhythm(
                "row_count", [(weekday_of(at), float(n)) for at, n in runs[: self.runs]], levels, today
            )
        return self._judged(c, history, rows, weekday, ctx, rhythm=rhythm)

    def _judged(
        self,
        c: Compiled,
        history: list[float],
        rows: int,
        weekday: int | None,
        ctx: AuditContext,
        keyed: Sequence[float] | None = None,
        rhythm: tuple[list[float], str] | None = None,
    ) -> Verdict:
        """The verdict on `history` (enough of it); `keyed`: the metric history's row counts by batch day, whose
        weekly rhythm (seasonality "auto") is found as the anomaly check's."""
        if keyed is not None and self.seasonality == "auto" and self.tolerance is None:
            rhythm = seasonal("row_count", "", keyed, self.runs, ctx)
        if self.tolerance is not None:
            med = statistics.median(history)
            lo, hi = med * (1 - self.tolerance), med * (1 + self.tolerance)
            basis = f"; same weekday: {history_of(len(history), weekday)}" if weekday is not None else ""
            c.threshold = f"[{lo:.0f}, {hi:.0f}] (median {med:.0f} of last {len(history)} runs{basis})"
            # Recorded as a model's band is (edges, median, runs): the report and the dashboard's trend show the
            # band this run was judged by, not one recomputed with a model the check did not use.
            fixed: dict[str, Any] = {"value": rows, "band": [lo, hi], "median": med, "mad": None}
            fixed["history"] = len(history)
            if weekday is not None:
                fixed["seasonality"] = f"same weekday: {history_of(len(history), weekday)}"
            return Verdict(lo <= rows <= hi, fixed, 0)
        judged_on = rhythm[0] if rhythm else history
        b = with_rhythm(judge("row_count", judged_on, self.sensitivity, weekday, holiday=ctx.holiday), rhythm)
        c.threshold = b.describe(self.sensitivity)
        ok = b.contains(rows)
        evidence = {**b.evidence(rows), **({"seasonality": rhythm[1]} if rhythm else {})}
        if ctx.holiday is not None:
            evidence["holiday"] = ctx.holiday
        if keyed is not None and ctx.batch_at is not None:
            evidence["day"] = f"{ctx.batch_at:%Y-%m-%d}, a {WEEKDAYS[weekday_of(ctx.batch_at)]}: the batch's own"
            c.threshold += f"; judged by the batch's day, {evidence['day'].split(':')[0]}"
        if not ok and len(history) < COLD_START_RUNS:  # too few runs to block on: warns (and says so)
            c.threshold += f"; {len(history)} runs of history: too few to block on, warns"
            return Verdict(False, evidence, 0, warn_only=True)
        return Verdict(ok, evidence, 0)

    def main_tables(self, this: TableName, tables_in_sql: Callable[[str], set[TableName]]) -> set[TableName]:
        return {this}


def with_rhythm(b: Judged, rhythm: tuple[list[float], str] | None) -> Judged:
    """The band, saying first that it was made of a history moved onto this weekday's level (weekly_rhythm)."""
    return b if rhythm is None else dataclasses.replace(b, terms=(rhythm[1], *b.terms))


def metric_rhythm(
    metric: str, column: str, history: Sequence[float], ctx: AuditContext
) -> tuple[list[float], str] | None:
    """An anomaly check's history moved onto this run's weekday level when it has a weekly rhythm (seasonality
    "auto"): each weekday's last RHYTHM_RUNS published runs give its level and the weekday of the band's runs."""
    runs = getattr(history, "runs", ())
    if not ctx.metric_history or len(history) < RHYTHM_HISTORY or len(runs) != len(history):
        return None
    if MODELS.get(metric) == "proportion":
        return None  # judged with the batch's size, never moved (weekly_rhythm): no need to read the weekdays
    levels: dict[int, list[float]] = {}
    day_of: dict[str, int] = {}
    for w in range(7):
        same = ctx.metric_history(metric, column, RHYTHM_RUNS, w)
        levels[w] = list(same)
        day_of.update(dict.fromkeys(getattr(same, "runs", ()), w))
    if any(r not in day_of for r in runs):
        return None  # a weekday with more runs in the window than its level reads (several runs a day)
    today = weekday_of(ctx.day())
    return weekly_rhythm(metric, [(day_of[r], v) for r, v in zip(runs, history, strict=True)], levels, today)


def metric_weekdays(metric: str, column: str, window: int, ctx: AuditContext) -> tuple[list[float], str] | None:
    """An anomaly check's per-weekday band history (seasonality "auto", wapflow.audit.anomaly.weekday_band): the
    last TAIL_MEMORY published runs, and each weekday's share of them."""
    if not ctx.metric_history or MODELS.get(metric) == "proportion":
        return None
    recent = ctx.metric_history(metric, column, TAIL_MEMORY, None)
    if len(recent) < WEEKDAY_RUNS:
        return None
    weeks = {w: ctx.metric_history(metric, column, TAIL_MEMORY // 7 + 1, w) for w in range(7)}
    day_of = {r: w for w, h in weeks.items() for r in getattr(h, "runs", ())}
    latest = [day_of[r] for r in getattr(recent, "runs", ())[:RECENT_RUNS] if r in day_of]
    by_weekday = {w: list(h) for w, h in weeks.items()}
    return weekday_band(metric, by_weekday, list(recent), weekday_of(ctx.day()), window, latest)


def seasonal(
    metric: str, column: str, history: Sequence[float], window: int, ctx: AuditContext
) -> tuple[list[float], str] | None:
    """Seasonality "auto" over the metric history: the per-weekday band where a year's runs show a weekly cycle,
    else the history moved onto this weekday's level where it has a weekly rhythm, else None (the plain band)."""
    return metric_weekdays(metric, column, window, ctx) or metric_rhythm(metric, column, history, ctx)


def short_history(c: Compiled, value: Any, have: int, need: int, on_short: str, weekday: int | None = None) -> Verdict:
    """The verdict of a history check before `need` published runs exist: passes, or warns, and says so
    (`weekday`: only runs on that weekday count, weekly seasonality)."""
    basis = f" (same weekday: {history_of(have, weekday)})" if weekday is not None else ""
    c.threshold = f"{have} of {need} runs of history{basis}: {'passes' if on_short == 'pass' else 'warns'} until then"
    observed = {"value": value, "history": have, "min_history": need}
    if weekday is not None:
        observed["seasonality"] = f"same weekday: {history_of(have, weekday)}"
    return Verdict(on_short == "pass", observed, 0, warn_only=True)


# Anomaly metrics that are a mean: measured as a sum and a non-null count.
MEANS = ("mean", "mean_length")


class AnomalyCheck(CheckType):
    """A batch metric within the band the table's last published runs make (wapflow.audit.anomaly)."""

    check: Literal["anomaly"]
    metric: Literal[
        "row_count",
        "duplicate_fraction",
        "null_fraction",
        "distinct",
        "values",
        "min",
        "max",
        "mean",
        "sum",
        "mean_length",
    ] = Field(
        description="row_count and duplicate_fraction (the batch's rows), null_fraction, distinct and values (any "
        "column; values: a category column's set of values, blocking a value that vanished or appeared), min, max, "
        "mean, sum (numeric columns), mean_length (string columns)"
    )
    column: str | None = Field(
        default=None, description="the column (every metric but row_count and duplicate_fraction)"
    )
    min_history: int = Field(default=7, ge=1, description="passes (or warns) until this many published runs exist")
    sensitivity: float = Field(
        default=3.0,
        gt=0,
        description="the band's width in spreads of the window: a ratio for counts and sums, a rate's binomial and "
        "day-to-day spread for null_fraction, the scaled MAD for the rest (wapflow.audit.anomaly.judge)",
    )
    window: int = Field(default=30, ge=1, le=1000, description="how many of the table's last published runs")
    seasonality: Seasonality = Field(
        default="auto",
        description="auto: the window's runs moved onto this weekday's level when the history has a weekly rhythm "
        "(wapflow.audit.anomaly.weekly_rhythm); weekly: the band is made of the published runs that started on the "
        "same weekday (UTC) as this one only (the last `window` of them; min_history of them needed); none: the "
        "window's runs as they are",
    )
    on_short_history: Literal["pass", "warn"] = Field(
        default="warn",
        description="what the check does until min_history published runs exist: warns (never a silent pass; a "
        'table with review = "on_warn" holds the run for a person), or passes',
    )
    blocks_beyond: float | None = Field(
        default=BLOCKS_BEYOND,
        gt=0,
        lt=1,
        description="a change this large always blocks, however wide the history's tails: a ratio for counts and "
        "sums (0.4: 40% fewer, or 1/0.6 as many), points for null_fraction and duplicate_fraction (0.1: ten "
        "points), a share of |median| for the rest (wapflow.audit.anomaly.BLOCKS_BEYOND)",
    )

    description: ClassVar[str] = (
        "Fails when a batch metric (row count, the share of duplicated rows, a column's null fraction, distinct "
        "count, min, max, mean, sum, mean "
        "length) is outside the band its model makes of the table's last published runs (a multiplicative band for "
        "counts and sums, a rate band with the batch's size for null fractions, median ± sensitivity x MAD for the "
        "rest, widened to the 1st and 99th percentiles of the window once it has 20 runs, of the last 365 published "
        'runs once 60 exist; with seasonality = "weekly": of those on the same weekday, the batch\'s own day where '
        "the table names a time_column). The distinct count is an estimate (approx_count_distinct, "
        f"HyperLogLog++, relative standard deviation {DISTINCT_RSD:.0%}) of the non-null values, observed during "
        "the write. With metric values, fails when a category column's value vanished (7 or more rows expected at "
        "its usual share) or appeared (in 1% or more of the rows) against the history's values."
    )
    example: ClassVar[str] = (
        '[[tables."nyc.trips".checks]]\ncheck = "anomaly"\nmetric = "distinct"\ncolumn = "vendor_id"\n'
        'min_history = 4\nsensitivity = 3.0\nseasonality = "weekly"\n'
    )
    computed: ClassVar[tuple[Evidence, ...]] = ("metadata", "write")

    @model_validator(mode="after")
    def _column_fits_metric(self) -> AnomalyCheck:
        whole = METRICS[self.metric] == "table"
        if whole and self.column is not None:
            raise ValueError(f"anomaly: {self.metric} is the batch's, it takes no column")
        if not whole and self.column is None:
            raise ValueError(f"anomaly: metric {self.metric} needs a column")
        if self.filter:
            raise ValueError("anomaly compares whole batches with the table's history: it takes no filter")
        return self

    def columns(self) -> list[str]:
        return [self.column] if self.column else []

    def default_name(self) -> str:
        on = f"({self.column})" if self.column else ""
        weekly = ", weekly" if self.seasonality == "weekly" else ""
        return f"anomaly({self.metric}{on}{weekly})"

    def validate_on(self, on: Against) -> None:
        from pyspark.sql.types import NumericType, StringType

        kind = METRICS[self.metric]
        wants = {"numeric": NumericType, "string": StringType}.get(kind)
        if wants is None or isinstance(on.col_type, wants):
            return
        got = on.col_type.simpleString() if on.col_type else "?"
        raise ConfigError(
            f"{on.where}: metric {self.metric} needs a {kind} column; '{self.column}' is {got}",
            hint="null_fraction and distinct fit any column, min/max/mean/sum numeric ones, mean_length strings",
        )

    def compile(self, mapping: dict[str, str]) -> Rule:
        return Rule(None, None, f"within the band of the last {self.window} published runs")

    def _column_key(self, c: Compiled) -> str:
        """The column as the metric history names it: the batch's spelling, lower-cased ("" for row_count)."""
        return c.mapping[self.column].lower() if self.column else ""

    def aggregates(self, c: Compiled) -> list[Column]:
        from pyspark.sql import functions as F

        if self.metric == "values":
            return []  # rows per value: a grouped count of its own (measure)
        rows = F.count(F.lit(1))
        if self.metric == "row_count":
            return [rows.alias(f"{c.key}_n")]
        if self.metric == "duplicate_fraction":  # distinct rows: the estimate of their whole-row hashes
            distinct_rows = F.approx_count_distinct(F.xxhash64(F.col("*")), rsd=DUPLICATE_RSD)
            return [distinct_rows.alias(f"{c.key}_v"), rows.alias(f"{c.key}_n")]
        col = c.col(self.column or "")
        if self.metric == "null_fraction":
            return [count_if(col.isNull()).alias(f"{c.key}_f"), rows.alias(f"{c.key}_n")]
        if self.metric == "distinct":
            return [F.approx_count_distinct(col, rsd=DISTINCT_RSD).alias(f"{c.key}_v")]
        if self.metric in MEANS:
            return [self._sum(c), F.count(col).alias(f"{c.key}_c")]  # the mean: the sum over the non-null count
        agg = {"min": F.min, "max": F.max, "sum": F.sum}[self.metric]
        return [agg(col).alias(f"{c.key}_v")]

    def _sum(self, c: Compiled) -> Column:
        from pyspark.sql import functions as F

        col = c.col(self.column or "")
        return F.sum(F.length(col) if self.metric == "mean_length" else col).alias(f"{c.key}_s")

    def write_aggregates(self, c: Compiled, *, counted: bool, bounds: Mapping[str, str] | None = None) -> list[Column]:
        if counted and self.metric in MEANS:
            # The non-null count comes from Iceberg's null counts: observing the sum alone costs the write about
            # half of what Spark's avg does (a sum and a count per row; benchmarks/bench_anomaly.py).
            return [self._sum(c)]
        return super().write_aggregates(c, counted=counted, bounds=bounds)

    def answered(self, c: Compiled, values: Mapping[str, Any]) -> bool:
        if self.metric in MEANS:
            return f"{c.key}_s" in values and f"{c.key}_c" in values
        if self.metric == "duplicate_fraction":
            return f"{c.key}_v" in values and f"{c.key}_n" in values
        return super().answered(c, values)

    @property
    def counted_by_iceberg(self) -> bool:
        return self.metric in ("row_count", "null_fraction")

    def from_metadata(self, c: Compiled, fm: FileMetrics) -> dict[str, Any] | None:
        if self.metric == "row_count":
            return {f"{c.key}_n": fm.rows}
        if self.metric == "null_fraction":
            return null_counts(self, c, fm)
        if self.metric in MEANS:
            nulls = fm.null_counts.get(self._column_key(c))
            return None if nulls is None else {f"{c.key}_c": fm.rows - nulls}  # the observed sum completes it
        if self.metric in ("min", "max"):
            bounds = fm.lower if self.metric == "min" else fm.upper
            v = bounds.get(self._column_key(c))
            return {f"{c.key}_v": v} if as_number(v) is not None else None
        return None

    def value(self, c: Compiled, values: dict[str, Any]) -> float | None:
        """The batch's metric from the gathered values (None: no value, e.g. the mean of no rows)."""
        if self.metric == "row_count":
            return float(int(values.get(f"{c.key}_n") or 0))
        if self.metric == "null_fraction":
            n = int(values.get(f"{c.key}_n") or 0)
            return int(values.get(f"{c.key}_f") or 0) / n if n else 0.0
        if self.metric == "duplicate_fraction":  # an estimate a little above the rows counts none duplicated
            n = int(values.get(f"{c.key}_n") or 0)
            return (n - min(int(values.get(f"{c.key}_v") or 0), n)) / n if n else 0.0
        if self.metric in MEANS:
            total, count = as_number(values.get(f"{c.key}_s")), int(values.get(f"{c.key}_c") or 0)
            return None if total is None or not count else total / count
        if self.metric == "values":
            return float(len(values.get(f"{c.key}_v") or []))  # how many (the values themselves: _values)
        return as_number(values.get(f"{c.key}_v"))

    def measured(self, c: Compiled, values: dict[str, Any], rows: int) -> dict[tuple[str, str], float | str]:
        if self.metric == "values":
            got = self._values(c, values)
            return {} if got is None else {(self.metric, self._column_key(c)): json.dumps(got)}
        v = self.value(c, values)
        return {} if v is None else {(self.metric, self._column_key(c)): v}

    @property
    def observable(self) -> bool:
        return self.metric != "values"  # rows per value are a grouped count, not a plain aggregate

    def measure(self, added: DataFrame, c: Compiled, ctx: AuditContext) -> tuple[dict[str, Any], Evidence]:
        """Metric "values": the batch's rows per value of the column (as text; NULL is no value), one grouped
        count cut one past VALUES_CAP (more: not a category)."""
        col = c.col(self.column or "").cast("string")
        grouped = added.where(col.isNotNull()).groupBy(col.alias("v")).count().limit(VALUES_CAP + 1)
        return {f"{c.key}_v": {str(r[0]): int(r[1]) for r in grouped.collect()}}, "scan"

    def _values(self, c: Compiled, values: dict[str, Any]) -> dict[str, int] | None:
        """The batch's rows per value (metric "values"), by value; None where there are more than VALUES_CAP."""
        got = values.get(f"{c.key}_v") or {}
        counts = {str(k): int(v) for k, v in (got.items() if isinstance(got, Mapping) else ((x, 1) for x in got))}
        return None if len(counts) > VALUES_CAP else dict(sorted(counts.items()))

    def _set_verdict(self, c: Compiled, values: dict[str, Any], ctx: AuditContext) -> Verdict:
        """Metric "values": the batch's values against the window's runs' (each of them had it, and it was
        frequent enough to miss: vanished) and the last VALUES_MEMORY runs' (none had it, and it holds a share of
        the batch: appeared). wapflow.audit.anomaly.category_changes."""
        got = self._values(c, values)
        if got is None:
            c.threshold = f"at most {VALUES_CAP} values (a category column): warns"
            return Verdict(False, f"more than {VALUES_CAP} values: not a category column", 0, warn_only=True)
        column = self._column_key(c)
        texts = ctx.metric_texts(self.metric, column, max(self.window, VALUES_MEMORY)) if ctx.metric_texts else []
        sets = [as_counts(json.loads(t)) for t in texts]
        window = sets[: self.window]
        if len(window) < self.min_history:
            return short_history(c, len(got), len(window), self.min_history, self.on_short_history)
        changes = category_changes(got, window, sets)
        c.threshold = (
            f"the values each of the last {len(window)} published runs had (where {VANISH_EXPECTED:g} or more "
            f"rows were expected), and none that all of the last {len(sets)} lacked (in {APPEAR_SHARE:.0%} or "
            "more of the rows)"
        )
        evidence: dict[str, Any] = {"values": len(got), "history": len(window), "memory": len(sets)}
        if changes.vanished:
            evidence["vanished"] = [f"{v} (~{expected:.0f} rows expected)" for v, expected in changes.vanished]
        if changes.appeared:
            evidence["appeared"] = [f"{v} ({n} rows)" for v, n in changes.appeared]
        if changes.rare_gone:
            evidence["rare_values_missing"] = changes.rare_gone
        if changes.rare_new:
            evidence["rare_new_values"] = changes.rare_new
        ok = changes.ok
        if not ok and len(window) < COLD_START_RUNS:
            c.threshold += f"; {len(window)} runs of history: too few to block on, warns"
            return Verdict(False, evidence, 0, warn_only=True)
        return Verdict(ok, evidence, 0)

    def verdict(self, c: Compiled, values: dict[str, Any], rows: int, ctx: AuditContext) -> Verdict:
        if self.metric == "values":
            return self._set_verdict(c, values, ctx)
        value = self.value(c, values)
        weekday = weekday_of(ctx.day()) if self.seasonality == "weekly" else None
        history = (
            ctx.metric_history(self.metric, self._column_key(c), self.window, weekday) if ctx.metric_history else []
        )
        if len(history) < self.min_history:
            return short_history(c, value, len(history), self.min_history, self.on_short_history, weekday)
        proportion = MODELS.get(self.metric) == "proportion"
        rows_judged = int(values.get(f"{c.key}_n") or rows) if proportion else rows
        rhythm = None
        if self.seasonality == "auto":
            rhythm = seasonal(self.metric, self._column_key(c), history, self.window, ctx)
        judged_on = rhythm[0] if rhythm else history
        memory: Sequence[float] = ()
        if self.window < TAIL_MEMORY and rhythm is None and ctx.metric_history and len(history) >= self.window:
            memory = ctx.metric_history(self.metric, self._column_key(c), TAIL_MEMORY, weekday)
        b = judge(
            self.metric,
            judged_on,
            self.sensitivity,
            weekday,
            rows_judged or None,
            memory,
            self.blocks_beyond,
            ctx.holiday,
        )
        b = with_rhythm(b, rhythm)
        c.threshold = b.describe(self.sensitivity)
        formed = made_of(history, self.window)
        if formed.get("left_out"):
            c.threshold += f"; left out: {formed['left_out']} run(s) of the same span"
        evidence = {**b.evidence(value), **formed, **({"seasonality": rhythm[1]} if rhythm else {})}
        if ctx.holiday is not None and b.model == "log":
            evidence["holiday"] = ctx.holiday
        if ctx.batch_at is not None and (weekday is not None or rhythm):
            evidence["day"] = f"{ctx.batch_at:%Y-%m-%d}, a {WEEKDAYS[weekday_of(ctx.batch_at)]}: the batch's own"
            c.threshold += f"; judged by the batch's day, {evidence['day'].split(':')[0]}"
        ok = value is not None and b.contains(value)
        if self.metric == "null_fraction" and value is not None:
            explained = self._explained(c, float(value), ctx)
            if explained is not None:
                c.threshold += f"; {explained.describe()}"
                evidence.update(explained.evidence())
                ok = ok and explained.ok
        if self.metric == "mean" and ok and value is not None:
            shifted = self._shifted(c, float(value), b, ctx)
            if shifted is not None:
                c.threshold += f"; {shifted.describe()}"
                evidence.update(shifted.evidence())
                ok = False
        if not ok and len(history) < COLD_START_RUNS:  # too few runs to block on: warns (and says so)
            c.threshold += f"; {len(history)} runs of history: too few to block on, warns"
            return Verdict(False, evidence, 0, warn_only=True)
        return Verdict(ok, evidence, 0)

    def _shifted(self, c: Compiled, value: float, b: Judged, ctx: AuditContext) -> Shifted | None:
        """A mean inside its band that moved with the column's bounds (anomaly.mean_shifted): the batch's bounds
        from its files' Iceberg metrics, theirs over the year from the metric history."""
        fm = ctx.file_metrics() if ctx.file_metrics is not None else None
        reader = ctx.metric_history
        if fm is None or reader is None:
            return None
        column = self._column_key(c)
        bounds = {"min": as_number(fm.lower.get(column)), "max": as_number(fm.upper.get(column))}
        return mean_shifted(value, b, bounds, lambda bound: reader(bound, column, TAIL_MEMORY, None), self.sensitivity)

    def _explained(self, c: Compiled, value: float, ctx: AuditContext) -> Explained | None:
        """The batch's null fraction against what its companion column's nulls predict (anomaly.nulls_explained):
        the batch's null counts from its files' Iceberg metrics, the columns' history from the metric history."""
        fm = ctx.file_metrics() if ctx.file_metrics is not None else None
        reader = ctx.metric_history
        if fm is None or not fm.rows or reader is None:
            return None
        batch = {col: n / fm.rows for col, n in fm.null_counts.items() if n is not None}
        column = self._column_key(c)
        if column not in batch:
            return None
        return nulls_explained(
            column, value, batch, lambda col: reader("null_fraction", col, TAIL_MEMORY, None), self.sensitivity
        )


class SchemaChangeCheck(CheckType):
    """The batch's columns and types against those of the table's last published run (the metric history)."""

    check: Literal["schema_change"]
    allow: list[Literal["added", "dropped", "retyped"]] = Field(
        default_factory=list, description="kinds of change that pass: added, dropped, retyped"
    )

    description: ClassVar[str] = (
        "Fails when a column is new, dropped or retyped compared with the table's last published run."
    )
    example: ClassVar[str] = '[[tables."nyc.trips".checks]]\ncheck = "schema_change"\nseverity = "warn"\n'
    computed: ClassVar[tuple[Evidence, ...]] = ("metadata",)

    @model_validator(mode="after")
    def _no_filter(self) -> SchemaChangeCheck:
        if self.filter:
            raise ValueError("schema_change judges the batch's columns: it takes no filter")
        return self

    def default_name(self) -> str:
        return f"schema_change(allow {', '.join(self.allow)})" if self.allow else "schema_change"

    def compile(self, mapping: dict[str, str]) -> Rule:
        return Rule(None, None, "the columns and types of the last published run")

    def measure(self, added: DataFrame, c: Compiled, ctx: AuditContext) -> tuple[dict[str, Any], Evidence]:
        return {f"{c.key}_v": schema_of(added)}, "metadata"  # the DataFrame's schema: analysis, no job

    def verdict(self, c: Compiled, values: dict[str, Any], rows: int, ctx: AuditContext) -> Verdict:
        now: dict[str, str] = values.get(f"{c.key}_v") or {}
        last = ctx.last_schema() if ctx.last_schema else None
        if last is None:
            c.threshold = "no published run to compare with: passes"
            return Verdict(True, "no published run yet", 0)
        changes = schema_diff(last, now)
        bad = [text for kind, text in changes if kind not in self.allow]
        c.threshold = "the columns and types of the last published run" + (
            f" (allowed: {', '.join(self.allow)})" if self.allow else ""
        )
        return Verdict(not bad, "; ".join(t for _, t in changes) or "no change", 0)


def schema_of(df: DataFrame) -> dict[str, str]:
    """A batch's columns (lower-cased) and their Spark SQL types, as the metric history records them."""
    return {f.name.lower(): f.dataType.simpleString() for f in df.schema.fields}


def schema_diff(last: dict[str, str], now: dict[str, str]) -> list[tuple[str, str]]:
    """(kind, description) of each column new, dropped or retyped in `now` compared with `last`."""
    out = [("added", f"new column {c} ({t})") for c, t in now.items() if c not in last]
    out += [("dropped", f"dropped column {c} ({t})") for c, t in last.items() if c not in now]
    out += [("retyped", f"column {c} {last[c]} -> {t}") for c, t in now.items() if c in last and last[c] != t]
    return out


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
        return read_only(sqlguard.check_query_text, v, "custom_sql")

    def default_name(self) -> str:
        return "custom_sql"

    def sql_texts(self) -> list[tuple[str, str, bool]]:
        return [*super().sql_texts(), ("custom_sql", self.sql, True)]

    def validate_on(self, on: Against) -> None:
        spark = on.df.sparkSession
        with session_change():  # the view `batch` is the session's
            on.df.limit(0).createOrReplaceTempView("batch")
            try:
                _ = spark.sql(self.sql).schema  # analysis only: the guard let only a pure read through
            except Exception as e:  # noqa: BLE001 - AnalysisException / ParseException: the user's query is wrong
                raise ConfigError(
                    f"{on.where}: its query is not valid: {first_line(e)}",
                    hint="the new rows are the view `batch`, e.g. SELECT * FROM batch WHERE amount < 0",
                ) from None

    def compile(self, mapping: dict[str, str]) -> Rule:
        return Rule(None, None, "no rows returned")

    def _rows(self, added: DataFrame, c: Compiled) -> DataFrame:
        spark = added.sparkSession
        # spark.sql runs commands at once: only SQL both guard layers accept gets there, checked again right here
        # (a resumed run audits without validate_checks).
        self.guard_sql(spark, self.where(None))
        with session_change():  # the view `batch` is the session's; the analysed plan keeps these rows
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


# The change a run makes to its table (wapflow.writing.modes.Changes computes it from the run's commits).
CHANGE_METRICS: tuple[str, ...] = ("rows_inserted", "rows_updated", "rows_deleted", "rows_replaced")


class MaxChangeCheck(CheckType):
    """A bound on what a run changes on main: rows inserted, updated, deleted or replaced (write modes)."""

    check: Literal["max_change"]
    metric: str = Field(
        description="one of rows_inserted, rows_updated, rows_deleted, rows_replaced, or a sum of them joined by "
        "'+' (rows_deleted+rows_updated)",
    )
    max_rows: int | None = Field(default=None, ge=0, description="the most rows the metric may reach")
    max_fraction: float | None = Field(
        default=None,
        ge=0,
        description="the largest fraction of main's rows before the run (0.05: 5%) the metric may reach; "
        "an empty main passes",
    )

    description: ClassVar[str] = (
        "Fails when the run's change to main (rows inserted, updated, deleted or replaced, from its commit) "
        "is above max_rows or above max_fraction of main's rows."
    )
    example: ClassVar[str] = (
        '[[tables."crm.customers".checks]]\ncheck = "max_change"\nmetric = "rows_deleted+rows_updated"\n'
        "max_fraction = 0.05\n"
    )
    computed: ClassVar[tuple[Evidence, ...]] = ("metadata",)

    @field_validator("metric")
    @classmethod
    def _metric(cls, v: str) -> str:
        parts = [p.strip() for p in v.split("+")]
        for p in parts:
            if p not in CHANGE_METRICS:
                raise ValueError(
                    f"unknown change metric '{p}'{did_you_mean(p, CHANGE_METRICS)}; known: {', '.join(CHANGE_METRICS)}"
                )
        return "+".join(parts)

    @model_validator(mode="after")
    def _bounds(self) -> MaxChangeCheck:
        if self.max_rows is None and self.max_fraction is None:
            raise ValueError("max_change needs max_rows and/or max_fraction")
        if self.filter:
            raise ValueError("max_change judges the whole change: it takes no filter")
        return self

    def default_name(self) -> str:
        bounds = [f"{self.max_rows} rows"] if self.max_rows is not None else []
        bounds += [f"{self.max_fraction:.2%} of main"] if self.max_fraction is not None else []
        return f"max_change({self.metric} <= {' and '.join(bounds)})"

    def compile(self, mapping: dict[str, str]) -> Rule:
        return Rule(None, None, self.default_name().split("<= ", 1)[1].rstrip(")"))

    def measure(self, added: DataFrame, c: Compiled, ctx: AuditContext) -> tuple[dict[str, Any], Evidence]:
        return {}, "metadata"  # the change comes with the audit's context, from the run's commit summaries

    def verdict(self, c: Compiled, values: dict[str, Any], rows: int, ctx: AuditContext) -> Verdict:
        changes = ctx.changes or {"rows_inserted": rows}
        value = sum(int(changes.get(m) or 0) for m in self.metric.split("+"))
        main = int(changes.get("main_rows") or 0)
        ok = self.max_rows is None or value <= self.max_rows
        if self.max_fraction is not None and main > 0:
            ok = ok and value / main <= self.max_fraction + 1e-12
        share = f" ({value / main:.2%} of main's {main} rows)" if main else " (main was empty)"
        return Verdict(ok, f"{self.metric} = {value}{share}", value if not ok else 0)
