"""The reconcile check: a table's new rows, or a column's sum, against another table's of the same multi-table run."""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from wapflow import display
from wapflow.audit.checktype import (
    Against,
    CheckType,
    Evidence,
    Rule,
    Verdict,
)
from wapflow.errors import ConfigError, InvalidIdentifier, did_you_mean

# wapflow.sql.identifiers is imported where it is used: wap.toml holds these models, and reading it (or the
# run store) must not load the lakehouse (tests/test_layers.py).
if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from wapflow.audit.checktype import AuditContext, Compiled


# Two float or double sums of the same amounts, added in another order, differ in their last digits: within this
# fraction of the larger of them, reconcile takes them as equal (on top of its tolerances).
FLOAT_SLACK = 1e-9


class Tolerant(CheckType):
    """A check comparing the batch's figures with figures it is given (another table's, a producer's): equal, or
    within the larger of a relative and an absolute tolerance (reconciles)."""

    tolerance: float = Field(
        default=0.0,
        ge=0,
        allow_inf_nan=False,
        description="the difference allowed, as a fraction of the figure compared with (0.01: 1%)",
    )
    abs_tolerance: float = Field(
        default=0.0,
        ge=0,
        allow_inf_nan=False,
        description="the difference allowed, in the figure's units (rows, or the column's); the larger of the two "
        "tolerances applies",
    )

    def within(self, other: str) -> Rule:
        """The threshold the report shows: '= <other>' or 'within 1% of <other>'."""
        allowed = [f"{format(self.tolerance * 100, '.4g')}%"] if self.tolerance else []
        allowed += [format(self.abs_tolerance, ".12g")] if self.abs_tolerance else []
        if not allowed:
            return Rule(None, None, f"= {other}")
        within = allowed[0] if len(allowed) == 1 else f"the larger of {' and '.join(allowed)}"
        return Rule(None, None, f"within {within} of {other}")

    def agrees(self, mine: Any, theirs: Any) -> tuple[bool, Any]:
        """reconciles() under this check's tolerances."""
        return reconciles(mine, theirs, self.tolerance, self.abs_tolerance)


class ReconcileCheck(Tolerant):
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
        return self.within(f"{self._figure(self.other_column)} of {self.against}")

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
        ok, diff = self.agrees(mine, theirs)
        this = ctx.this_table.dotted if ctx.this_table else "this table"
        share = f" ({display.percent(float(diff) / abs(float(theirs)))})" if theirs else ""  # of the other's figure
        observed = (
            f"{this} {self._figure(self.column)} = {shown(mine)}; {self.against} {self._figure(self.other_column)} "
            f"= {shown(theirs)}; difference {_difference(diff)}{share}"
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


def shown(v: Any) -> str:
    """A figure as reports print it: counts and decimals as they are, floats to 12 significant digits (a float
    sum is compared to FLOAT_SLACK of itself, so its digits matter)."""
    return format(v, ".12g") if isinstance(v, float) else str(v)


def _difference(v: Any) -> str:
    """|mine - theirs| as reports print it: a count or decimal exactly, a float's as wapflow.display words it
    (a float sum's rounding noise, 4.4e-10, is `< 0.000001`, not an exponent)."""
    return display.number(v) if isinstance(v, float) else str(v)
