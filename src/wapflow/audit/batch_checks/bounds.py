"""Batch checks bounded by one figure of the batch: its null rate, its row count, its newest value, and the
change the run makes to main."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from wapflow.audit.checktype import (
    Against,
    CheckType,
    ColumnCheck,
    Evidence,
    Rule,
    Verdict,
    count_if,
    null_counts,
    parse_duration,
    range_name,
)
from wapflow.errors import ConfigError, did_you_mean

# wapflow.sql.identifiers is imported where it is used: wap.toml holds these models, and reading it (or the
# run store) must not load the lakehouse (tests/test_layers.py).
if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from wapflow.audit.checktype import AuditContext, Compiled
    from wapflow.audit.metrics import FileMetrics


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
