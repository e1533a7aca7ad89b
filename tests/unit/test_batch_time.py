"""Seasonality keyed on the batch's own day (a table's time_column), without a JVM: the metric history keys a
run on its batch's day where it recorded one, so a backfill (every run started on one afternoon) or a late
delivery is judged by its data's day. Synthetic histories with known answers; through real runs:
tests/spark/test_bench_gates.py."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from wapflow import checks as C
from wapflow.audit.anomaly import day_at, same_day
from wapflow.audit.checktype import AuditContext, Compiled
from wapflow.audit.spec import CheckType
from wapflow.config import TableConfig
from wapflow.runs.metrics import MetricHistory
from wapflow.runs.store import RunRecord, RunStore
from wapflow.service import render

BACKFILL = datetime(2026, 11, 30, 14, 0, tzinfo=UTC)  # a Monday afternoon: every run of the backfill starts then
FIRST = date(2013, 1, 7)  # a Monday: the first day of the data


def compiled(chk: CheckType) -> Compiled:
    return Compiled(0, chk, None, None, None, "", {c: c for c in chk.columns()})  # type: ignore[arg-type]


def backfill(tmp_path: Path, weeks: int) -> MetricHistory:
    """`weeks` weeks of daily batches run one a minute on one Monday, each recorded with its own day: 1000 rows
    on weekdays (± a little), 600 on Saturdays and Sundays."""
    store = RunStore(f"sqlite:///{tmp_path / 'runs.db'}")
    history = MetricHistory(store.engine)
    for i in range(7 * weeks):
        day = FIRST + timedelta(days=i)
        at = BACKFILL + timedelta(minutes=i)
        rid = f"r{i:03d}"
        store.save(RunRecord(run_id=rid, table_name="t.daily", status="published", started_at=at))
        rows = (600.0 if day.weekday() >= 5 else 1000.0) + (i % 5)
        history.record(rid, "t.daily", at, {("row_count", ""): rows}, batch_at=day_at(day))
    return history


def test_a_batchs_day_is_the_one_its_time_bounds_fall_on() -> None:
    assert same_day(date(2013, 7, 4), date(2013, 7, 4)) == datetime(2013, 7, 4, tzinfo=UTC)
    assert same_day(datetime(2013, 7, 4, 0, 5), datetime(2013, 7, 4, 23, 55)) == datetime(2013, 7, 4, tzinfo=UTC)
    assert same_day(date(2013, 7, 3), date(2013, 7, 4)) is None  # a late row: the median day needs the rows
    assert same_day(None, date(2013, 7, 4)) is None and same_day("2013-07-04", "2013-07-04") is None
    assert day_at(date(2013, 7, 6)).weekday() == 5  # a Saturday stays a Saturday


def test_the_weekly_history_is_keyed_on_the_batchs_day_not_the_runs_start(tmp_path: Path) -> None:
    history = backfill(tmp_path, 4)
    # Every run started on a Monday; the Saturdays are those whose batch is of a Saturday.
    saturdays = history.published("t.daily", "row_count", "", 10, weekday=5)
    assert saturdays == [600.0 + (i % 5) for i in (26, 19, 12, 5)]
    assert history.published("t.daily", "row_count", "", 10, weekday=0)[:2] == [1000.0 + (21 % 5), 1000.0 + 14 % 5]
    rows = history.read("t.daily", metric="row_count", runs=3)
    assert [r.batch_at.date() if r.batch_at else None for r in rows] == [
        FIRST + timedelta(days=d) for d in (27, 26, 25)
    ]


def test_a_backfilled_saturday_is_judged_against_saturdays(tmp_path: Path) -> None:
    history = backfill(tmp_path, 8)

    def ctx(batch_at: datetime | None) -> AuditContext:
        return AuditContext(
            metric_history=lambda m, col, n, weekday: history.published("t.daily", m, col, n, weekday),
            run_at=BACKFILL + timedelta(hours=1),  # a Monday, like every run of the backfill
            batch_at=batch_at,
        )

    saturday = day_at(FIRST + timedelta(days=7 * 8 + 5))
    wednesday = day_at(FIRST + timedelta(days=7 * 8 + 2))
    for seasonality in ("weekly", "auto"):
        chk = C.anomaly("row_count", seasonality=seasonality)
        c = compiled(chk)
        v = chk.verdict(c, {"c0_n": 600}, 600, ctx(saturday))
        assert v.ok, (seasonality, c.threshold)
        assert v.observed["day"] == f"{saturday:%Y-%m-%d}, a Saturday: the batch's own", v.observed
        assert "judged by the batch's day" in c.threshold
        assert render.observed(v.observed).endswith(f"judged by the batch's day, {saturday:%Y-%m-%d}, a Saturday")
        # The same 600 rows on a Wednesday's batch, or a Saturday judged by the run's start (a Monday), block.
        assert not chk.verdict(c, {"c0_n": 600}, 600, ctx(wednesday)).ok, seasonality
        assert not chk.verdict(c, {"c0_n": 600}, 600, ctx(None)).ok, seasonality
        assert chk.verdict(c, {"c0_n": 1002}, 1002, ctx(wednesday)).ok, seasonality


def test_a_table_names_its_time_column() -> None:
    assert TableConfig.model_validate({"time_column": "day"}).time_column == "day"
    assert TableConfig.model_validate({}).time_column is None
