"""make bench-gates' faults are as large as it says (benchmarks/gates_data.py), so that its detection rates are
about faults that matter: on real days of each data set, a volume drop removes >= 40% of the rows, a null spike
reaches >= 5x the usual null fraction and >= 10 points above it, a mean shift moves the mean by 3x the usual
day-to-day spread, copies are >= 20% of the batch, and a category really vanishes or appears. The data sets are
read offline from their packages, one batch per day in date order."""

from __future__ import annotations

import statistics
import sys
from functools import cache
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from gates_data import DATASETS, USUAL_DAYS, DataSet, inject, mean, null_fraction

DAY = 100  # a day with 30 real days before it


@cache
def dataset(name: str) -> DataSet:
    return DATASETS[name]()


def setup(name: str) -> tuple[DataSet, pa.Table, list[pa.Table]]:
    ds = dataset(name)
    return ds, ds.days[DAY][1], [t for _, t in ds.days[:DAY]]


@pytest.mark.parametrize(("name", "days"), [("flights", 365), ("stops", 365), ("pizza", 358)])
def test_a_batch_per_day_in_date_order(name: str, days: int):
    ds = dataset(name)
    dates = [d for d, _ in ds.days]
    assert len(dates) == days and dates == sorted(set(dates))
    assert all(t.num_rows > 0 for _, t in ds.days)
    assert set(ds.faults()) >= {"volume_drop", "duplicates", "category_vanishes", "category_appears"}


@pytest.mark.parametrize("name", list(DATASETS))
def test_a_volume_drop_removes_at_least_40_percent(name: str):
    ds, day, earlier = setup(name)
    copy = inject("volume_drop", ds, day, earlier, np.random.default_rng(0))
    assert copy.num_rows <= 0.6 * day.num_rows and copy.num_rows > 0
    assert copy.schema == day.schema


@pytest.mark.parametrize("name", ["flights", "stops"])
def test_a_null_spike_reaches_5x_usual_and_10_points_more(name: str):
    ds, day, earlier = setup(name)
    col = ds.null_column
    assert col is not None
    usual = statistics.median(null_fraction(t, col) for t in earlier[-USUAL_DAYS:])
    copy = inject("null_spike", ds, day, earlier, np.random.default_rng(0))
    got = null_fraction(copy, col)
    assert got >= 5 * usual and got >= usual + 0.10 and got > null_fraction(day, col)
    assert copy.num_rows == day.num_rows
    others = [c for c in day.column_names if c != col]
    assert copy.select(others).equals(day.select(others))  # only that column changed


@pytest.mark.parametrize("name", ["flights", "pizza"])
def test_a_mean_shift_is_3x_the_usual_day_to_day_spread(name: str):
    ds, day, earlier = setup(name)
    col = ds.mean_column
    assert col is not None
    spread = statistics.stdev(m for t in earlier[-USUAL_DAYS:] if (m := mean(t, col)) is not None)
    copy = inject("mean_shift", ds, day, earlier, np.random.default_rng(0))
    before, after = mean(day, col), mean(copy, col)
    assert before is not None and after is not None and spread > 0
    assert abs(after - before) == pytest.approx(3 * spread)
    assert copy.column(col).null_count == day.column(col).null_count


@pytest.mark.parametrize("name", list(DATASETS))
def test_duplicates_are_at_least_20_percent_of_the_batch(name: str):
    ds, day, earlier = setup(name)
    copy = inject("duplicates", ds, day, earlier, np.random.default_rng(0))
    extra = copy.num_rows - day.num_rows
    assert extra >= 0.2 * copy.num_rows
    assert copy.slice(0, day.num_rows).equals(day)
    # every added row is a copy of one of the day's
    original = {tuple(r.values()) for r in day.to_pylist()}
    assert all(tuple(r.values()) in original for r in copy.slice(day.num_rows).to_pylist())


@pytest.mark.parametrize("name", list(DATASETS))
def test_a_category_vanishes_or_appears(name: str):
    ds, day, earlier = setup(name)
    values = set(pc.unique(day.column(ds.category)).to_pylist())
    gone = inject("category_vanishes", ds, day, earlier, np.random.default_rng(0))
    left = set(pc.unique(gone.column(ds.category)).to_pylist())
    assert len(values - left) == 1 and left < values
    (vanished,) = values - left
    assert gone.num_rows == day.num_rows - pc.sum(pc.equal(day.column(ds.category), vanished)).as_py()

    new = inject("category_appears", ds, day, earlier, np.random.default_rng(0))
    assert ds.new_category not in values
    share = pc.sum(pc.equal(new.column(ds.category), ds.new_category)).as_py() / new.num_rows
    assert share >= 0.05 and new.num_rows == day.num_rows
