"""Batch checks judged against the table's history: volume and anomaly bands over its last published runs
(the maths: wapflow.audit.anomaly), and schema_change against the last published run's columns."""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, model_validator

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
    Evidence,
    Rule,
    Verdict,
    count_if,
    null_counts,
)
from wapflow.errors import ConfigError

# wapflow.sql.identifiers is imported where it is used: wap.toml holds these models, and reading it (or the
# run store) must not load the lakehouse (tests/test_layers.py).
if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from wapflow.audit.checktype import AuditContext, Compiled
    from wapflow.audit.metrics import FileMetrics
    from wapflow.sql.identifiers import TableName


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
