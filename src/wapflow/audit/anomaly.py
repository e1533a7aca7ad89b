"""What is normal for a metric of a table, learned from its published runs: the robust band of anomaly checks.

A check without a fixed threshold needs the table's history to say what a batch usually looks like. The band
is the median of the last runs' values ± sensitivity x their median absolute deviation (scaled by 1.4826, so
it estimates one standard deviation of normal data): one outlier in the history moves it little, unlike a
mean and a standard deviation. With weekly seasonality the history is only the runs that started on the same
weekday (UTC) as this one: a table whose weekend batches are small is judged against its other weekends. No
Spark here: the maths is tested alone (tests/unit/test_anomaly.py).

The metrics themselves (names, which columns they fit) are defined here too, once: the anomaly checks, the
metric history the audit records (wapflow.runs.metrics) and `wap metrics` all use these names.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Literal

from wapflow.audit.metrics import FileMetrics

MAD_SCALE = 1.4826  # MAD x this estimates the standard deviation of normally distributed values
# The least spread a band assumes: 5% of |median|, and never less than 0.001. Without it a constant history
# (every run 200 rows, a null fraction always 0) has MAD 0 and would block the smallest change; with it a
# constant history of 200 rows allows 200 ± 3 x 10 at sensitivity 3, and a null fraction always 0 up to 0.003.
FLOOR_RELATIVE = 0.05
FLOOR_ABSOLUTE = 0.001

# Metric -> what it is measured on: the whole batch, any column, a numeric column, a string column.
MetricKind = Literal["table", "any", "numeric", "string"]
METRICS: dict[str, MetricKind] = {
    "row_count": "table",
    "null_fraction": "any",
    "distinct": "any",  # approx_count_distinct (HyperLogLog++) at DISTINCT_RSD
    "min": "numeric",
    "max": "numeric",
    "mean": "numeric",
    "sum": "numeric",
    "mean_length": "string",
}
# The relative standard deviation of the distinct estimate (Spark's approx_count_distinct, HyperLogLog++): well
# inside the band's 5% floor, so the estimate's own error does not block a batch; exact up to a few hundred values.
DISTINCT_RSD = 0.02
# Which earlier runs make the band: all of the window, or only those that started on the same weekday (UTC).
Seasonality = Literal["none", "weekly"]
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")

# What a run changes on main (write modes), recorded in the history where the run has them.
CHANGE_METRICS = ("rows_inserted", "rows_updated", "rows_deleted")
# The batch's columns and types (JSON), recorded for `schema_change` checks.
SCHEMA_METRIC = "schema"


@dataclass(frozen=True)
class Band:
    """The expected range of a metric, and what it was made of."""

    median: float
    mad: float  # the scaled median absolute deviation of the history
    spread: float  # max(mad, the floor): what sensitivity multiplies
    lo: float
    hi: float
    history: int  # how many runs it was made of
    weekday: int | None = None  # made of runs on this weekday only (weekly seasonality): 0 Monday .. 6 Sunday

    def contains(self, value: float) -> bool:
        return self.lo <= value <= self.hi

    def describe(self, sensitivity: float) -> str:
        return (
            f"[{_num(self.lo)}, {_num(self.hi)}] (median {_num(self.median)} ± {sensitivity:g} x "
            f"{_num(self.spread)} over the last {self.history} published runs"
            + (f"; same weekday: {history_of(self.history, self.weekday)}" if self.weekday is not None else "")
            + ")"
        )

    def evidence(self, value: float | None) -> dict[str, Any]:
        """What a report shows: the value, the band and what it was made of."""
        return {
            "value": None if value is None else _short(value),
            "band": [_short(self.lo), _short(self.hi)],
            "median": _short(self.median),
            "mad": _short(self.mad),
            "history": self.history,
            **(
                {"seasonality": f"same weekday: {history_of(self.history, self.weekday)}"}
                if self.weekday is not None
                else {}
            ),
        }


def band(history: Sequence[float], sensitivity: float, weekday: int | None = None) -> Band:
    """median ± sensitivity x max(1.4826 x MAD, floor) of `history` (at least one value); `weekday`: the
    history is of runs on that weekday only (weekly seasonality), which the report says."""
    if not history:
        raise ValueError("a band needs at least one value of history")
    values = [float(v) for v in history]
    med = statistics.median(values)
    mad = MAD_SCALE * statistics.median(abs(v - med) for v in values)
    spread = max(mad, FLOOR_RELATIVE * abs(med), FLOOR_ABSOLUTE)
    return Band(med, mad, spread, med - sensitivity * spread, med + sensitivity * spread, len(values), weekday)


def weekday_of(at: datetime) -> int:
    """The UTC weekday of a run's start (0 Monday .. 6 Sunday); a naive time is UTC (SQLite keeps no zone)."""
    return (at if at.tzinfo is None else at.astimezone(UTC)).weekday()


def history_of(runs: int, weekday: int) -> str:
    """What a seasonal history is made of, as a report says it: "6 Mondays"."""
    return f"{runs} {WEEKDAYS[weekday]}{'' if runs == 1 else 's'}"


def same_weekday(rows: Iterable[tuple[datetime, float]], weekday: int | None, limit: int) -> list[float]:
    """The first `limit` values of `rows` (newest first) whose run started on `weekday` (None: every run)."""
    out: list[float] = []
    for at, value in rows:
        if len(out) >= limit:
            break
        if weekday is None or weekday_of(at) == weekday:
            out.append(value)
    return out


def _short(v: float) -> float:
    """Six significant digits: what a report needs, without float noise (85.42000000000002)."""
    return float(f"{v:.6g}")


def _num(v: float) -> str:
    return f"{v:.0f}" if float(v).is_integer() and abs(v) >= 1 else f"{v:.4g}"


def as_number(v: Any) -> float | None:
    """A metric value as a float (ints, floats, Decimals); None for what is not a number (strings, dates)."""
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float, Decimal)):
        return float(v)
    return None


def file_metric_values(fm: FileMetrics) -> dict[tuple[str, str], float]:
    """What the metric history keeps of data files' column metrics (Iceberg metadata, no scan): per column the
    null fraction, and the min and max of numeric columns. An audited run's added files and each append a
    backfill reads (wapflow.service.metrics) give the same values this way."""
    out: dict[tuple[str, str], float] = {}
    for col, nulls in fm.null_counts.items():
        if nulls is not None and fm.rows:
            out[("null_fraction", col)] = nulls / fm.rows
    for name, bounds in (("min", fm.lower), ("max", fm.upper)):
        for col, v in bounds.items():
            number = as_number(v)
            if number is not None:
                out[(name, col)] = number
    return out
