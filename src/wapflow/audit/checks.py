"""The audit engine: a table's checks compiled to Spark, evaluated with the least reading possible.

Each check type (audit.spec) says what it needs; this module plans and gathers the evidence, cheapest first:
1. Iceberg metadata of the files the run added (record counts, null counts, bounds): exact answers
   for row_count, not_null, null_rate and passing `between`, without reading data.
2. Metrics observed while the branch was written (a Spark Observation on the write): every
   row-level check and plain aggregate, at no extra scan.
3. One aggregation over the new rows for whatever is still unknown (a resumed run), plus each
   remaining type's own query (a group-by per `unique`, a join per `unique_in_table` / `foreign_key`,
   one query per `custom_sql`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from datetime import date, datetime
from typing import TYPE_CHECKING, Any

from wapflow.audit import sqlguard
from wapflow.audit.checktype import Against, AuditContext, Compiled, Evidence, count_if

# FileMetrics belongs to the audit (what Iceberg metadata says of the files); re-exported for callers that
# import it from here.
from wapflow.audit.metrics import FileMetrics as FileMetrics
from wapflow.audit.report import AuditReport, CheckResult, Status
from wapflow.audit.spec import Check
from wapflow.errors import ConfigError, did_you_mean
from wapflow.sql.identifiers import TableName, quote

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

SAMPLE_ROWS = 20
SAMPLE_ID_COLUMNS = 3  # a table without a key: its first columns go with a failing row's sample
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


def boolean_condition(
    df: DataFrame, text: str, named: str, *, example: str, valid_here: str = "valid over the batch"
) -> None:
    """A user's SQL condition (a check's filter, a merge's delete_when, replace_where) must resolve against the
    batch's columns and be a boolean: one ConfigError naming it (`named`, e.g. "[tables.x]: delete_when")."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BooleanType

    try:
        dtype = df.select(F.expr(text).alias("_c")).schema["_c"].dataType
    except Exception as e:  # noqa: BLE001 - AnalysisException / ParseException: the condition is wrong
        raise ConfigError(
            f"{named} is not {valid_here}: {sqlguard.printable(_first_line(e))}",
            hint=f"write a SQL condition over the columns: {', '.join(df.columns)}",
        ) from None
    if not isinstance(dtype, BooleanType):
        raise ConfigError(
            f"{named} is a {dtype.simpleString()}, not a boolean",
            hint=f"write a condition that is true for the rows it is about, {example}",
        )


def validate_checks(
    checks: list[Check],
    df: DataFrame,
    *,
    table: str,
    table_exists: Callable[[TableName], bool] | None = None,
    table_columns: Callable[[TableName], list[str]] | None = None,
) -> None:
    """Everything that can be wrong with a declaration, found against the batch schema, before writing."""

    # First, before anything parses, analyses or runs it: user SQL must be a pure read (audit.sqlguard).
    for chk in checks:
        chk.guard_sql(df.sparkSession, chk.where(table))
    resolve_columns(checks, df.columns, table=table)
    types = {f.name.lower(): f.dataType for f in df.schema.fields}
    for chk in checks:
        name = chk.display_name()
        where = f"check '{name}' on {table}"
        for what, text in chk.boolean_sql():
            boolean_condition(
                df, text, f"{where}: its {what}", example="e.g. dropoff_at >= pickup_at", valid_here="valid here"
            )
        col_type = types.get(chk.columns()[0].lower()) if chk.columns() else None
        chk.validate_on(Against(df, col_type, where, table_exists, table_columns, table=table))


# --- compilation ------------------------------------------------------------------------------


def compile_check(chk: Check, i: int, mapping: dict[str, str]) -> Compiled:
    from pyspark.sql import functions as F

    # Defence in depth: the expressions compiled here run inside the write and the audit.
    for what, text, is_query in chk.sql_texts():
        if not is_query:
            try:
                sqlguard.check_expression_text(text, what)
            except sqlguard.UnsafeSql as e:
                raise ConfigError(f"{chk.where(None)}: {e.problem}", hint=e.hint) from None
    applies = F.expr(chk.filter) if chk.filter else F.lit(True)
    rule = chk.compile(mapping)
    return Compiled(i, chk, applies, rule.fail, rule.fail_sql, rule.threshold, mapping)


# Iceberg keeps value and null counts of a table's first 100 columns unless told otherwise
# (write.metadata.metrics.max-inferred-column-defaults).
ICEBERG_COUNTED_COLUMNS = 100


# An observed count of the rows failing any of several blocking row checks: "_clear_c1_c3" for checks c1 and c3.
CLEAR_PREFIX = "_clear_"


def plain_aggregates(
    compiled: list[Compiled], *, counted: bool = False, bounds: Mapping[str, str] | None = None
) -> list[Column]:
    """Every metric that is a plain aggregate over rows: observable during the write, or one scan. `counted`:
    an append whose files the audit reads, so not those the added files' Iceberg counts will answer, and the
    blocking row checks (an error, no tolerance: a verdict that needs only "no row fails") in one count of
    the rows failing any of them, named after them (CLEAR_PREFIX). Each observed aggregate costs the write's
    every row: five checks' ten counts made a 10M-row WAP write ~1.2x a plain append, and the one count gives
    each its exact zero in the usual case; when it is not zero, the audit counts them one by one in one scan.
    `bounds` (the batch's column types): files Iceberg measures as Spark writes them, whose bounds (NaN counts
    known) settle a passing blocking `between` on numbers or `accepted_values` of an integer range of an integer
    column, so those are not observed either (the three blocking checks of benchmarks/bench_wap.py cost a
    10M-row write 16% of a plain append's CPU, the expression left of them 9%)."""
    from pyspark.sql import functions as F

    aggs = [F.count(F.lit(1)).alias("_rows")]
    together: list[tuple[str, Column]] = []  # (check key, its rows' failure condition)
    for c in compiled:
        if not counted:
            aggs.extend(c.check.aggregates(c))
        elif c.blocks_rows and c.fail is not None and c.check.write_aggregates(c, counted=True, bounds=bounds):
            together.append((c.key, c.applies & c.fail))
        else:
            aggs.extend(c.check.write_aggregates(c, counted=True, bounds=bounds))
    if together:
        failing = together[0][1]
        for _, cond in together[1:]:
            failing = failing | cond
        aggs.append(count_if(failing).alias(CLEAR_PREFIX + "_".join(key for key, _ in together)))
    return aggs


def cleared(observed: Mapping[str, Any]) -> dict[str, int]:
    """The failing-row counts an observation proves zero: every check of a CLEAR_PREFIX count that is 0 (or NULL:
    the sum over a batch of no rows)."""
    out: dict[str, int] = {}
    for name, value in observed.items():
        if name.startswith(CLEAR_PREFIX) and not value:
            out.update({f"{key}_f": 0 for key in name[len(CLEAR_PREFIX) :].split("_")})
    return out


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


# Plans compiled in this process (AuditPlan.for_batch), most recently used last.
_PLANS_KEPT = 32
_PLANS: OrderedDict[tuple[Any, ...], tuple[Any, AuditPlan]] = OrderedDict()
_PLANS_LOCK = threading.Lock()


class AuditPlan:
    """The table's checks compiled against one batch schema."""

    def __init__(self, checks: list[Check], columns: list[str], *, table: str, key: list[str] | None = None) -> None:
        self.table = table
        self.checks = checks
        self.columns = columns
        self.mapping = resolve_columns(checks, columns, table=table)
        by_lower = {c.lower(): c for c in columns}
        self.key = [by_lower[k.lower()] for k in (key or []) if k.lower() in by_lower]
        self.compiled = [compile_check(chk, i, self.mapping) for i, chk in enumerate(checks)]
        self._observable: dict[tuple[bool, tuple[tuple[str, str], ...] | None], list[Column]] = {}

    @classmethod
    def for_batch(
        cls, checks: list[Check], columns: list[str], *, table: str, key: list[str] | None = None
    ) -> AuditPlan:
        """The plan of these checks over a batch of these columns, compiled once in this process. Compiling
        builds every check's Spark expressions, a gateway call each (~4 ms for one column reference on a
        classic session): a small run compiled the same plan in its write and its audit, and a watch does so
        for every file. The expressions are unresolved, so one batch's plan serves the next of the same columns."""
        from pyspark import SparkContext

        context = SparkContext._active_spark_context  # a classic session's expressions live in its JVM
        fingerprint = (
            table,
            tuple(columns),
            tuple(key or ()),
            tuple(c.model_dump_json() for c in checks),
            id(context),
        )
        with _PLANS_LOCK:  # DBOS runs steps on threads of its own
            hit = _PLANS.get(fingerprint)
            if hit is not None and hit[0] is context:
                _PLANS.move_to_end(fingerprint)
                return hit[1]
        plan = cls(checks, columns, table=table, key=key)
        with _PLANS_LOCK:
            _PLANS[fingerprint] = (context, plan)
            while len(_PLANS) > _PLANS_KEPT:
                _PLANS.popitem(last=False)
        return plan

    def observable(self, *, counted: bool = False, bounds: Mapping[str, str] | None = None) -> list[Column]:
        """What the write observes. `counted`: the write is an append the audit reads the added files' metadata
        of, so checks Iceberg's counts answer are left to them (a table of more than 100 columns may not keep
        counts of the rest: every check is observed there). Were the counts missing after all (metrics turned
        off by a table property), the audit scans for those checks: slower, never wrong. `bounds`: a Spark write
        whose files Iceberg measures as it writes them, with the batch's column types (plain_aggregates)."""
        counted = counted and len(self.columns) <= ICEBERG_COUNTED_COLUMNS
        types = tuple(sorted(bounds.items())) if counted and bounds is not None else None
        key = (counted, types)
        if key not in self._observable:
            self._observable[key] = plain_aggregates(self.compiled, counted=counted, bounds=bounds if types else None)
        return self._observable[key]

    def counts_only(self, *, bounds: Mapping[str, str] | None) -> bool:
        """An append would observe nothing but its row count: Iceberg's metrics of the files it adds answer every
        check, and its snapshot summary the row count, so the write need not observe at all (an observation is
        a node outside Spark's generated code that every row passes through). `bounds` as for observable."""
        return len(self.observable(counted=True, bounds=bounds)) == 1

    def quarantine_flags(self) -> Column:
        return quarantine_flags(self.compiled)

    @property
    def quarantinable(self) -> bool:
        return any(c.blocks_rows for c in self.compiled)


# --- evaluation -------------------------------------------------------------------------------


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
    source: dict[int, Evidence] = {}
    fm = ctx.file_metrics() if ctx.file_metrics else None
    if fm is not None:
        values["_rows"] = fm.rows
        for c in plan.compiled:
            got = c.check.from_metadata(c, fm) if "metadata" in c.check.computed else None
            if got is not None:
                values.update(got)  # all a verdict needs, or a part the write's observation completes
                if c.check.answered(c, got):
                    source[c.index] = "metadata"
    if observed:
        for k, v in {**observed, **cleared(observed)}.items():
            values.setdefault(k, v)
        for c in plan.compiled:
            if c.index not in source and c.check.answered(c, values):
                source[c.index] = "write"
    needed = [c for c in plan.compiled if c.check.observable and not c.check.answered(c, values)]
    if needed or "_rows" not in values:
        values.update(added.agg(*plain_aggregates(needed)).collect()[0].asDict())  # a global aggregate: one row
        for c in needed:
            source[c.index] = "scan"
    for c in plan.compiled:
        if not c.check.observable:
            got, source[c.index] = c.check.measure(added, c, ctx)
            values.update(got)
    rows = int(values.get("_rows") or 0)
    results = [_result(c, values, rows, ctx) for c in plan.compiled]
    for c, r in zip(plan.compiled, results, strict=True):
        r.source = source.get(c.index, "scan")
    measured = {k: v for c in plan.compiled for k, v in c.check.measured(c, values, rows).items()}
    metrics = [{"metric": m, "column": col, "value": v} for (m, col), v in measured.items()]
    if samples:
        for c, r in zip(plan.compiled, results, strict=True):
            if r.status in ("failed", "warned", "quarantined"):
                r.sql = _reproduce_sql(c, ctx)
                r.samples = _samples(added, c, plan, ctx)
    return AuditReport(rows=rows, checks=results, metrics=metrics)


def _result(c: Compiled, values: dict[str, Any], rows: int, ctx: AuditContext) -> CheckResult:
    chk = c.check
    verdict = chk.verdict(c, values, rows, ctx)
    warns = chk.severity == "warn" or verdict.warn_only
    status: Status = "passed" if verdict.ok else ("warned" if warns else "failed")
    return CheckResult(
        name=chk.display_name(),
        check=chk.type_name(),
        severity=chk.severity,
        status=status,
        observed=verdict.observed,
        failing_rows=verdict.failing_rows,
        threshold=c.threshold,
        columns=chk.columns(),
    )


def _reproduce_sql(c: Compiled, ctx: AuditContext) -> str | None:
    src = ctx.branch_sql
    if src is None:
        return None
    if c.fail_sql:
        return f"SELECT * FROM {src} WHERE {c.fail_sql}"
    return c.check.reproduce_sql(c, src)


def _samples(added: DataFrame, c: Compiled, plan: AuditPlan, ctx: AuditContext) -> list[dict[str, Any]]:
    """Up to 20 offending rows: the check's columns plus what finds the row: the table's key, or without one
    its first columns (SAMPLE_ID_COLUMNS), so a NULL is never shown alone."""
    chk = c.check
    found_by = list(plan.key) or [x for x in added.columns if not x.startswith("_")][:SAMPLE_ID_COLUMNS]
    cols = list(dict.fromkeys([*found_by, *[c.mapping[x] for x in chk.columns() if x in c.mapping]]))
    try:
        df: DataFrame | None
        if c.fail is not None:
            df = added.where(c.applies & c.fail)
            df = df.select(*[quote(x) for x in cols]) if cols else df
        else:
            df = chk.offending(added, c, ctx)
        if df is None:
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
