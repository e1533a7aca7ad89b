"""Anomaly checks without a JVM: the robust band (median ± sensitivity x scaled MAD, with its floor), the
verdicts of `anomaly`, `volume` and `schema_change` over a given history, and what a declaration may not say.
The checks over real runs: tests/spark/test_anomaly.py."""

from __future__ import annotations

import statistics
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from wapflow import checks as C
from wapflow.audit.anomaly import FLOOR_ABSOLUTE, MAD_SCALE, band, same_weekday, weekday_of
from wapflow.audit.batch_checks import schema_diff
from wapflow.audit.checktype import AuditContext, Compiled
from wapflow.audit.spec import CheckType
from wapflow.errors import EXIT_USAGE, ConfigError
from wapflow.runs.metrics import MetricHistory
from wapflow.runs.store import RunRecord, RunStore

SATURDAY = datetime(2026, 11, 28, 6, 0, tzinfo=UTC)  # a Saturday, 06:00 UTC


def compiled(chk: CheckType, mapping: dict[str, str] | None = None) -> Compiled:
    """The check as the engine holds it; these verdicts read no Spark column (applies/fail are unused)."""
    return Compiled(0, chk, None, None, None, "", mapping or {})  # type: ignore[arg-type]


def test_the_band_is_median_plus_minus_sensitivity_times_scaled_mad() -> None:
    history = [100, 110, 90, 102, 98, 108, 92]
    b = band(history, 3.0)
    med = statistics.median(history)
    mad = MAD_SCALE * statistics.median(abs(x - med) for x in history)
    assert (b.median, b.history) == (100, 7)
    assert b.mad == pytest.approx(mad) and b.spread == pytest.approx(mad)
    assert (b.lo, b.hi) == (pytest.approx(100 - 3 * mad), pytest.approx(100 + 3 * mad))
    assert b.contains(130) and not b.contains(140) and not b.contains(10)


def test_one_outlier_in_the_history_barely_moves_the_band() -> None:
    calm = band([200, 198, 202, 201, 199, 200, 203, 197], 3.0)
    spiked = band([200, 198, 202, 201, 199, 200, 203, 5000], 3.0)  # a mean and a stdev would explode
    assert spiked.median == pytest.approx(calm.median, abs=1)
    assert spiked.hi < 260 and not spiked.contains(20)


def test_a_constant_history_allows_the_floor_not_nothing() -> None:
    rows = band([200] * 10, 3.0)
    assert rows.mad == 0 and rows.spread == pytest.approx(10)  # 5% of the median
    assert rows.contains(225) and not rows.contains(240)
    nulls = band([0.0] * 10, 3.0)
    assert nulls.spread == FLOOR_ABSOLUTE and nulls.contains(0.002) and not nulls.contains(0.3)


def test_a_band_needs_history() -> None:
    with pytest.raises(ValueError, match="at least one value"):
        band([], 3.0)


def history_of(values: dict[tuple[str, str], list[float]]) -> AuditContext:
    """An audit context whose metric history holds `values` (newest first) per (metric, column)."""
    return AuditContext(metric_history=lambda m, col, n, weekday: values.get((m, col), [])[:n])


def test_anomaly_reports_value_band_and_history_size() -> None:
    chk = C.anomaly("null_fraction", "passenger_count", min_history=5)
    c = compiled(chk, {"passenger_count": "Passenger_Count"})
    ctx = history_of({("null_fraction", "passenger_count"): [0.01, 0.012, 0.011, 0.009, 0.01, 0.013]})
    spike = chk.verdict(c, {"c0_f": 30, "c0_n": 100}, 100, ctx)
    assert not spike.ok
    assert spike.observed["value"] == 0.3 and spike.observed["history"] == 6
    lo, hi = spike.observed["band"]
    assert lo < 0.011 < hi < 0.3
    assert "over the last 6 published runs" in c.threshold
    normal = chk.verdict(c, {"c0_f": 1, "c0_n": 100}, 100, ctx)
    assert normal.ok and chk.measured(c, {"c0_f": 1, "c0_n": 100}, 100) == {("null_fraction", "passenger_count"): 0.01}


def test_the_window_limits_the_history_used() -> None:
    chk = C.anomaly("mean", "fare", min_history=3, window=3)
    c = compiled(chk, {"fare": "fare"})
    ctx = history_of({("mean", "fare"): [10.0, 10.5, 9.5, 1000.0, 1000.0, 1000.0, 1000.0]})
    v = chk.verdict(c, {"c0_s": 1020, "c0_c": 100}, 100, ctx)  # a mean is a sum over a non-null count
    assert v.ok and v.observed["history"] == 3 and v.observed["value"] == 10.2


@pytest.mark.parametrize("on_short, status_ok", [("pass", True), ("warn", False)])
def test_short_history_passes_or_warns_and_says_so(on_short: Any, status_ok: bool) -> None:
    chk = C.anomaly("row_count", min_history=7, on_short_history=on_short)
    c = compiled(chk)
    v = chk.verdict(c, {"c0_n": 3}, 3, history_of({("row_count", ""): [200.0, 210.0]}))
    assert v.ok is status_ok and v.warn_only  # never blocks, whatever the severity
    assert c.threshold.startswith("2 of 7 runs of history")
    assert v.observed == {"value": 3.0, "history": 2, "min_history": 7}


def test_volume_is_the_row_count_band_over_icebergs_history() -> None:
    chk = C.volume(runs=10)
    c = compiled(chk)
    rows = [200, 190, 210, 205, 195, 200, 198, 202, 201, 199, 5, 5]
    ctx = AuditContext(history=lambda: [(SATURDAY - timedelta(days=d + 1), n) for d, n in enumerate(rows)])
    drop = chk.verdict(c, {}, 20, ctx)
    assert not drop.ok and drop.observed["value"] == 20 and drop.observed["history"] == 10
    assert "median 200" in c.threshold
    assert chk.verdict(c, {}, 204, ctx).ok
    fixed = C.volume(runs=10, tolerance=0.5)  # the fixed band of earlier releases stays
    assert fixed.verdict(compiled(fixed), {}, 120, ctx).ok and not fixed.verdict(compiled(fixed), {}, 90, ctx).ok


@pytest.mark.parametrize("chk", [C.anomaly("row_count"), C.volume()], ids=["anomaly", "volume"])
def test_a_short_history_warns_by_default_never_a_silent_pass(chk: Any) -> None:
    c = compiled(chk)
    two = [(SATURDAY - timedelta(days=d + 1), 200.0) for d in range(2)]
    ctx = AuditContext(history=lambda: two, metric_history=lambda *_: [200.0, 200.0])
    v = chk.verdict(c, {"c0_n": 200}, 200, ctx)
    assert not v.ok and v.warn_only  # a warning (a table with review = "on_warn" holds it), never a block
    assert c.threshold.startswith("2 of ") and c.threshold.endswith("runs of history: warns until then")


def test_volume_judges_the_row_count_on_the_multiplicative_band() -> None:
    # Days of 50, 100 and 200 rows: the old median ± 3 MAD band reached below zero and let any drop through; the
    # multiplicative band (as anomaly's on row_count) has a floor above zero.
    rows = [50, 100, 200, 100, 50, 200, 100, 100, 50, 200]
    ctx = AuditContext(history=lambda: [(SATURDAY - timedelta(days=d + 1), n) for d, n in enumerate(rows)])
    chk = C.volume(runs=10)
    c = compiled(chk)
    gone = chk.verdict(c, {}, 2, ctx)
    assert not gone.ok and not gone.warn_only and gone.observed["model"] == "log"
    assert "multiplicative band" in c.threshold and 2 < gone.observed["band"][0] < 10
    assert chk.verdict(c, {}, 400, ctx).ok  # twice the median: within this table's usual swings
    cold = C.volume(runs=10, min_history=1)  # two runs of history never block, whatever min_history says
    two = AuditContext(history=lambda: [(SATURDAY - timedelta(days=d + 1), 200) for d in range(2)])
    v = cold.verdict(compiled(cold), {}, 2000, two)
    assert not v.ok and v.warn_only


def test_schema_change_names_new_dropped_and_retyped_columns() -> None:
    last = {"id": "bigint", "fare": "double", "zone": "string"}
    now = {"id": "bigint", "fare": "decimal(10,2)", "tip": "double"}
    assert schema_diff(last, now) == [
        ("added", "new column tip (double)"),
        ("dropped", "dropped column zone (string)"),
        ("retyped", "column fare double -> decimal(10,2)"),
    ]
    chk = C.schema_change(allow=["added"])
    c = compiled(chk)
    ctx = AuditContext(last_schema=lambda: last)
    only_added = chk.verdict(c, {"c0_v": {**last, "tip": "double"}}, 1, ctx)
    assert only_added.ok and only_added.observed == "new column tip (double)"
    assert not chk.verdict(c, {"c0_v": now}, 1, ctx).ok
    first = chk.verdict(c, {"c0_v": now}, 1, AuditContext(last_schema=lambda: None))
    assert first.ok and "no published run" in c.threshold


@pytest.mark.parametrize(
    "decl, words",
    [
        ({"metric": "row_count", "column": "fare"}, "takes no column"),
        ({"metric": "mean"}, "needs a column"),
        ({"metric": "mean", "column": "fare", "filter": "fare > 0"}, "takes no filter"),
        ({"metric": "median", "column": "fare"}, "'row_count', 'duplicate_fraction'"),
        ({"metric": "row_count", "sensitivity": 0}, "greater than 0"),
    ],
)
def test_a_declaration_that_cannot_work_is_refused(decl: dict[str, Any], words: str) -> None:
    from wapflow.config import parse_config

    with pytest.raises(ConfigError, match=words) as e:
        parse_config({"tables": {"nyc.trips": {"checks": [{"check": "anomaly", **decl}]}}})
    assert e.value.exit_code == EXIT_USAGE


def weeks_of_runs(tmp_path: Path, weeks: int) -> MetricHistory:
    """`weeks` weeks of daily published runs of nyc.trips, newest the Friday before SATURDAY: 1000 rows on
    weekdays, 100 on Saturdays and Sundays, and a run's distinct vendor count of 50 every day."""
    store = RunStore(f"sqlite:///{tmp_path / 'runs.db'}")
    history = MetricHistory(store.engine)
    for day in range(1, 7 * weeks + 1):
        at = SATURDAY - timedelta(days=day)
        rid = f"r{day:03d}"
        store.save(RunRecord(run_id=rid, table_name="nyc.trips", status="published", started_at=at))
        rows = 100.0 + day if at.weekday() >= 5 else 1000.0 + day
        history.record(rid, "nyc.trips", at, {("row_count", ""): rows, ("distinct", "vendor_id"): 50.0})
    return history


def test_the_weekday_is_that_of_the_runs_start_in_utc() -> None:
    late_friday_in_new_york = datetime(2026, 11, 27, 21, 30, tzinfo=ZoneInfo("America/New_York"))
    assert weekday_of(datetime(2026, 11, 28, 1, 30, tzinfo=UTC)) == 5  # Saturday
    assert weekday_of(late_friday_in_new_york) == 5  # Friday 21:30 in New York is Saturday 02:30 UTC
    assert weekday_of(datetime(2026, 11, 28, 1, 30)) == 5  # naive: UTC, as SQLite gives it back
    rows = [(SATURDAY - timedelta(days=d), float(d)) for d in range(1, 30)]
    assert same_weekday(rows, 5, 3) == [7.0, 14.0, 21.0]  # the last 3 Saturdays, newest first
    assert same_weekday(rows, None, 3) == [1.0, 2.0, 3.0]


def test_weekly_seasonality_makes_the_band_of_the_same_weekday_only(tmp_path: Path) -> None:
    history = weeks_of_runs(tmp_path, 8)
    assert history.published("nyc.trips", "row_count", "", 3, weekday=5) == [107.0, 114.0, 121.0]
    ctx = AuditContext(
        metric_history=lambda m, col, n, weekday: history.published("nyc.trips", m, col, n, weekday),
        run_at=SATURDAY,
    )
    weekly = C.anomaly("row_count", min_history=6, seasonality="weekly")
    c = compiled(weekly)
    small_saturday = weekly.verdict(c, {"c0_n": 110}, 110, ctx)
    assert small_saturday.ok, c.threshold
    assert (
        small_saturday.observed["history"] == 8
        and small_saturday.observed["seasonality"] == "same weekday: 8 Saturdays"
    )
    assert "same weekday: 8 Saturdays" in c.threshold and "median 131" in c.threshold
    assert not weekly.verdict(c, {"c0_n": 1040}, 1040, ctx).ok  # a weekday's volume on a Saturday
    plain = C.anomaly("row_count", min_history=6, seasonality="none")  # every run: the weekdays' 1000s make the median
    c = compiled(plain)
    # Weekends are 8 of its 30 runs: a heavy tail of the history, which its band reaches (not beyond).
    weekend = plain.verdict(c, {"c0_n": 110}, 110, ctx)
    assert weekend.ok and weekend.observed["median"] > 1000 and "seasonality" not in weekend.observed
    assert "heavy tail" in c.threshold and "same weekday" not in c.threshold
    assert not plain.verdict(c, {"c0_n": 30}, 30, ctx).ok  # below the weekends by half their distance
    monday = AuditContext(metric_history=ctx.metric_history, run_at=SATURDAY + timedelta(days=2))
    assert weekly.verdict(compiled(weekly), {"c0_n": 1030}, 1030, monday).ok


def test_too_little_same_weekday_history_skips_the_check_and_says_so(tmp_path: Path) -> None:
    history = weeks_of_runs(tmp_path, 2)  # 14 runs, but only 2 Saturdays
    ctx = AuditContext(
        metric_history=lambda m, col, n, weekday: history.published("nyc.trips", m, col, n, weekday),
        run_at=SATURDAY,
    )
    weekly = C.anomaly("distinct", "vendor_id", min_history=4, seasonality="weekly", on_short_history="warn")
    c = compiled(weekly, {"vendor_id": "vendor_id"})
    v = weekly.verdict(c, {"c0_v": 3}, 100, ctx)
    assert not v.ok and v.warn_only  # warns, never blocks: no fallback to the other days' history
    assert c.threshold == "2 of 4 runs of history (same weekday: 2 Saturdays): warns until then"
    assert v.observed == {"value": 3.0, "history": 2, "min_history": 4, "seasonality": "same weekday: 2 Saturdays"}
    plain = C.anomaly("distinct", "vendor_id", min_history=4)  # without seasonality the 14 runs are enough
    c = compiled(plain, {"vendor_id": "vendor_id"})
    collapsed = plain.verdict(c, {"c0_v": 3}, 100, ctx)
    assert not collapsed.ok and not collapsed.warn_only and collapsed.observed["history"] == 14
    assert plain.measured(c, {"c0_v": 49}, 100) == {("distinct", "vendor_id"): 49.0}


def test_volume_with_weekly_seasonality_uses_icebergs_runs_on_the_same_weekday() -> None:
    # Four weeks of daily commits: 40 rows on Saturdays, 400 on the other days.
    days = [SATURDAY - timedelta(days=d, hours=3) for d in range(28)]
    ctx = AuditContext(history=lambda: [(at, 40 + d if at.weekday() == 5 else 400 + d) for d, at in enumerate(days)])
    weekly = C.volume(runs=10, min_history=3, seasonality="weekly")
    c = compiled(weekly)
    saturday = weekly.verdict(c, {}, 45, AuditContext(history=ctx.history, run_at=SATURDAY))
    assert saturday.ok and saturday.observed["history"] == 4, c.threshold
    assert saturday.observed["seasonality"] == "same weekday: 4 Saturdays" and weekly.default_name().endswith(
        "on the same weekday)"
    )
    plain = C.volume(runs=10, min_history=3, seasonality="none")
    assert not plain.verdict(compiled(plain), {}, 45, AuditContext(history=ctx.history, run_at=SATURDAY)).ok
    auto = C.volume(runs=10, min_history=3)  # the default finds the rhythm in the history: Saturdays by Saturdays
    assert auto.verdict(compiled(auto), {}, 45, AuditContext(history=ctx.history, run_at=SATURDAY)).ok
    fixed = C.volume(runs=10, min_history=5, tolerance=0.5, seasonality="weekly")
    c = compiled(fixed)
    short = fixed.verdict(c, {}, 45, AuditContext(history=ctx.history, run_at=SATURDAY))
    assert not short.ok and short.warn_only  # warns by default (never a silent pass), never blocks
    assert c.threshold == "4 of 5 runs of history (same weekday: 4 Saturdays): warns until then"


def test_seasonality_is_weekly_or_none() -> None:
    from wapflow.config import parse_config

    with pytest.raises(ConfigError, match="'none' or 'weekly'"):
        parse_config(
            {"tables": {"t.x": {"checks": [{"check": "anomaly", "metric": "row_count", "seasonality": "daily"}]}}}
        )


@pytest.mark.parametrize("seasonality", ["weekly", "none"])
def test_the_quality_trend_draws_the_band_the_check_uses(tmp_path: Path, seasonality: str) -> None:
    """The dashboard's band for a run is the one the table's check judged that run by: its verdict on the same
    history (the published runs before it) agrees with the trend's point, and so do the band's edges."""
    from wapflow.config import parse_config
    from wapflow.runs.ledger import Ledger
    from wapflow.service.dashboard import Sources
    from wapflow.service.review_queue import trend

    weeks_of_runs(tmp_path, 12)  # 84 runs: the band's tails from the year's runs (60 or more) on every day
    store = RunStore(f"sqlite:///{tmp_path / 'runs.db'}")
    check = {"check": "anomaly", "metric": "row_count", "min_history": 6, "seasonality": seasonality}
    cfg = parse_config({"tables": {"nyc.trips": {"checks": [check]}}})
    doc = trend(Sources(cfg, store, Ledger(store.engine), None, "no catalog here"), "nyc.trips")
    [saturday] = [p for p in doc["points"] if p["run_id"] == "r007"]  # the last Saturday: 107 rows
    at = SATURDAY - timedelta(days=7)
    chk = C.anomaly("row_count", min_history=6, seasonality=seasonality)
    ctx = AuditContext(
        metric_history=lambda m, col, n, weekday: [
            v for t, v in _published_before(store, at) if weekday is None or weekday_of(t) == weekday
        ][:n],
        run_at=at,
    )
    c = compiled(chk)
    verdict = chk.verdict(c, {f"{c.key}_n": 107}, 107, ctx)
    assert saturday["value"] == 107 and saturday["outside"] is (not verdict.ok)
    band = verdict.observed["band"]
    assert (saturday["band_low"], saturday["band_high"]) == pytest.approx((band[0], band[1]), rel=1e-3)
    assert (saturday["band_high"] < 500) is (seasonality == "weekly")  # Saturdays ~100 rows, weekdays ~1000
    assert ("on the same weekday" in doc["band"]) is (seasonality == "weekly")


def _published_before(store: RunStore, at: datetime) -> list[tuple[datetime, float]]:
    """(run time, row count) of the published runs before `at`, newest first, as the metric history holds them."""
    rows = MetricHistory(store.engine).read("nyc.trips", metric="row_count", runs=1000)
    out = [(r.run_at.replace(tzinfo=UTC) if r.run_at.tzinfo is None else r.run_at, r.value) for r in rows]
    return sorted(((t, v) for t, v in out if t < at and v is not None), reverse=True)


def test_a_table_pyiceberg_wrote_gets_per_column_history_and_its_band_without_a_jvm(tmp_path: Path) -> None:
    """Issue 23: a table adopted mid-life (written by PyIceberg, not wapflow) gets from `--backfill` each
    append's row count, null fractions, min and max from its files' metadata, and an anomaly check then has a
    band; a wapflow run that recorded its own metrics keeps them, and a second backfill records nothing."""
    import pyarrow as pa

    from wapflow.config import parse_config
    from wapflow.lakehouse.lakehouse import Lakehouse
    from wapflow.lakehouse.model import RUN_ID_PROP
    from wapflow.lakehouse.pyiceberg_client import open_catalog
    from wapflow.service.metrics import backfill_metrics

    (tmp_path / "lake").mkdir()
    cfg = parse_config({"lakehouse": {"warehouse": str(tmp_path / "lake"), "catalog_name": "lake"}})
    cat = open_catalog(cfg, why="the other writer")
    cat.create_namespace("nyc")
    days = [(100, 2, 40.0), (104, 3, 41.5), (98, 2, 39.0), (102, 1, 44.0)]  # rows, null tips, top fare

    def day(rows: int, nulls: int, top: float) -> pa.Table:
        return pa.table(
            {
                "trip_id": pa.array(range(rows), pa.int64()),
                "fare": pa.array([top - i % 7 for i in range(rows)], pa.float64()),
                "tip": pa.array([None] * nulls + [1.5] * (rows - nulls), pa.float64()),
            }
        )

    tbl = cat.create_table("nyc.trips", schema=day(1, 0, 1.0).schema)
    for i, (rows, nulls, top) in enumerate(days):  # the last append is a wapflow run's, audited by itself
        tbl.append(day(rows, nulls, top), snapshot_properties={RUN_ID_PROP: "r-own"} if i == 3 else {})
    lh = Lakehouse(cfg)
    history = MetricHistory(lh.store.engine)
    own = {("row_count", ""): 102.0, ("null_fraction", "tip"): 0.01, ("schema", ""): "{}"}
    history.record("r-own", "nyc.trips", datetime.now(UTC), own)

    assert backfill_metrics(lh, "nyc.trips") == {"table": "nyc.trips", "recorded": 3, "already": 1, "columns": 3}
    assert history.published("nyc.trips", "max", "fare", 10) == [39.0, 41.5, 40.0]  # newest first
    assert history.published("nyc.trips", "min", "trip_id", 10) == [0.0, 0.0, 0.0]
    assert sorted(history.published("nyc.trips", "null_fraction", "tip", 10)) == sorted(
        [0.01, 2 / 98, 3 / 104, 2 / 100]
    )
    assert history.of_run("r-own", "nyc.trips") == own  # what the run recorded itself is kept as it was
    again = backfill_metrics(lh, "nyc.trips")
    assert again == {"table": "nyc.trips", "recorded": 0, "already": 4, "columns": 0}

    ctx = AuditContext(metric_history=lambda m, col, n, weekday: history.published("nyc.trips", m, col, n, weekday))
    chk = C.anomaly("null_fraction", "tip", min_history=4)
    c = compiled(chk, {"tip": "tip"})
    spike = chk.verdict(c, {"c0_f": 30, "c0_n": 100}, 100, ctx)
    assert not spike.ok and spike.observed["history"] == 4
    lo, hi = spike.observed["band"]
    assert lo < 0.02 < hi < 0.3
    assert chk.verdict(c, {"c0_f": 2, "c0_n": 100}, 100, ctx).ok


def test_the_quality_trend_draws_the_band_each_run_was_judged_by(tmp_path: Path) -> None:
    """Issue 47: for a table with a weekly cycle (Saturdays half a weekday's rows), each run's point on the trend
    has the band its audit recorded (seasonality "auto": a per-weekday band once 60 runs exist), not one worked
    out again without the season: a Saturday of 800 rows, inside the plain band, was blocked by the Saturdays'
    band and shows outside it. A run that recorded no result of the check has its band recomputed, and says so."""
    from wapflow.audit.anomaly import MODEL_WORDS, judge
    from wapflow.audit.checks import _result  # how an audit makes a check's result, which the run store keeps
    from wapflow.config import parse_config
    from wapflow.runs.ledger import Ledger
    from wapflow.service.dashboard import Sources
    from wapflow.service.review_queue import trend

    store = RunStore(f"sqlite:///{tmp_path / 'runs.db'}")
    history = MetricHistory(store.engine)
    check = {"check": "anomaly", "metric": "row_count"}  # seasonality "auto", min_history 7, window 30
    cfg = parse_config({"tables": {"nyc.trips": {"checks": [check]}}})
    [chk] = cfg.table("nyc.trips").checks
    backfilled, unrecorded = 14, "r030"  # the first two weeks recorded by a backfill; one later run lost its result
    for back in range(70, -1, -1):  # 10 weeks of daily runs, the last SATURDAY itself
        at = SATURDAY - timedelta(days=back)
        rid = f"r{back:03d}"
        noise = (back * 37) % 41 - 20
        rows = 800 if back == 0 else (500 + noise // 2 if at.weekday() == 5 else 1000 + noise)
        checks, status = [], "published"
        if 70 - back >= backfilled and rid != unrecorded:  # audited as a run is: on the published runs before it
            ctx = AuditContext(
                metric_history=lambda m, col, n, weekday: history.published("nyc.trips", m, col, n, weekday),
                run_at=at,
            )
            c = compiled(chk)
            result = _result(c, {f"{c.key}_n": rows}, rows, ctx)
            checks, status = [result.to_dict()], "published" if result.status != "failed" else "blocked"
        store.save(RunRecord(run_id=rid, table_name="nyc.trips", status=status, started_at=at, checks=checks))
        history.record(rid, "nyc.trips", at, {("row_count", ""): float(rows)})
    assert store.get("r000").status == "blocked"  # type: ignore[union-attr]

    def published_before(at: datetime) -> list[float]:
        """The row counts of the runs published before `at`, newest first (two early Saturdays were blocked)."""
        rows = MetricHistory(store.engine).read("nyc.trips", metric="row_count", runs=1000)
        return [r.value for r in rows if r.status == "published" and r.run_at.replace(tzinfo=UTC) < at]

    doc = trend(Sources(cfg, store, Ledger(store.engine), None, "no catalog here"), "nyc.trips")
    points = {p["run_id"]: p for p in doc["points"]}
    assert len(points) == 50 and "r069" not in points  # the last 50 runs

    saturday = points["r000"]
    [recorded] = store.get("r000").checks  # type: ignore[union-attr]
    evidence = recorded["observed"]
    assert evidence["seasonality"].startswith("per-weekday band: Saturdays' level")
    assert (saturday["band_low"], saturday["band_high"]) == tuple(evidence["band"])
    assert saturday["median"] == evidence["median"] and saturday["band_from"] == "as judged"
    assert saturday["model"] == MODEL_WORDS["log"] and saturday["seasonality"] == evidence["seasonality"]
    assert saturday["value"] == 800 and saturday["outside"] and saturday["band_high"] < 800
    # The plain band the trend used to draw for it, over the 30 published runs before it, holds 800.
    before = published_before(SATURDAY)
    plain = judge("row_count", before[:30], 3.0, memory=before[:365])
    assert plain.contains(800) and plain.hi > 1.5 * saturday["band_high"]

    lost = points[unrecorded]
    at = SATURDAY - timedelta(days=30)
    before = published_before(at)
    again = judge("row_count", before[:30], 3.0, memory=before[:365] if len(before) >= 30 else [])
    assert lost["band_from"] == "recomputed" and lost["model"] == MODEL_WORDS["log"]
    assert (lost["band_low"], lost["band_high"]) == pytest.approx((again.lo, again.hi), rel=1e-5)  # 6 digits
    assert {p["band_from"] for r, p in points.items() if r != unrecorded} == {"as judged"}
    assert doc["recomputed"] == 1 and doc["model"] == "multiplicative band"
    assert doc["band"].startswith("the band each run was judged by, as its audit recorded it (anomaly(row_count): ")
    assert "the latest run's band: per-weekday band: Saturdays' level" in doc["band"]
    assert "1 run(s) recorded no result of anomaly(row_count)" in doc["band"]


def test_a_fixed_tolerance_volume_check_records_its_band_for_the_report_and_the_trend(tmp_path: Path) -> None:
    """A `volume` check with `tolerance` records the band it judged by (edges, median, runs), as a model's band
    is: the report says it in words, and the dashboard's trend draws it "as judged" instead of recomputing a
    multiplicative band the check never used."""
    from wapflow.audit.checks import _result
    from wapflow.config import parse_config
    from wapflow.runs.ledger import Ledger
    from wapflow.service.dashboard import Sources
    from wapflow.service.render import observed
    from wapflow.service.review_queue import trend

    store = RunStore(f"sqlite:///{tmp_path / 'runs.db'}")
    history = MetricHistory(store.engine)
    cfg = parse_config({"tables": {"nyc.trips": {"checks": [{"check": "volume", "runs": 5, "tolerance": 0.5}]}}})
    [chk] = cfg.table("nyc.trips").checks
    done: list[tuple[datetime, float]] = []  # the published runs, newest first (Iceberg's history)
    for i, rows in enumerate([100, 110, 90, 105, 95, 100, 140, 40, 120]):
        at = SATURDAY + timedelta(days=i)
        c = compiled(chk)
        result = _result(c, {}, rows, AuditContext(history=lambda: list(done), run_at=at))
        status = "published" if result.status != "failed" else "blocked"
        store.save(
            RunRecord(run_id=f"r{i}", table_name="nyc.trips", status=status, started_at=at, checks=[result.to_dict()])
        )
        history.record(f"r{i}", "nyc.trips", at, {("row_count", ""): float(rows)})
        if status == "published":
            done.insert(0, (at, float(rows)))
    seventh = store.get("r7").checks[0]  # type: ignore[union-attr]  # 40 rows against 5 runs of median 100
    assert seventh["status"] == "failed" and seventh["observed"]["band"] == [50.0, 150.0]
    assert observed(seventh["observed"]) == "value 40, band [50, 150], median 100, 5 runs"
    doc = trend(Sources(cfg, store, Ledger(store.engine), None, "no catalog here"), "nyc.trips")
    points = {p["run_id"]: p for p in doc["points"]}
    assert (points["r7"]["band_low"], points["r7"]["band_high"]) == (50.0, 150.0) and points["r7"]["outside"]
    assert points["r8"]["band_from"] == "as judged" and not points["r8"]["outside"]
    assert doc["recomputed"] == 0
