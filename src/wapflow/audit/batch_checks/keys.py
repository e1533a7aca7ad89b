"""Batch checks on a key: unique within the batch (or the table after a merge), not already on main, and
foreign keys into another table's main."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field

from wapflow.audit.checktype import (
    Against,
    CheckType,
    ColumnCheck,
    Evidence,
    Rule,
)
from wapflow.errors import ConfigError, did_you_mean
from wapflow.sql.layout import INTEGER_TYPES

# wapflow.sql.identifiers is imported where it is used: wap.toml holds these models, and reading it (or the
# run store) must not load the lakehouse (tests/test_layers.py).
if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from wapflow.audit.checktype import AuditContext, Compiled
    from wapflow.sql.identifiers import TableName


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
