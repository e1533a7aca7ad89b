"""What is normal for a metric of a table, learned from its published runs: the robust band of anomaly checks.

A check without a fixed threshold needs the table's history to say what a batch usually looks like. The band
is the median of the last runs' values ± sensitivity x their median absolute deviation (scaled by 1.4826, so
it estimates one standard deviation of normal data): one outlier in the history moves it little, unlike a
mean and a standard deviation. No Spark here: the maths is tested alone (tests/unit/test_anomaly_band.py).

The metrics themselves (names, which columns they fit) are defined here too, once: the anomaly checks, the
metric history the audit records (wapflow.runs.metrics) and `wap metrics` all use these names.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

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
    "min": "numeric",
    "max": "numeric",
    "mean": "numeric",
    "sum": "numeric",
    "mean_length": "string",
}
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

    def contains(self, value: float) -> bool:
        return self.lo <= value <= self.hi

    def describe(self, sensitivity: float) -> str:
        return (
            f"[{_num(self.lo)}, {_num(self.hi)}] (median {_num(self.median)} ± {sensitivity:g} x "
            f"{_num(self.spread)} over the last {self.history} published runs)"
        )

    def evidence(self, value: float | None) -> dict[str, Any]:
        """What a report shows: the value, the band and what it was made of."""
        return {
            "value": None if value is None else _short(value),
            "band": [_short(self.lo), _short(self.hi)],
            "median": _short(self.median),
            "mad": _short(self.mad),
            "history": self.history,
        }


def band(history: Sequence[float], sensitivity: float) -> Band:
    """median ± sensitivity x max(1.4826 x MAD, floor) of `history` (at least one value)."""
    if not history:
        raise ValueError("a band needs at least one value of history")
    values = [float(v) for v in history]
    med = statistics.median(values)
    mad = MAD_SCALE * statistics.median(abs(v - med) for v in values)
    spread = max(mad, FLOOR_RELATIVE * abs(med), FLOOR_ABSOLUTE)
    return Band(med, mad, spread, med - sensitivity * spread, med + sensitivity * spread, len(values))


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
