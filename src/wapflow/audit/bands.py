"""The band of a metric: what is normal for it, learned from a table's published runs, and the model judging it.

The band is the median of the last runs' values ± sensitivity x their median absolute deviation (scaled by
1.4826, so it estimates one standard deviation of normal data): one outlier in the history moves it little,
unlike a mean and a standard deviation. `judge` makes it by the metric's model (MODELS: a multiplicative band
for counts and sums, a rate band for proportions, a robust one for the rest), widened to the history's heavy
tails and a least change. No Spark here. wapflow.audit.anomaly builds its seasonal, companion and category
signals on this module and re-exports its names.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from wapflow import display

MAD_SCALE = 1.4826  # MAD x this estimates the standard deviation of normally distributed values
# The least spread a band assumes: 5% of |median|, and never less than 0.001. Without it a constant history
# (every run 200 rows, a null fraction always 0) has MAD 0 and would block the smallest change; with it a
# constant history of 200 rows allows 200 ± 3 x 10 at sensitivity 3, and a null fraction always 0 up to 0.003.
FLOOR_RELATIVE = 0.05
FLOOR_ABSOLUTE = 0.001

WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


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
        # A value equal to an edge made of the history's own extreme passes, whatever the float noise of the
        # log model's exp(log(v)) (500.0000000000003 for a history's 500).
        eps = 1e-9 * max(1.0, abs(self.lo), abs(self.hi))
        return self.lo - eps <= value <= self.hi + eps

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


# The model an anomaly check judges a metric with (judge): what kind of number it is decides the band.
#   counts and sums ("log"): a multiplicative band, median x/÷ exp(sensitivity x the spread of the logs): a day
#     with 20% fewer rows is as unusual at 90 rows as at 90,000, and the band never goes below zero;
#   proportions ("proportion"): the history's rate ± sensitivity x sqrt(binomial variance at this batch's rows +
#     the history's own day-to-day variance): 3 nulls in 150 rows is noise where 300 in 15,000 is not;
#   the rest ("linear": mean, min, max, mean_length): median ± sensitivity x the scaled MAD.
Model = Literal["log", "proportion", "linear"]
MODELS: dict[str, Model] = {
    "row_count": "log",
    "distinct": "log",
    "sum": "log",  # a sum of a column with negative values falls back to linear (no log of it)
    "null_fraction": "proportion",
    "duplicate_fraction": "proportion",
    "min": "linear",
    "max": "linear",
    "mean": "linear",
    "mean_length": "linear",
}
# The least change that blocks, per model (the change must matter, like Elementary's ignore_small_changes):
# - counts: x/÷ 1.25 (25% more, 20% fewer). A daily batch's row count moves that much without anyone caring (a
#   holiday weekend, a late file); a lost partition or a failed upstream job removes far more. In logs it is a
#   little under halfway to the smallest drop a gate must see (40%, x 0.6): a 40% drop still blocks unless the
#   day itself was over a third above its usual level. At 15%, New York flights' holiday weekends blocked (a
#   predictable count: its band is the least change); at 25% 3 fewer real days block (bench-gates 6.3% -> 5.4%)
#   and 40% drops are caught as often (99%); on stops and pizza the band is wider than either.
# - proportions: 2 points. A null fraction from 0.4% to 1.5% is a bad-weather day, not a broken column; the
#   faults a gate exists for (a column no longer filled) move it by tens of points.
# - the rest: 2% of |median| (and FLOOR_ABSOLUTE). Small enough that a mean shifted by three times its usual
#   day-to-day spread still stands out (a price's daily mean moves ~2%), large enough that a constant history
#   (spread 0) does not block the first rounding difference.
MIN_EFFECT_COUNT = 0.25
# Around a holiday of the table's calendar (its `holidays`, wapflow.audit.calendars: the day and one either side),
# a count's least change is x/÷ 1.6: a year's runs hold each holiday once, so no band learns it, and holidays move
# daily counts by up to a third (New York flights: Thanksgiving 0.64x a Thursday, July 4 0.74x, Christmas Eve
# and Day 0.8x; a pizza place: Thanksgiving 1.3x). A 40% loss (x 0.6) on such a day still blocks unless the day
# itself was above its usual level. Means, rates and the rest are judged as on any day.
HOLIDAY_CHANGE = 0.6
MIN_EFFECT_PROPORTION = 0.02
MIN_EFFECT_RELATIVE = 0.02
# A change that always blocks (an anomaly check's blocks_beyond; none by default): the band never reaches past
# it, however wide the history's tails. For a table whose real days include what a fault looks like (storms
# cancel a tenth of New York's flights, so a 10-point null spike sits among them), the team chooses: on
# bench-gates, blocks_beyond = 0.1 on flights' null fraction catches 100% of 10-point spikes instead of 10.5%,
# and blocks 10 more real days (5.4% -> 7.7%); 0.35 on stops' row count catches 72% of 40% drops instead of
# 48%, and blocks 2.0% -> 4.6% of real days. Neither is a default: each costs more real days than the 2%
# a gate may block.
BLOCKS_BEYOND: float | None = None

# Heavy tails: once the history has TAIL_RUNS runs, the band also reaches its TAIL_QUANTILE and 1 - TAIL_QUANTILE
# quantiles plus TAIL_MARGIN of their distance from the median: a metric whose normal days include storms or
# holidays (a null fraction usually 0.4%, some days 5%) is judged against the days it has had, not a normal curve.
# Below TAIL_RUNS, two unusual days would make a quantile on their own. The quantiles are those of the window's
# runs until TAIL_MEMORY_RUNS published runs exist, then of the last TAIL_MEMORY (a year of daily runs): a 30-run
# window puts a 5% quantile on its one or two oddest days, so a cluster of storms widened the band for a month (a
# 10-point null spike then passed) and a calm month narrowed it (the next storm blocked).
# The 0.5% and 99.5% quantiles: a year's runs put each on its one or two most extreme days, so a check blocks
# about one real day in 100 beyond them by construction, and a gate of three or four such checks stays near the
# 2% of real days a gate may block (at 1% and 99%, each check blocked ~2%: flights' gate of three banded checks
# 5.4% with holidays 3.7%; now 2.6%; bench-gates). The price: a mean shifted by three spreads, at the band's
# edge, is caught a little less often (flights 62.9% -> 52.4%).
# A short history's extremes are not its tails: the next day beyond a 30-run window's highest comes once in 31,
# so until the year's memory exists (TAIL_MEMORY_RUNS) the band reaches TAIL_MARGIN_SHORT again beyond the
# window's extremes (a normal tail's 99.5th percentile is ~1.4x as far from the median as a 30-run window's
# highest, an exponential one's ~1.7x): flights' January storms blocked 7 real days in the first 60, now 3.
TAIL_RUNS = 20
TAIL_QUANTILE = 0.005
TAIL_MARGIN = 0.0
TAIL_MARGIN_SHORT = 0.5
TAIL_MEMORY = 365
TAIL_MEMORY_RUNS = 60


class History(list[float]):
    """A metric's values over the runs a band is made of (newest first), with those runs' ids, how many of
    them were blocked runs nobody decided on (`learnt`), and how many runs of the same span were left out, by
    status (wapflow.runs.metrics.MetricHistory.published)."""

    def __init__(
        self,
        values: Iterable[float] = (),
        runs: Sequence[str] = (),
        left_out: dict[str, int] | None = None,
        learnt: int = 0,
    ) -> None:
        super().__init__(values)
        self.runs = tuple(runs)
        self.left_out = dict(left_out or {})
        self.learnt = learnt


def made_of(history: Sequence[float], limit: int) -> dict[str, Any]:
    """What a report says the band was made of: the runs' ids and the runs left out (a History's; nothing for a
    plain list), the first `limit` values' runs only."""
    runs, left_out = getattr(history, "runs", ()), getattr(history, "left_out", {})
    out: dict[str, Any] = {}
    if runs:
        out["runs"] = list(runs[:limit])
    if learnt := getattr(history, "learnt", 0):
        out["learnt_from_blocked"] = learnt
    if left_out:
        out["left_out"] = ", ".join(f"{n} {status}" for status, n in sorted(left_out.items()))
    return out


@dataclass(frozen=True)
class Judged(Band):
    """A band of a model (judge): in the metric's own units, with the model that made it and its terms."""

    model: Model = "linear"
    terms: tuple[str, ...] = ()  # what widened it, in words: "heavy tail", "least change 15%"...

    def describe(self, sensitivity: float) -> str:
        how = {
            "log": f"median {_num(self.median)} x/÷ {math.exp(sensitivity * self.spread):.3g}",
            "proportion": f"rate {_num(self.median)} ± {sensitivity:g} x {_num(self.spread)}",
            "linear": f"median {_num(self.median)} ± {sensitivity:g} x {_num(self.spread)}",
        }[self.model]
        extra = "".join(f"; {t}" for t in self.terms)
        seasonal = f"; same weekday: {history_of(self.history, self.weekday)}" if self.weekday is not None else ""
        return (
            f"[{_num(self.lo)}, {_num(self.hi)}] ({MODEL_WORDS[self.model]}: {how} over the last {self.history} "
            f"published runs{extra}{seasonal})"
        )

    def evidence(self, value: float | None) -> dict[str, Any]:
        out = super().evidence(value)
        # "mad" as a report reads it: one spread in the metric's units (a log spread is a ratio).
        out["mad"] = _short(self.median * (math.exp(self.spread) - 1) if self.model == "log" else self.spread)
        out["model"] = self.model
        if value is not None and not self.contains(value):
            out["outside_by"] = _short(value - self.hi if value > self.hi else value - self.lo)
        return out


MODEL_WORDS: dict[str, str] = {"log": "multiplicative band", "proportion": "rate band", "linear": "robust band"}


def _mad(values: Sequence[float], center: float) -> float:
    return MAD_SCALE * statistics.median(abs(v - center) for v in values)


def _tail(
    values: Sequence[float], center: float, lo: float, hi: float, memory: Sequence[float] = ()
) -> tuple[float, float, bool]:
    """lo and hi widened to the history's own quantiles (heavy tails), once it has TAIL_RUNS values: those of
    `memory` (a longer history, same units) where it has TAIL_MEMORY_RUNS values, else those of `values`."""
    if len(values) < TAIL_RUNS:
        return lo, hi, False
    source = memory if len(memory) >= TAIL_MEMORY_RUNS else values
    long = len(source) >= TAIL_MEMORY_RUNS
    cuts = statistics.quantiles(source, n=round(1 / TAIL_QUANTILE), method="inclusive")
    q_lo, q_hi = cuts[0], cuts[-1]
    margin = TAIL_MARGIN if long else TAIL_MARGIN_SHORT
    t_lo, t_hi = q_lo - margin * (center - q_lo), q_hi + margin * (q_hi - center)
    return min(lo, t_lo), max(hi, t_hi), t_lo < lo or t_hi > hi


def judge(
    metric: str,
    history: Sequence[float],
    sensitivity: float,
    weekday: int | None = None,
    rows: int | None = None,
    memory: Sequence[float] = (),
    beyond: float | None = None,
    holiday: str | None = None,
) -> Judged:
    """The band of `metric` over `history` (at least one value) by the metric's model (MODELS); `rows`: the
    batch's row count, the sample size of a proportion; `memory`: a longer history its tails are learned from
    (TAIL_MEMORY); `beyond`: a change that always blocks (BLOCKS_BEYOND); `holiday`: the holiday the batch's day
    is near, in words (HOLIDAY_CHANGE)."""
    if not history:
        raise ValueError("a band needs at least one value of history")
    values = [float(v) for v in history]
    model = MODELS.get(metric, "linear")
    if model == "log" and min(values) <= 0:
        model = "linear"  # a count of 0 or a negative sum has no logarithm: judged on the linear band
    med = statistics.median(values)
    terms: list[str] = []
    if model == "log":
        logs = [math.log(v) for v in values]
        center = statistics.median(logs)
        spread = _mad(logs, center)
        mem = [math.log(v) for v in memory] if memory and min(memory) > 0 else []
        lo, hi, tailed = _tail(logs, center, center - sensitivity * spread, center + sensitivity * spread, mem)
        change = MIN_EFFECT_COUNT if holiday is None else HOLIDAY_CHANGE
        least = math.log(1 + change)
        if hi - center < least or center - lo < least:
            terms.append(f"least change {change:.0%}" + (f" around a holiday ({holiday})" if holiday else ""))
        lo, hi = math.exp(min(lo, center - least)), math.exp(max(hi, center + least))
        med = math.exp(center)
    elif model == "proportion":
        day_to_day = _mad(values, med)
        p = min(max(med, 1 / (2 * rows)), 1.0) if rows else med  # a rate of 0 still has a binomial spread
        binomial = math.sqrt(p * (1 - p) / rows) if rows else 0.0
        spread = math.sqrt(binomial**2 + day_to_day**2)
        lo, hi, tailed = _tail(values, med, med - sensitivity * spread, med + sensitivity * spread, memory)
        if hi - med < MIN_EFFECT_PROPORTION:
            terms.append(f"least change {MIN_EFFECT_PROPORTION * 100:g} points")
        lo, hi = max(0.0, min(lo, med - MIN_EFFECT_PROPORTION)), min(1.0, max(hi, med + MIN_EFFECT_PROPORTION))
    else:
        spread = _mad(values, med)
        lo, hi, tailed = _tail(values, med, med - sensitivity * spread, med + sensitivity * spread, memory)
        least = max(MIN_EFFECT_RELATIVE * abs(med), FLOOR_ABSOLUTE)
        if hi - med < least or med - lo < least:
            terms.append(f"least change {_num(least)}")
        lo, hi = min(lo, med - least), max(hi, med + least)
    if tailed:
        terms.insert(0, "widened to the history's own extremes (heavy tail)")
    if beyond is not None:
        if model == "log":
            edges, words = (med * (1 - beyond), med / (1 - beyond)), f"{beyond:.0%} fewer or 1/{1 - beyond:.3g} as many"
        elif model == "proportion":
            edges, words = (med - beyond, med + beyond), f"{beyond * 100:g} points"
        else:
            edges, words = (med - beyond * abs(med), med + beyond * abs(med)), f"{beyond:.0%} of |median|"
        if edges[0] > lo or edges[1] < hi:
            lo, hi = max(lo, edges[0]), min(hi, edges[1])
            terms.append(f"a change of {words} always blocks")
    mad = spread if model != "log" else _mad(values, med)
    return Judged(med, mad, spread, lo, hi, len(values), weekday, model, tuple(terms))


def history_of(runs: int, weekday: int) -> str:
    """What a seasonal history is made of, as a report says it: "6 Mondays"."""
    return f"{runs} {WEEKDAYS[weekday]}{'' if runs == 1 else 's'}"


def _short(v: float) -> float:
    """Six significant digits: what a report needs, without float noise (85.42000000000002)."""
    return float(f"{v:.6g}")


def _num(v: float) -> str:
    return display.number(v)
