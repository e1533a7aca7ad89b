"""Check declarations: what a table's audit demands, as validated models (from wap.toml or Python).

Parameters are checked here (pydantic), columns and SQL against the batch before any write
(audit.checks), so a wrong declaration never costs a write.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from typing import Annotated, ClassVar, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from wapflow.audit import sqlguard

Scalar = bool | int | float | str

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


class _CheckBase(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str | None = None
    severity: Literal["error", "warn"] = "error"
    # A SQL condition: the check applies only to rows where it is true.
    filter: str | None = Field(default=None, min_length=1)

    row_level: ClassVar[bool] = False  # failing rows are individual rows (quarantine and samples apply)

    @field_validator("filter")
    @classmethod
    def _filter_is_pure(cls, v: str | None) -> str | None:
        return None if v is None else _read_only(sqlguard.check_expression_text, v, "filter")

    def columns(self) -> list[str]:
        """Columns of the batch the check reads, validated before any write."""
        return []

    def display_name(self) -> str:
        base = self.name or self.default_name()
        return base if self.name or not self.filter else f"{base} where {self.filter}"

    def default_name(self) -> str:  # pragma: no cover - every check overrides it
        raise NotImplementedError


class _RowCheck(_CheckBase):
    """A per-row condition; `mostly` lets a fraction of rows fail (0.99: up to 1% may fail)."""

    mostly: float | None = Field(default=None, gt=0, le=1)
    row_level: ClassVar[bool] = True


class _RowColumnCheck(_RowCheck):
    """A row-level check on one column."""

    column: str

    def columns(self) -> list[str]:
        return [self.column]


class _ColumnCheck(_CheckBase):
    """A batch-level check on one column."""

    column: str

    def columns(self) -> list[str]:
        return [self.column]


class NotNullCheck(_RowColumnCheck):
    check: Literal["not_null"]

    def default_name(self) -> str:
        return f"not_null({self.column})"


class BetweenCheck(_RowColumnCheck):
    check: Literal["between"]
    min: Scalar | None = None
    max: Scalar | None = None
    min_inclusive: bool = True
    max_inclusive: bool = True

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
        if self.min_inclusive and self.max_inclusive:
            return f"between({self.column}, {self.min}, {self.max})"
        lo = "[" if self.min_inclusive else "("
        hi = "]" if self.max_inclusive else ")"
        return f"between({self.column}, {lo}{self.min}, {self.max}{hi})"


class AcceptedValuesCheck(_RowColumnCheck):
    check: Literal["accepted_values"]
    values: list[Scalar] = Field(min_length=1)

    def default_name(self) -> str:
        return f"accepted_values({self.column})"


class RegexCheck(_RowColumnCheck):
    check: Literal["regex"]
    pattern: str = Field(min_length=1)

    # Java regex syntax (\p{L}, possessive quantifiers...): Spark validates it before any write.
    def default_name(self) -> str:
        return f"regex({self.column}, {self.pattern})"


class MaxLengthCheck(_RowColumnCheck):
    check: Literal["max_length"]
    max: int = Field(ge=0)

    def default_name(self) -> str:
        return f"max_length({self.column}, {self.max})"


class ExpressionCheck(_RowCheck):
    check: Literal["expression"]
    sql: str = Field(min_length=1)

    @field_validator("sql")
    @classmethod
    def _sql_is_pure(cls, v: str) -> str:
        return _read_only(sqlguard.check_expression_text, v, "expression")

    def default_name(self) -> str:
        return f"expression({self.sql})"


class NullRateCheck(_ColumnCheck):
    check: Literal["null_rate"]
    max: float = Field(ge=0, le=1)

    def default_name(self) -> str:
        return f"null_rate({self.column}) <= {self.max}"


class RowCountCheck(_CheckBase):
    check: Literal["row_count"]
    min: int | None = Field(default=None, ge=0)
    max: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _bounds(self) -> RowCountCheck:
        if self.min is None and self.max is None:
            raise ValueError("row_count needs at least one of 'min' or 'max'")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"row_count: min ({self.min}) is greater than max ({self.max})")
        return self

    def default_name(self) -> str:
        return f"row_count({self.min}, {self.max})"


class _KeyCheck(_CheckBase):
    """A check on a key of one or more columns (`columns` in wap.toml)."""

    check: Literal["unique", "unique_in_table"]
    columns_: list[str] = Field(alias="columns", min_length=1)

    def columns(self) -> list[str]:
        return list(self.columns_)

    def default_name(self) -> str:
        return f"{self.check}({', '.join(self.columns_)})"


class UniqueCheck(_KeyCheck):
    check: Literal["unique"]


class UniqueInTableCheck(_KeyCheck):
    """The batch's keys must not already be on main (re-delivered files, overlapping extracts)."""

    check: Literal["unique_in_table"]


class ForeignKeyCheck(_ColumnCheck):
    check: Literal["foreign_key"]
    table: str = Field(description="the referenced table, namespace.name")
    references: str | None = Field(default=None, description="its column (default: the same name)")

    @property
    def ref_column(self) -> str:
        return self.references or self.column

    def default_name(self) -> str:
        return f"foreign_key({self.column} -> {self.table}.{self.ref_column})"


class FreshnessCheck(_ColumnCheck):
    check: Literal["freshness"]
    max_age: str

    @field_validator("max_age")
    @classmethod
    def _duration(cls, v: str) -> str:
        parse_duration(v)
        return v

    def default_name(self) -> str:
        return f"freshness({self.column}, {self.max_age})"


class VolumeCheck(_CheckBase):
    """Row count within a band around the median of the table's last published runs."""

    check: Literal["volume"]
    runs: int = Field(default=10, ge=1, le=1000)
    tolerance: float = Field(default=0.5, gt=0)
    min_history: int = Field(default=3, ge=1)

    def default_name(self) -> str:
        return f"volume(±{self.tolerance:.0%} of median of last {self.runs} runs)"


class CustomSqlCheck(_CheckBase):
    """A query over the batch (a view named `batch`) that must return no rows."""

    check: Literal["custom_sql"]
    sql: str = Field(min_length=1)

    @field_validator("sql")
    @classmethod
    def _sql_is_read_only(cls, v: str) -> str:
        return _read_only(sqlguard.check_query_text, v, "custom_sql")

    def default_name(self) -> str:
        return "custom_sql"


Check = Annotated[
    NotNullCheck
    | BetweenCheck
    | AcceptedValuesCheck
    | RegexCheck
    | MaxLengthCheck
    | ExpressionCheck
    | NullRateCheck
    | RowCountCheck
    | UniqueCheck
    | UniqueInTableCheck
    | ForeignKeyCheck
    | FreshnessCheck
    | VolumeCheck
    | CustomSqlCheck,
    Field(discriminator="check"),
]

# check type (the `check` key's one Literal value) -> its model
CHECK_MODELS: dict[str, type[_CheckBase]] = {
    get_args(m.model_fields["check"].annotation)[0]: m
    for m in (
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
}
CHECK_TYPES = list(CHECK_MODELS)
