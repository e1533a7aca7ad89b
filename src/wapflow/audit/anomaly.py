"""What is normal for a metric of a table, learned from its published runs: the robust band of anomaly checks.

A check without a fixed threshold needs the table's history to say what a batch usually looks like. The band
is the median of the last runs' values ± sensitivity x their median absolute deviation (scaled by 1.4826, so
it estimates one standard deviation of normal data): one outlier in the history moves it little, unlike a
mean and a standard deviation. With weekly seasonality the history is only the runs that started on the same
weekday (UTC) as this one: a table whose weekend batches are small is judged against its other weekends; by
default (seasonality "auto") a weekly rhythm is looked for in the history itself (weekly_rhythm). No
Spark here: the maths is tested alone (tests/unit/test_anomaly.py).

The metrics themselves (names, which columns they fit) are defined here too, once: the anomaly checks, the
metric history the audit records (wapflow.runs.metrics) and `wap metrics` all use these names.

The band itself (each metric's model, its heavy tails, `judge`) lives in wapflow.audit.bands; its names are
re-exported here, so callers import every one of them from this module.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from datetime import time as dtime
from decimal import Decimal
from typing import Any, Literal, TypeVar

from wapflow.audit.bands import BLOCKS_BEYOND as BLOCKS_BEYOND
from wapflow.audit.bands import FLOOR_ABSOLUTE as FLOOR_ABSOLUTE
from wapflow.audit.bands import FLOOR_RELATIVE as FLOOR_RELATIVE
from wapflow.audit.bands import HOLIDAY_CHANGE as HOLIDAY_CHANGE
from wapflow.audit.bands import MAD_SCALE as MAD_SCALE
from wapflow.audit.bands import MIN_EFFECT_COUNT as MIN_EFFECT_COUNT
from wapflow.audit.bands import MIN_EFFECT_PROPORTION as MIN_EFFECT_PROPORTION
from wapflow.audit.bands import MIN_EFFECT_RELATIVE as MIN_EFFECT_RELATIVE
from wapflow.audit.bands import MODEL_WORDS as MODEL_WORDS
from wapflow.audit.bands import MODELS as MODELS
from wapflow.audit.bands import TAIL_MARGIN as TAIL_MARGIN
from wapflow.audit.bands import TAIL_MARGIN_SHORT as TAIL_MARGIN_SHORT
from wapflow.audit.bands import TAIL_MEMORY as TAIL_MEMORY
from wapflow.audit.bands import TAIL_MEMORY_RUNS as TAIL_MEMORY_RUNS
from wapflow.audit.bands import TAIL_QUANTILE as TAIL_QUANTILE
from wapflow.audit.bands import TAIL_RUNS as TAIL_RUNS
from wapflow.audit.bands import WEEKDAYS as WEEKDAYS
from wapflow.audit.bands import Band as Band
from wapflow.audit.bands import History as History
from wapflow.audit.bands import Judged as Judged
from wapflow.audit.bands import Model as Model
from wapflow.audit.bands import _mad, _num, _short, _tail
from wapflow.audit.bands import band as band
from wapflow.audit.bands import history_of as history_of
from wapflow.audit.bands import judge as judge
from wapflow.audit.bands import made_of as made_of
from wapflow.audit.metrics import FileMetrics

# Metric -> what it is measured on: the whole batch, any column, a numeric column, a string column.
MetricKind = Literal["table", "any", "numeric", "string"]
METRICS: dict[str, MetricKind] = {
    "row_count": "table",
    # The share of the batch's rows that copy another row of it (1 - distinct rows / rows): a file delivered
    # twice, a join that fans out. Distinct rows estimated by approx_count_distinct of a 64-bit hash of the whole
    # row, observed in the write, at DUPLICATE_RSD. Rows that differ only in which columns are NULL hash alike.
    "duplicate_fraction": "table",
    "null_fraction": "any",
    "distinct": "any",  # approx_count_distinct (HyperLogLog++) at DISTINCT_RSD
    "min": "numeric",
    "max": "numeric",
    "mean": "numeric",
    "sum": "numeric",
    "mean_length": "string",
    # A category column's values and their rows (the distinct values as text, at most VALUES_CAP of them), recorded
    # as a JSON object: judged by which values vanished or appeared, not by a band (category_changes).
    "values": "any",
}
# The relative standard deviation of the distinct estimate (Spark's approx_count_distinct, HyperLogLog++): well
# inside the band's 5% floor, so the estimate's own error does not block a batch; exact up to a few hundred values.
DISTINCT_RSD = 0.02
# The distinct rows' estimate of duplicate_fraction is finer: at 2% a day of 899 distinct flights was estimated
# 879, a 2.2% "duplicate" share beyond the rate band's least change of 2 points; at 0.5% (HyperLogLog++ with 2^16
# registers, about 48 KB a task) the estimates of flights' days were within 3 rows of 900.
DUPLICATE_RSD = 0.005
# Which earlier runs make the band: all of the window ("none"), only those that started on the same weekday (UTC,
# "weekly"), or all of the window moved onto this weekday's level when the history has a weekly rhythm ("auto").
Seasonality = Literal["auto", "none", "weekly"]

# What a run changes on main (write modes), recorded in the history where the run has them.
CHANGE_METRICS = ("rows_inserted", "rows_updated", "rows_deleted")
# The batch's columns and types (JSON), recorded for `schema_change` checks.
SCHEMA_METRIC = "schema"

# A category column's values and their rows ("values"), judged as counts (category_changes):
# - vanished: a value in each of the window's runs that the batch lacks, where the batch would have held at least
#   VANISH_EXPECTED rows of it at its usual share (the median of its shares of the window's runs). A value with a
#   Poisson mean of 7 rows is missing by chance once in ~1,100 batches (e^-7); one with 1 or 2 a day (a carrier's
#   one daily flight) is missing on a real day every week or so, and its absence says nothing.
# - appeared: a value of the batch in none of the last VALUES_MEMORY runs (at least the window) holding at least
#   APPEAR_SHARE of the batch's rows: a rare value seen once in a year (a charter flight, one mistyped row) is
#   reported, a source or a mapping that starts writing a new value into a share of the rows blocks. The memory is
#   longer than the window so a value seen a few days a year is remembered once seen.
# A batch of more than VALUES_CAP values is not of a category: the check warns.
VALUES_CAP = 1000
VALUES_MEMORY = 365
VANISH_EXPECTED = 7.0
APPEAR_SHARE = 0.01
# Cold start: a history shorter than this never blocks, whatever min_history says (it may be 1 or 2): a failing
# verdict only warns. One or two data points say nothing about a metric's spread.
COLD_START_RUNS = 3


# A weekly rhythm found in the history itself (seasonality = "auto", the default): each weekday's level is the
# median of its last RHYTHM_RUNS runs; the band's history is moved onto this weekday's level (x its ratio for
# counts and sums, + its difference for the rest), each run against its weekday's level without itself, and
# judged as usual. It is used only when the history has RHYTHM_HISTORY runs, every weekday in it has RHYTHM_MIN
# runs to make a level, and the moved history's mean deviation is at most RHYTHM_GAIN of the plain one. At 0.6
# (measured on make bench-gates) the row count's rhythm is used on 317 of 355 days of New York flights
# (Saturdays 0.77x a weekday, each weekday within ±5%), on 33 of Minneapolis police stops (±21% on any weekday)
# and 2 of a pizza place's sales; at 0.75 chance differences between weekdays' levels pass for a rhythm more
# often and block real days. Proportions are left as they are (a null fraction's weekly rhythm is rare; its band
# has the batch's size).
RHYTHM_RUNS = 8
RHYTHM_MIN = 3
RHYTHM_HISTORY = 10
RHYTHM_GAIN = 0.6


def weekly_rhythm(
    metric: str, history: Sequence[tuple[int, float]], levels: Mapping[int, Sequence[float]], today: int
) -> tuple[list[float], str] | None:
    """`history` ((weekday, value), the band's runs) moved onto `today`'s level, and the rhythm in words ("weekly
    rhythm: Saturdays 0.77x the median day"); None when the history has no weekly rhythm (see RHYTHM_GAIN).
    `levels`: each weekday's last values (RHYTHM_RUNS of them), whose median is that weekday's level."""
    model = MODELS.get(metric, "linear")
    if model == "proportion" or len(history) < RHYTHM_HISTORY:
        return None
    every = [v for _, v in history] + [v for vs in levels.values() for v in vs]
    ratio = model == "log" and min(every) > 0  # counts and sums: levels are ratios (their logs differ)
    f = math.log if ratio else float
    level = {w: statistics.median(f(v) for v in vs) for w, vs in levels.items() if len(vs) >= RHYTHM_MIN}
    if today not in level or any(w not in level for w, _ in history):
        return None
    plain = [f(v) for _, v in history]
    # Each run against its weekday's level without it (leave one out): a level made of the run itself would hide
    # part of its spread, and the band would be narrower than the days it judges.
    moved = [f(v) - _level_without(levels[w], v, f) + level[today] for w, v in history]
    # The spreads compared are mean absolute deviations: a median one would not see a rhythm of one or two days
    # a week (Saturdays are a seventh of the runs), which is the commonest.
    spread = _mean_deviation(plain)
    if spread == 0 or _mean_deviation(moved) > RHYTHM_GAIN * spread:
        return None
    typical = statistics.median(level.values())
    if ratio:
        words = f"{math.exp(level[today] - typical):.2f}x the median day"
        values = [math.exp(m) for m in moved]
    else:
        words = f"{level[today] - typical:+.4g} from the median day"
        values = moved
    return values, f"weekly rhythm: {WEEKDAYS[today]}s {words}"


# Per-weekday bands (seasonality "auto"; counts, sums and means) once the history holds WEEKDAY_RUNS published
# runs: each run's deviation from its own weekday's level just before it (the median of that weekday's previous
# RHYTHM_RUNS runs, at least RHYTHM_MIN), the year's deviations moved onto this weekday's level, judged as usual
# (the band's spread and heavy tails are those of the deviations). Used where those deviations are at most
# WEEKDAY_GAIN of the plain ones (each run against the median of the `window` runs before it): both are errors of
# a prediction made before the run, so the comparison does not flatter either. A history without a weekly cycle
# loses by ~7% (a median of 8 runs is noisier than one of 30) and keeps the plain band; Minneapolis police stops
# and a pizza place's sales win by ~16%, New York flights by ~40% (make bench-gates: a 40% volume drop caught
# 37% -> 48% on stops and 75% -> 85% on pizza, stops' real days blocked 2.6% -> 2.0%). Means keep the plain band
# on these data (their weekday levels predict worse). Proportions are judged with the batch's size, never moved.
WEEKDAY_RUNS = 60
WEEKDAY_GAIN = 0.95
# A day a person published outside the band (a holiday, a storm) is news once; the next days like it are not:
# the last RECENT_RUNS runs' deviations count RECENT_WEIGHT times among the year's, so the band's 1st and 99th
# percentiles (3 of ~300 deviations) reach them (bench-gates: real days blocked with the per-weekday band, pizza
# 3.5% -> 2.9%, flights 6.6% -> 6.3%: the Friday after Thanksgiving and July 5 pass; a 40% drop the day after
# such a day is caught a little less often: stops 49.5% -> 47.6%).
RECENT_RUNS = 2
RECENT_WEIGHT = 5


def weekday_band(
    metric: str,
    by_weekday: Mapping[int, Sequence[float]],
    recent: Sequence[float],
    today: int,
    window: int,
    latest: Sequence[int] = (),
) -> tuple[list[float], str] | None:
    """The history of a per-weekday band (see WEEKDAY_GAIN) and what it is, in words; None where the history is
    too short or has no weekly cycle. `by_weekday`: each weekday's published runs, newest first; `recent`: the
    last runs of every weekday, newest first; `window`: how many runs the plain band is made of; `latest`: the
    weekdays of the last runs (newest first), whose own deviations the band reaches (see RECENT_RUNS)."""
    model = MODELS.get(metric, "linear")
    every = [v for vs in by_weekday.values() for v in vs]
    if model == "proportion" or len(every) < WEEKDAY_RUNS or len(by_weekday.get(today, ())) < RHYTHM_MIN:
        return None
    ratio = model == "log" and min([*every, *recent]) > 0  # counts and sums: deviations are ratios
    f = math.log if ratio else float
    deviations, newest = [], {}
    for w, vs in by_weekday.items():
        xs = [f(v) for v in reversed(vs)]  # oldest first
        own = [xs[j] - statistics.median(xs[max(0, j - RHYTHM_RUNS) : j]) for j in range(RHYTHM_MIN, len(xs))]
        deviations += own
        if own:
            newest[w] = own[-1]
    xs = [f(v) for v in reversed(recent)]
    plain = [xs[j] - statistics.median(xs[max(0, j - window) : j]) for j in range(RHYTHM_HISTORY, len(xs))]
    if len(deviations) < TAIL_RUNS or not plain:
        return None
    ours, theirs = _mean_deviation(deviations), _mean_deviation(plain)
    if theirs == 0 or ours > WEEKDAY_GAIN * theirs:
        return None
    level = statistics.median(f(v) for v in by_weekday[today][:RHYTHM_RUNS])
    # The last runs' own deviations, added again until the band's tails hold them: a day a person published
    # outside the band (a holiday, a storm) makes the next RECENT_RUNS days like it pass.
    near = [newest[w] for w in latest[:RECENT_RUNS] if w in newest]
    values = [math.exp(level + d) if ratio else level + d for d in deviations + near * RECENT_WEIGHT]
    shown = _num(math.exp(level)) if ratio else _num(level)
    words = (
        f"per-weekday band: {WEEKDAYS[today]}s' level {shown} (their last {min(RHYTHM_RUNS, len(by_weekday[today]))} "
        f"runs), {len(deviations)} runs' deviations from their weekday's level ({1 - ours / theirs:.0%} smaller "
        f"than from the last {window} runs' median)"
    )
    return values, words


# A column's nulls explained by its companions' (null_fraction): in real data a row's fields are often missing together
# (a cancelled flight has no departure, arrival or air time; a stop where no data was collected has no race, gender or
# search), so a storm moves several columns' null fractions as one, where a column an upstream stopped filling moves
# alone. From COMPANION_RUNS published runs (two weeks of daily runs), the column of the batch whose null fractions over
# the year's runs explain this one's best by a straight line (least squares) is its companion, used where the residuals'
# mean deviation is at most COMPANION_GAIN of the column's own. The batch's nulls beyond what its companion's predict
# block above the band of the history's residuals (its heavy tails, and a least change of MIN_EFFECT_PROPORTION): a
# 10-point spike of one column is outside it however stormy the day. Fewer nulls than predicted do not block here (on a
# stormy day a flight diverted lacks an arrival delay, not a departure one: a column lags its companion); the plain band
# still judges the null fraction itself both ways (and a fault that empties whole rows, moving every column). make
# bench-gates: New York flights' dep_delay nulls follow arr_delay's (r 0.997; the residuals' 99.5% range is ~3 points
# where the plain one is 27): a 10-point spike of dep_delay's nulls was caught on 6.7% of days, now 100%, and no more
# real days are blocked (1.7%); Minneapolis stops' race follows personSearch exactly.
COMPANION_RUNS = 14
COMPANION_GAIN = 0.5


@dataclass(frozen=True)
class Companion:
    """The column whose values explain a metric's best (companion): value ~ intercept + slope x its value."""

    column: str
    intercept: float
    slope: float
    residuals: tuple[float, ...]  # the history's, newest first
    gain: float  # the residuals' mean deviation over the metric's own

    def expected(self, value: float) -> float:
        return self.intercept + self.slope * value


def companion(history: Sequence[float], others: Mapping[str, Sequence[float | None]]) -> Companion | None:
    """The column of `others` (its values over the same runs as `history`, None where a run lacks it) whose values
    explain `history` best by least squares, where that leaves at most COMPANION_GAIN of its mean deviation; None
    where none does or the history is shorter than COMPANION_RUNS."""
    own = _mean_deviation(history) if len(history) >= COMPANION_RUNS else 0.0
    if own == 0:
        return None
    best: Companion | None = None
    for column, values in sorted(others.items()):
        pairs = [(x, y) for x, y in zip(history, values, strict=False) if y is not None]
        if len(pairs) < COMPANION_RUNS:
            continue
        ys = [y for _, y in pairs]
        mean_y = statistics.fmean(ys)
        var_y = statistics.fmean((y - mean_y) ** 2 for y in ys)
        if var_y == 0:
            continue  # never moves: explains nothing
        mean_x = statistics.fmean(x for x, _ in pairs)
        slope = statistics.fmean((x - mean_x) * (y - mean_y) for x, y in pairs) / var_y
        intercept = mean_x - slope * mean_y
        residuals = tuple(x - (intercept + slope * y) for x, y in pairs)
        gain = _mean_deviation(residuals) / own
        if gain <= COMPANION_GAIN and (best is None or gain < best.gain):
            best = Companion(column, intercept, slope, residuals, gain)
    return best


def unexplained(comp: Companion, sensitivity: float) -> float:
    """The most a batch's residual may be above what its companion predicts (only more nulls block): the residuals'
    median + sensitivity x their scaled MAD, widened to their own upper tail and to MIN_EFFECT_PROPORTION."""
    med = statistics.median(comp.residuals)
    spread = _mad(comp.residuals, med)
    _, hi, _ = _tail(comp.residuals, med, med, med + sensitivity * spread)
    return max(hi, med + MIN_EFFECT_PROPORTION)


# The most columns a null_fraction check reads the history of, looking for a companion (those with the most
# nulls in the batch first): a wide table's every column would be a read each.
COMPANION_COLUMNS = 64


@dataclass(frozen=True)
class Explained:
    """A batch's null fraction against what its companion column's nulls predict (nulls_explained)."""

    comp: Companion
    companion_now: float  # the companion's null fraction in the batch
    value: float
    hi: float  # the most its residual may be (unexplained)

    @property
    def expected(self) -> float:
        return self.comp.expected(self.companion_now)

    @property
    def residual(self) -> float:
        return self.value - self.expected

    @property
    def ok(self) -> bool:
        return self.residual <= self.hi + 1e-12  # fewer nulls than predicted: the plain band's to judge

    def describe(self) -> str:
        return (
            f"nulls beyond those {self.comp.column}'s predict: {_pts(self.residual)} (at most {_pts(self.hi)}, "
            f"from {len(self.comp.residuals)} runs; {self.comp.column} {_pct(self.companion_now)} -> expected "
            f"{_pct(self.expected)})"
        )

    def evidence(self) -> dict[str, Any]:
        return {
            "companion": self.comp.column,
            "companion_value": _short(self.companion_now),
            "expected": _short(self.expected),
            "unexplained": _short(self.residual),
            "unexplained_at_most": _short(self.hi),
            "companion_runs": len(self.comp.residuals),
        }


def nulls_explained(
    column: str,
    value: float,
    batch: Mapping[str, float],
    history: Callable[[str], Sequence[float]],
    sensitivity: float,
) -> Explained | None:
    """`column`'s null fraction `value` against its companion's (see COMPANION_GAIN); `batch`: every column's
    null fraction in the batch; `history`: a column's null fractions over the year's published runs, newest first
    (a History naming its runs, which align the columns). None where no column explains this one's history."""
    mine = history(column)
    runs = getattr(mine, "runs", ())
    if len(mine) < COMPANION_RUNS or len(runs) != len(mine):
        return None
    others: dict[str, list[float | None]] = {}
    candidates = sorted((c for c in batch if c != column), key=lambda c: (-batch[c], c))[:COMPANION_COLUMNS]
    for other in candidates:
        theirs = history(other)
        by_run = dict(zip(getattr(theirs, "runs", ()), theirs, strict=False))
        others[other] = [by_run.get(r) for r in runs]
    comp = companion(list(mine), others)
    if comp is None:
        return None
    return Explained(comp, batch[comp.column], value, unexplained(comp, sensitivity))


# A mean that moved with its column's bounds (metric mean): a fault that moves every value (a unit, an offset, a clock)
# moves the column's minimum and maximum by as much as its mean, where a storm or a busy day moves the mean through its
# tail (late flights) and leaves a bound where it was (the earliest arrival). A mean inside its own band (wide: its
# heavy tail) still blocks when it moved at least SHIFT_PART of the band's sensitivity x spread from its median and a
# bound of the batch (Iceberg's column metrics of the files it added) is outside that bound's own band (its year's runs,
# the same model) on the same side, having moved between SHIFT_SHARE and 1 / SHIFT_SHARE times as far as the mean (a
# storm's latest flight moves the maximum by hundreds of minutes, not by the mean's 20). make bench-gates: a mean moved
# by three of its daily standard deviations was caught 50.5% of the time on New York flights' arrival delays (its band
# reaches the year's storms), now 88.6%, one more real day blocked (1.7% -> 2.0%: a snow day late throughout); a pizza
# place's prices 50.5% -> 70.9% (a menu: the cheapest pizza is 9.75 most days, 10.50 on some, so a move up of less than
# 0.75 leaves the minimum inside its band).
SHIFT_PART = 0.5
SHIFT_SHARE = 0.5


@dataclass(frozen=True)
class Shifted:
    """The bound of a column that moved with its mean (mean_shifted)."""

    bound: str  # "min" or "max"
    value: float
    band: Judged
    mean_move: float

    def describe(self) -> str:
        side = "above" if self.value > self.band.hi else "below"
        return (
            f"the column moved as a whole: its {self.bound} {_num(self.value)} is {side} its band "
            f"[{_num(self.band.lo)}, {_num(self.band.hi)}] (median {_num(self.band.median)}, {self.band.history} runs) "
            f"on the side the mean moved ({self.mean_move:+.4g})"
        )

    def evidence(self) -> dict[str, Any]:
        return {
            "moved_with": self.bound,
            "bound_value": _short(self.value),
            "bound_band": [_short(self.band.lo), _short(self.band.hi)],
        }


def mean_shifted(
    value: float,
    band: Judged,
    bounds: Mapping[str, float | None],
    history: Callable[[str], Sequence[float]],
    sensitivity: float,
) -> Shifted | None:
    """The bound ("min", "max": the batch's in `bounds`) that moved with a mean `value` judged inside `band` (see
    SHIFT_PART); `history`: a bound's values over the year's published runs, newest first. None where the mean
    is near its median or no bound moved with it."""
    move = value - band.median
    if move == 0 or abs(move) < SHIFT_PART * sensitivity * band.spread:
        return None
    for name in ("min", "max"):
        now = bounds.get(name)
        past = history(name)
        if now is None or len(past) < COMPANION_RUNS:
            continue
        b = judge(name, past, sensitivity, memory=past)
        outside = now > b.hi if move > 0 else now < b.lo
        if outside and SHIFT_SHARE <= (now - b.median) / move <= 1 / SHIFT_SHARE:
            return Shifted(name, now, b, move)
    return None


def _pct(v: float) -> str:
    return f"{v * 100:.3g}%"


def _pts(v: float) -> str:
    return f"{v * 100:+.2g} points"


def _mean_deviation(values: Sequence[float]) -> float:
    center = statistics.median(values)
    return statistics.fmean(abs(v - center) for v in values)


def _level_without(values: Sequence[float], value: float, f: Callable[[float], float]) -> float:
    """The median of f over `values` less one occurrence of `value` (all of them where it is not one)."""
    rest = list(values)
    if value in rest and len(rest) > 1:
        rest.remove(value)
    return statistics.median(f(v) for v in rest)


@dataclass(frozen=True)
class CategoryChanges:
    """What a batch's values did against the history's (category_changes): each list sorted, with rows."""

    vanished: list[tuple[str, float]]  # blocks: (value, the rows the batch would have held at its usual share)
    appeared: list[tuple[str, int]]  # blocks: (value, its rows in the batch)
    rare_gone: list[str]  # in each run of the window, too few rows to miss by chance: reported only
    rare_new: list[str]  # new, under APPEAR_SHARE of the batch's rows: reported only

    @property
    def ok(self) -> bool:
        return not self.vanished and not self.appeared


def as_counts(values: Mapping[str, int] | Iterable[str]) -> dict[str, int | None]:
    """A run's values as the history keeps them: value -> rows (None where a run recorded the set alone)."""
    if isinstance(values, Mapping):
        return {str(k): int(v) for k, v in values.items()}
    return dict.fromkeys((str(v) for v in values), None)


def _share(run: Mapping[str, int | None], value: str) -> float:
    """A value's share of a run's rows with a value; infinite where the run recorded its set alone (no rows)."""
    n = run[value]
    return math.inf if n is None else n / sum(x or 0 for x in run.values())


def category_changes(
    batch: Mapping[str, int], window: Sequence[Mapping[str, int | None]], memory: Sequence[Mapping[str, int | None]]
) -> CategoryChanges:
    """A batch's values (value -> rows) against the window's runs' and those of `memory` (the window and older
    runs): see VANISH_EXPECTED and APPEAR_SHARE."""
    total = sum(batch.values())
    always = set.intersection(*(set(w) for w in window)) if window else set()
    vanished, rare_gone = [], []
    for v in sorted(always - set(batch)):
        shares = [_share(w, v) for w in window]
        expected = statistics.median(shares) * total
        if expected >= VANISH_EXPECTED:
            vanished.append((v, expected if math.isfinite(expected) else float(total)))
        else:
            rare_gone.append(v)
    seen = set().union(*(set(m) for m in memory), *(set(w) for w in window))
    appeared, rare_new = [], []
    for v in sorted(set(batch) - seen):
        if batch[v] >= APPEAR_SHARE * total:
            appeared.append((v, batch[v]))
        else:
            rare_new.append(v)
    return CategoryChanges(vanished, appeared, rare_gone, rare_new)


def weekday_of(at: datetime) -> int:
    """The UTC weekday of a run's start (0 Monday .. 6 Sunday); a naive time is UTC (SQLite keeps no zone)."""
    return (at if at.tzinfo is None else at.astimezone(UTC)).weekday()


def day_at(d: date) -> datetime:
    """A batch's day as the metric history keeps it: midnight UTC of that day (its weekday is the day's)."""
    return datetime.combine(d, dtime(0), tzinfo=UTC)


def same_day(lower: Any, upper: Any) -> datetime | None:
    """The day a batch's time column's bounds (Iceberg's, of the files it added) both fall on, as day_at; None
    where they are unknown or on different days (the median day then needs the rows)."""
    days = [v.date() if isinstance(v, datetime) else v for v in (lower, upper)]
    if not all(isinstance(d, date) for d in days) or days[0] != days[1]:
        return None
    return day_at(days[0])


def same_weekday(rows: Iterable[tuple[datetime, float]], weekday: int | None, limit: int) -> list[float]:
    """The first `limit` values of `rows` (newest first) whose run started on `weekday` (None: every run)."""
    out: list[float] = []
    for at, value in rows:
        if len(out) >= limit:
            break
        if weekday is None or weekday_of(at) == weekday:
            out.append(value)
    return out


def as_number(v: Any) -> float | None:
    """A metric value as a float (ints, floats, Decimals); None for what is not a number (strings, dates)."""
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float, Decimal)):
        return float(v)
    return None


_V = TypeVar("_V", float, str)


def bound_text(v: Any) -> str | None:
    """A column bound that is not a number (a date, a time, a string) as `wap diff` shows it, main's and a
    batch's alike; None for numbers, booleans and bytes (binary bounds say nothing to a reader). Strings are
    as Iceberg keeps them: their first 16 characters, an upper bound rounded up past that."""
    if v is None or isinstance(v, (bool, bytes, bytearray)) or as_number(v) is not None:
        return None
    return v if isinstance(v, str) else str(v)


def file_bound_texts(fm: FileMetrics) -> dict[tuple[str, str], str]:
    """The min and max of the columns that are not numbers (dates, times, strings) of data files, as text: what
    an audited run records beside file_metric_values for `wap diff` to show (no anomaly check reads them)."""
    return _bounds(fm, bound_text)


def _bounds(fm: FileMetrics, convert: Callable[[Any], _V | None]) -> dict[tuple[str, str], _V]:
    """("min" | "max", column) -> each bound `convert` keeps (not None)."""
    out: dict[tuple[str, str], _V] = {}
    for name, bounds in (("min", fm.lower), ("max", fm.upper)):
        for col, v in bounds.items():
            kept = convert(v)
            if kept is not None:
                out[(name, col)] = kept
    return out


def file_metric_values(fm: FileMetrics) -> dict[tuple[str, str], float]:
    """What the metric history keeps of data files' column metrics (Iceberg metadata, no scan): per column the
    null fraction, and the min and max of numeric columns. An audited run's added files and each append a
    backfill reads (wapflow.service.metrics) give the same values this way."""
    out: dict[tuple[str, str], float] = {}
    for col, nulls in fm.null_counts.items():
        if nulls is not None and fm.rows:
            out[("null_fraction", col)] = nulls / fm.rows
    out.update(_bounds(fm, as_number))
    return out
