"""What every check type is: parameters shared by all (pydantic), and what the audit engine asks of each.

A check type is one class (row_checks, batch_checks) that owns its wap.toml parameters (the same keys and
validation in wap.toml and Python), how it is computed, its one-line description and wap.toml example, and
the code the engine (audit.checks) runs for it: validation against the batch before any write, its per-row
failure condition, the aggregates it needs, exact answers from file metadata, its own scan or join, its
verdict, and how to show the failing rows. audit.spec holds the registry of built-in types.

How a check is computed, cheapest first (`CheckType.computed`):
- metadata: Iceberg metadata of the files the run added (record, null counts, bounds), or the table's
  history, without reading rows;
- write: a plain aggregate observed while the branch is written (a Spark Observation), at no extra scan,
  or one aggregation over the new rows when nothing was observed (a resumed run);
- scan: its own query over the new rows;
- join: a join of the new rows with a table's main.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar, Literal, NamedTuple, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from wapflow import vocabulary
from wapflow.audit import sqlguard
from wapflow.errors import ConfigError

# wapflow.sql.identifiers is imported where it is used: wap.toml holds these models, and reading it (or the
# run store) must not load the lakehouse (tests/test_layers.py).
if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import DataType

    from wapflow.audit.metrics import FileMetrics
    from wapflow.sql.identifiers import TableName


Scalar = bool | int | float | str
Evidence = Literal["metadata", "write", "scan", "join"]


def read_only(check: Callable[[str, str], None], text: str, what: str) -> str:
    """Layer 1 of the SQL guard, at declaration: a validation error, so wap.toml errors name the key.

    PydanticCustomError is pydantic's ValueError with a message of our own: no "Value error, " prefix.
    """
    try:
        check(text, what)
    except sqlguard.UnsafeSql as e:
        raise PydanticCustomError("unsafe_sql", "{reason}", {"reason": e.one_line()}) from None
    return text


def parse_duration(text: str) -> timedelta:
    """'30m', '24h', '7d' as a timedelta (freshness's max_age): wapflow.vocabulary's one duration grammar."""
    return timedelta(seconds=vocabulary.parse_duration(text))


def first_line(e: BaseException) -> str:
    from wapflow.spark.errors import describe

    return describe(e)


def range_name(lo: object, hi: object) -> str:
    """'0, 10', 'min=0' or 'max=10': bounds in a check's name, leaving out the one not set."""
    if lo is not None and hi is not None:
        return f"{lo}, {hi}"
    return f"min={lo}" if lo is not None else f"max={hi}"


def count_if(cond: Column) -> Column:
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
    # A failure that only warns whatever the check's severity (an anomaly check short of history, set to warn).
    warn_only: bool = False


# --- what the engine (audit.checks) hands every check type ---------------------------------------------


@dataclass
class Compiled:
    """One check as Spark expressions plus the SQL a person can run to see its failing rows."""

    index: int
    check: CheckType
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
        return self.check.row_level

    @property
    def blocks_rows(self) -> bool:
        """Rows failing it are quarantinable: row-level, error severity, no tolerance."""
        return self.check.blocks_rows

    def col(self, name: str) -> Column:
        from pyspark.sql import functions as F

        from wapflow.sql.identifiers import quote

        return F.col(quote(self.mapping[name]))


@dataclass(frozen=True)
class Delivery:
    """The files a run read, as its producer delivered them, and how to read files beside them (its manifest)."""

    files: list[tuple[str, int | None]]  # (uri, bytes) of each file the run read
    read: Callable[[str], bytes | None]  # a small file's content, None when nothing is there
    digest: Callable[[str, str], str]  # (uri, "sha256" | "md5") -> the file's hex digest
    quarantined: int = 0  # rows of the batch a quarantine held back from the table (delivered all the same)
    # uri -> what its producer attached to the file (S3 user metadata, local user.* attributes); None: no file.
    metadata: Callable[[str], dict[str, str] | None] | None = None
    tail: Callable[[str], bytes] | None = None  # uri -> its last bytes (a trailer line)


@dataclass
class AuditContext:
    """What evaluation may look at beyond the new rows."""

    main_table: Callable[[TableName], DataFrame] | None = None  # main of a table (joins)
    this_table: TableName | None = None
    # (commit time, rows added) of the table's earlier published runs on main, newest first (volume checks).
    history: Callable[[], list[tuple[datetime, int]]] | None = None
    branch_sql: str | None = None  # `cat`.`ns`.`t` VERSION AS OF 'branch', for reproduction queries
    file_metrics: Callable[[], FileMetrics | None] | None = None
    # What the run changes (write.modes.Changes as a dict: rows_inserted, ..., main_rows), for max_change.
    changes: dict[str, int] | None = None
    # The metric history of the table's published runs, newest first: (metric, column, how many, weekday) ->
    # values (column "" for table metrics; weekday 0..6: only runs that started on it, None: every run), and the
    # columns and types of the last published run (anomaly checks).
    metric_history: Callable[[str, str, int, int | None], list[float]] | None = None
    last_schema: Callable[[], dict[str, str] | None] | None = None
    # A text metric's values over the table's last published runs, newest first: (metric, column, how many) ->
    # texts (a category column's set of values as JSON, anomaly metric "values").
    metric_texts: Callable[[str, str, int], list[str]] | None = None
    run_at: datetime | None = None  # when this run started
    # The batch's own day (the median day of its table's time_column; None: the table names none): the weekday
    # anomaly checks' seasonality judges the batch by, so a backfill or a late delivery is judged by its day.
    batch_at: datetime | None = None
    # The holiday of the table's calendar (its `holidays`) the batch's day is on or next to, in words (None: none,
    # or no calendar): counts and sums are judged with a wider least change that day (anomaly.HOLIDAY_CHANGE).
    holiday: str | None = None
    # The run's table on its branch after a write that changed existing rows (a merge): `unique` looks up there
    # the keys the batch touched, since a new row can collide with a row already in the table.
    table_after: Callable[[], DataFrame] | None = None
    # The new rows of another table of the same multi-table run, by name (None: a run of one table). Checks across
    # the group (reconcile) read a sibling's staged batch here; main_table reads a sibling's staged table.
    batch_of: Callable[[TableName], DataFrame] | None = None
    # The run's files and their producer's manifests (control_totals); None: the batch is a DataFrame.
    delivery: Delivery | None = None

    def day(self) -> datetime:
        """The time an anomaly check's seasonality judges the batch by: its own day where its table names a time
        column, else when the run started (now, outside a run)."""
        return self.batch_at or self.run_at or datetime.now(UTC)


@dataclass(frozen=True)
class Against:
    """What validating a declaration before any write sees: the batch, the type of the check's first column,
    how errors name the check, the catalog (for checks that reference other tables) and the check's own table
    (dotted; None where the caller does not say)."""

    df: DataFrame
    col_type: DataType | None
    where: str
    table_exists: Callable[[TableName], bool] | None = None
    table_columns: Callable[[TableName], list[str]] | None = None
    table: str | None = None


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
        return None if v is None else read_only(sqlguard.check_expression_text, v, "filter")

    @classmethod
    def type_name(cls) -> str:
        """The `check` key's value that selects this type."""
        return str(get_args(cls.model_fields["check"].annotation)[0])

    @property
    def observable(self) -> bool:
        """Its metric is a plain aggregate over rows: observed during the write, or one shared scan."""
        return "write" in self.computed

    @property
    def counted_by_iceberg(self) -> bool:
        """Iceberg's counts of the files a write adds (records; nulls, kept for every column by default) answer
        it exactly (`from_metadata`), so an append need not observe it: each observed aggregate costs the write
        ~5-10% of its CPU at 10M rows (benchmarks/bench_anomaly.py)."""
        return False

    def bounds_settle_a_pass(self, col_type: str | None) -> bool:
        """When every row passes, the added files' bounds say so exactly (`from_metadata`), and when they cannot,
        some row fails it (or the files' metrics are missing). So an append need not observe it where it blocks:
        the audit reads the bounds, and scans only for a batch that fails it or lacks them (which a failing
        blocking check scans for anyway, to count each check's rows). `col_type`: Spark's name of its column's
        type in the batch (`bigint`, `double`, `decimal(10,2)`), None if unknown."""
        return False

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

    def validate_on(self, on: Against) -> None:
        """What only this type can find wrong against the batch, as a ConfigError naming the check."""

    # --- compilation and evaluation -------------------------------------------------------------

    def compile(self, mapping: dict[str, str]) -> Rule:
        """Its failure condition against the batch's spelling of the columns (mapping: declared -> actual)."""
        raise NotImplementedError  # pragma: no cover - every check overrides it

    def aggregates(self, c: Compiled) -> list[Column]:
        """The plain aggregates its verdict needs (keys c<i>_f, c<i>_n, c<i>_max), for observable types."""
        if c.fail is None:
            return []
        return [count_if(c.applies & c.fail).alias(f"{c.key}_f"), count_if(c.applies).alias(f"{c.key}_n")]

    def write_aggregates(self, c: Compiled, *, counted: bool, bounds: Mapping[str, str] | None = None) -> list[Column]:
        """What an append observes of it. `counted`: the added files' Iceberg counts will be read, so what they
        answer (`from_metadata`) is left to them; `bounds` (the batch's column types): so will bounds Iceberg
        computes as Spark writes the files (NaN counts included, which a landed file's footer lacks), and a
        blocking check they settle when it passes is left to them too."""
        if counted and self.counted_by_iceberg:
            return []
        if counted and bounds is not None and self.blocks_rows:
            cols = self.columns()
            if self.bounds_settle_a_pass(bounds.get(c.mapping.get(cols[0], cols[0])) if cols else None):
                return []
        return self.aggregates(c)

    def from_metadata(self, c: Compiled, fm: FileMetrics) -> dict[str, Any] | None:
        """Exact values from file metrics, or None when metadata cannot answer this check exactly."""
        return None

    def answered(self, c: Compiled, values: Mapping[str, Any]) -> bool:
        """The gathered values hold what its verdict needs (default: any of the keys its aggregates produce)."""
        return any(f"{c.key}_{k}" in values for k in ("n", "f", "max", "v"))

    def measure(self, added: DataFrame, c: Compiled, ctx: AuditContext) -> tuple[dict[str, Any], Evidence]:
        """Values of a type that is not a plain aggregate, and where they came from."""
        raise NotImplementedError  # pragma: no cover - every type that is not observable overrides it

    def verdict(self, c: Compiled, values: dict[str, Any], rows: int, ctx: AuditContext) -> Verdict:
        """Default: a count of offending rows (c<i>_f), which must be 0."""
        failing = int(values.get(f"{c.key}_f") or 0)
        return Verdict(failing == 0, failing, failing)

    def measured(self, c: Compiled, values: dict[str, Any], rows: int) -> dict[tuple[str, str], float | str]:
        """Batch metrics it computed that the run store's metric history keeps: (metric, column) -> value."""
        return {}

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


class RowCheck(CheckType):
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


class RowColumnCheck(RowCheck):
    """A row-level check on one column."""

    column: str = Field(description="the column")

    def columns(self) -> list[str]:
        return [self.column]

    def _col(self, mapping: dict[str, str]) -> tuple[Column, str]:
        """The column as a Spark column and as quoted SQL."""
        from pyspark.sql import functions as F

        from wapflow.sql.identifiers import quote

        return F.col(quote(mapping[self.column])), quote(mapping[self.column])


class ColumnCheck(CheckType):
    """A batch-level check on one column."""

    column: str = Field(description="the column")

    def columns(self) -> list[str]:
        return [self.column]


def null_counts(chk: CheckType, c: Compiled, fm: FileMetrics) -> dict[str, Any] | None:
    """NULLs of the check's column from file metrics (exact when every file records them)."""
    if chk.filter:
        return None
    nulls = fm.null_counts.get(c.mapping[chk.columns()[0]].lower())
    if nulls is None:
        return None
    return {f"{c.key}_f": nulls, f"{c.key}_n": fm.rows}
