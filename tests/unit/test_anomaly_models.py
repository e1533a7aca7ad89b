"""The anomaly check's models (wapflow.audit.anomaly.judge) against synthetic histories with known answers: a
multiplicative band for counts, a rate band with its sample size for proportions, the history's own quantiles
for heavy tails, the least change per kind, and a cold start that warns instead of blocking."""

from __future__ import annotations

import math
import random
import statistics
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from wapflow import checks as C
from wapflow.audit import anomaly as A
from wapflow.audit.anomaly import (
    COMPANION_RUNS,
    MAD_SCALE,
    TAIL_MARGIN_SHORT,
    TAIL_QUANTILE,
    Explained,
    History,
    companion,
    judge,
    mean_shifted,
    nulls_explained,
)
from wapflow.audit.checktype import AuditContext, Compiled, Verdict
from wapflow.audit.metrics import FileMetrics
from wapflow.audit.spec import CheckType
from wapflow.runs.metrics import MetricHistory
from wapflow.runs.store import APPROVED, RunRecord, RunStore
from wapflow.service.render import observed


def compiled(chk: CheckType) -> Compiled:
    return Compiled(0, chk, None, None, None, "", {c: c for c in chk.columns()})  # type: ignore[arg-type]


def test_counts_are_judged_by_ratio_the_same_at_any_scale() -> None:
    small = [90.0, 110.0, 80.0, 120.0, 95.0, 105.0, 100.0, 100.0]
    big = [v * 1000 for v in small]
    b, B = judge("row_count", small, 3.0), judge("row_count", big, 3.0)
    assert b.model == "log" and (B.lo, B.hi) == (pytest.approx(b.lo * 1000), pytest.approx(b.hi * 1000))
    logs = [math.log(v) for v in small]
    spread = MAD_SCALE * statistics.median(abs(v - statistics.median(logs)) for v in logs)
    assert b.hi == pytest.approx(100 * math.exp(3 * spread)) and b.lo == pytest.approx(100 * math.exp(-3 * spread))
    assert b.lo > 0 and not b.contains(60) and b.contains(90)  # a 40% drop blocks, 10% does not


def test_a_count_change_under_the_least_change_never_blocks() -> None:
    b = judge("row_count", [1000.0] * 10, 3.0)  # a constant history: no spread at all
    # x/÷ 1.25: 1,240 and 1000 / 1.24 (806) pass; 1,300 and 760 (24% fewer) block, and so does a 40% drop.
    assert b.contains(1000 * 1.24) and b.contains(1000 / 1.24) and not b.contains(1300) and not b.contains(760)
    assert not b.contains(600) and "least change 25%" in b.describe(3.0)


def test_a_sum_with_negative_values_is_judged_on_the_linear_band() -> None:
    b = judge("sum", [-5.0, 3.0, 1.0, 2.0, -1.0], 3.0)
    assert b.model == "linear" and b.contains(0.0)


def test_a_proportion_band_narrows_with_the_batch_size() -> None:
    history = [0.05] * 10  # 5% nulls every day: no day-to-day spread, only the binomial one
    few, many = judge("null_fraction", history, 3.0, rows=100), judge("null_fraction", history, 3.0, rows=100_000)
    sd = math.sqrt(0.05 * 0.95 / 100)
    assert few.model == "proportion" and few.hi == pytest.approx(0.05 + 3 * sd)  # 0.115
    assert few.contains(0.10)  # 10 nulls of 100 where 5 are usual: chance
    assert many.hi == pytest.approx(0.05 + A.MIN_EFFECT_PROPORTION)  # the binomial term is tiny: the least change
    assert not many.contains(0.10)  # 10,000 of 100,000: not chance


def test_a_proportion_band_widens_with_the_historys_day_to_day_spread() -> None:
    calm = judge("null_fraction", [0.10] * 10, 3.0, rows=10_000)
    moving = judge("null_fraction", [0.06, 0.14, 0.08, 0.12, 0.10, 0.07, 0.13, 0.10, 0.09, 0.11], 3.0, rows=10_000)
    assert moving.hi > calm.hi + 0.03 and moving.contains(0.17) and not calm.contains(0.17)


def test_a_proportion_stays_within_zero_and_one() -> None:
    b = judge("null_fraction", [0.0] * 10, 3.0, rows=50)
    assert b.lo == 0 and 0.02 <= b.hi < 0.2 and b.contains(0.015) and not b.contains(0.3)


def test_heavy_tails_come_from_the_historys_quantiles_once_it_is_long_enough() -> None:
    rng = random.Random(47)
    calm = [rng.gauss(10.0, 1.0) for _ in range(27)]
    history = [*calm, 30.0, 32.0, 35.0]  # storms: 3 days of 30
    short = judge("mean", history[-19:], 3.0)  # 19 runs: too few for quantiles
    long = judge("mean", history, 3.0)
    assert "heavy tail" not in short.describe(3.0) and not short.contains(33.0)
    assert "heavy tail" in long.describe(3.0) and long.contains(33.0)  # a storm as the history has them
    assert not long.contains(60.0)  # far beyond its storms


def test_a_mean_shifted_by_three_spreads_is_outside_without_a_floor_hiding_it() -> None:
    rng = random.Random(1)
    year = [rng.gauss(16.5, 0.33) for _ in range(365)]
    prices = year[:30]
    b = judge("mean", prices, 3.0, memory=year)
    # Three spreads or the year's 99.5th percentile (normal: 2.6 standard deviations), not 5% x 3 of the median
    # (2.5) as before.
    assert 3 * b.spread <= b.hi - b.median < 1.0
    assert not b.contains(statistics.median(prices) + 4 * 0.33)


def test_a_short_historys_extremes_are_not_its_tails() -> None:
    # 30 runs of a heavy-tailed metric (no year of memory yet): the band reaches half again beyond the window's
    # extremes, since the next day passes a 30-run window's highest once in 31; with a year's runs, its 99.5th
    # percentile alone.
    rng = random.Random(3)
    year = [rng.expovariate(1.0) for _ in range(365)]
    window = year[:30]
    med = statistics.median(window)
    short = judge("mean", window, 3.0)
    top = statistics.quantiles(window, n=round(1 / TAIL_QUANTILE), method="inclusive")[-1]  # ~ the highest
    assert top > sorted(window)[-2]
    assert short.hi == pytest.approx(top + TAIL_MARGIN_SHORT * (top - med))
    assert "heavy tail" in short.describe(3.0)
    assert short.contains(max(window) * 1.2) and not short.contains(med + 2 * (max(window) - med))
    long = judge("mean", window, 3.0, memory=year)
    q = statistics.quantiles(year, n=round(1 / TAIL_QUANTILE), method="inclusive")[-1]
    assert long.hi == pytest.approx(max(q, long.median + 3 * long.spread))


def test_a_history_too_short_to_block_on_warns_instead() -> None:
    chk = C.anomaly("row_count", min_history=2)
    c = compiled(chk)
    ctx = AuditContext(metric_history=lambda m, col, n, weekday: [1000.0, 1010.0][:n])
    v = chk.verdict(c, {"c0_n": 10}, 10, ctx)
    assert not v.ok and v.warn_only and "too few to block on" in c.threshold
    three = AuditContext(metric_history=lambda m, col, n, weekday: [1000.0, 1010.0, 990.0][:n])
    v = chk.verdict(compiled(chk), {"c0_n": 10}, 10, three)
    assert not v.ok and not v.warn_only  # three runs: blocks


def test_the_null_fraction_uses_the_batchs_own_row_count() -> None:
    chk = C.anomaly("null_fraction", "x", min_history=5)
    ctx = AuditContext(metric_history=lambda m, col, n, weekday: [0.05] * 10)
    assert chk.verdict(compiled(chk), {"c0_f": 10, "c0_n": 100}, 100, ctx).ok
    assert not chk.verdict(compiled(chk), {"c0_f": 10_000, "c0_n": 100_000}, 100_000, ctx).ok


def test_the_band_is_made_of_published_runs_however_published_and_says_which(tmp_path: Path) -> None:
    """Published at once, after a warning, approved by a person, or a blocked batch published by a later run:
    each enters the history; blocked, awaiting review and rejected runs do not, and the report counts them."""
    store = RunStore(f"sqlite:///{tmp_path / 'runs.db'}")
    history = MetricHistory(store.engine)
    start = datetime(2026, 11, 1, 12, tzinfo=UTC)
    runs = [  # (run id, status, review, rows), oldest first
        *((f"quiet{i}", "published", None, 1000.0 + i) for i in range(5)),
        ("warned", "published", None, 1300.0),  # published after a warning: a real busy day
        ("held", "published", APPROVED, 1400.0),  # held for review, then approved (wap approve publishes it)
        ("storm", "blocked", None, 1500.0),  # blocked ...
        ("storm-again", "published", None, 1500.0),  # ... then published by a run of its own
        ("waiting", "awaiting_review", None, 9000.0),
        ("no", "rejected", None, 9000.0),
    ]
    for i, (rid, status, review, rows) in enumerate(runs):
        at = start + timedelta(hours=i)
        store.save(RunRecord(run_id=rid, table_name="t.x", status=status, started_at=at, review=review))
        history.record(rid, "t.x", at, {("row_count", ""): rows})
    got = history.published("t.x", "row_count", "", 30)
    assert got == [1500.0, 1400.0, 1300.0, 1004.0, 1003.0, 1002.0, 1001.0, 1000.0]
    assert got.runs[:3] == ("storm-again", "held", "warned")
    assert got.left_out == {"blocked": 1, "awaiting_review": 1, "rejected": 1}
    chk = C.anomaly("row_count")
    c = compiled(chk)
    ctx = AuditContext(metric_history=lambda m, col, n, weekday: history.published("t.x", m, col, n, weekday))
    v = chk.verdict(c, {"c0_n": 1100}, 1100, ctx)
    assert v.ok and v.observed["history"] == 8
    assert (
        v.observed["runs"][0] == "storm-again" and v.observed["left_out"] == "1 awaiting_review, 1 blocked, 1 rejected"
    )
    assert "left out: 1 awaiting_review, 1 blocked, 1 rejected run(s)" in c.threshold
    assert not chk.verdict(compiled(chk), {"c0_n": 9000}, 9000, ctx).ok


def daily_history(tmp_path: Path, level: dict[int, float], days: int, noise: float, seed: int = 1) -> MetricHistory:
    """`days` published daily runs up to the day before SATURDAY, each weekday's row count its `level` (default
    1000) x/÷ a random factor within ±`noise`, in a real run store (the audit's MetricHistory)."""
    store = RunStore(f"sqlite:///{tmp_path / 'runs.db'}")
    history = MetricHistory(store.engine)
    rng = random.Random(seed)
    for d in range(days, 0, -1):
        at = SATURDAY - timedelta(days=d)
        rid = f"day{days - d:03d}"
        store.save(RunRecord(run_id=rid, table_name="t.x", status="published", started_at=at))
        rows = level.get(at.weekday(), 1000.0) * math.exp(rng.uniform(-noise, noise))
        history.record(rid, "t.x", at, {("row_count", ""): rows})
    return history


SATURDAY = datetime(2026, 11, 28, 12, tzinfo=UTC)


def test_a_weekly_rhythm_found_in_the_history_judges_a_saturday_by_saturdays(tmp_path: Path) -> None:
    # Weekdays ~1000 rows, Saturdays ~500, each within ±3%: by default (seasonality "auto") a Saturday of 500
    # passes and one of 350 (30% fewer) fails, and so does a weekday's 1000; without seasonality the band spans
    # both levels (the weekends are its tail, reached up to the window's extremes) and both pass.
    history = daily_history(tmp_path, {5: 500.0}, days=56, noise=0.03)
    ctx = AuditContext(
        metric_history=lambda m, col, n, weekday: history.published("t.x", m, col, n, weekday), run_at=SATURDAY
    )
    auto = C.anomaly("row_count")
    c = compiled(auto)
    usual = auto.verdict(c, {"c0_n": 500}, 500, ctx)
    assert usual.ok and usual.observed["median"] == pytest.approx(500, rel=0.03)
    assert usual.observed["seasonality"] == "weekly rhythm: Saturdays 0.50x the median day"
    assert "weekly rhythm: Saturdays 0.50x the median day" in c.threshold and usual.observed["history"] == 30
    assert not auto.verdict(compiled(auto), {"c0_n": 350}, 350, ctx).ok
    assert not auto.verdict(compiled(auto), {"c0_n": 1000}, 1000, ctx).ok  # a weekday's volume on a Saturday
    plain = C.anomaly("row_count", seasonality="none")
    assert plain.verdict(compiled(plain), {"c0_n": 495}, 495, ctx).ok  # the plain band: both levels
    assert plain.verdict(compiled(plain), {"c0_n": 1000}, 1000, ctx).ok
    monday = AuditContext(metric_history=ctx.metric_history, run_at=SATURDAY + timedelta(days=2))
    assert auto.verdict(compiled(auto), {"c0_n": 1000}, 1000, monday).ok


def test_no_weekly_rhythm_where_the_weekdays_do_not_differ(tmp_path: Path) -> None:
    # Every day ~1000 rows within ±20%: weekday levels differ by chance only, so the band is the plain one.
    history = daily_history(tmp_path, {}, days=56, noise=0.2, seed=7)
    ctx = AuditContext(
        metric_history=lambda m, col, n, weekday: history.published("t.x", m, col, n, weekday), run_at=SATURDAY
    )
    chk = C.anomaly("row_count")
    c = compiled(chk)
    v = chk.verdict(c, {"c0_n": 1000}, 1000, ctx)
    assert v.ok and "seasonality" not in v.observed and "rhythm" not in c.threshold


def test_weekly_rhythm_leaves_each_run_out_of_its_own_weekdays_level() -> None:
    # Known answer: two weekdays, levels from three runs each. Monday's runs 100, 110, 90 each against the median
    # of the other two Mondays' logs (a geometric mean), moved onto Tuesday's level (200).
    mondays, tuesdays = [100.0, 110.0, 90.0], [200.0, 200.0, 200.0]
    history = [(0, v) for v in mondays] + [(1, v) for v in tuesdays] + [(0, 100.0)] * 4 + [(1, 200.0)] * 4
    got = A.weekly_rhythm("row_count", history, {0: mondays, 1: tuesdays}, today=1)
    assert got is not None
    moved, words = got
    gm = math.sqrt
    assert moved[:3] == pytest.approx([200 * 100 / gm(110 * 90), 200 * 110 / gm(100 * 90), 200 * 90 / gm(100 * 110)])
    assert moved[3:6] == pytest.approx([200.0] * 3)
    assert words == "weekly rhythm: Tuesdays 1.41x the median day"  # levels 100 and 200: their median 141
    assert A.weekly_rhythm("null_fraction", [(0, 0.1)] * 12, {0: [0.1] * 3}, today=0) is None  # proportions: never
    assert A.weekly_rhythm("row_count", history[:9], {0: mondays, 1: tuesdays}, today=1) is None  # < 10 runs


def test_volume_finds_the_weekly_rhythm_in_icebergs_history() -> None:
    runs = [(SATURDAY - timedelta(days=d), 500 if (SATURDAY - timedelta(days=d)).weekday() == 5 else 1000)
            for d in range(1, 57)]  # fmt: skip
    ctx = AuditContext(history=lambda: runs, run_at=SATURDAY)
    chk = C.volume(runs=30)
    c = compiled(chk)
    assert chk.verdict(c, {}, 500, ctx).ok and "weekly rhythm: Saturdays" in c.threshold
    assert not chk.verdict(compiled(chk), {}, 350, ctx).ok
    plain = C.volume(runs=30, seasonality="none")
    assert plain.verdict(compiled(plain), {}, 500, ctx).ok and plain.verdict(compiled(plain), {}, 1000, ctx).ok


def test_the_duplicate_fraction_is_a_proportion_of_the_batchs_rows() -> None:
    # Distinct rows 80 of 100: 20% of the rows copy another. Against a history of batches with none, on the rate
    # band (binomial spread at 100 rows): 20% fails, 1 copy in 100 passes.
    chk = C.anomaly("duplicate_fraction")
    c = compiled(chk)
    assert chk.default_name() == "anomaly(duplicate_fraction)" and chk.columns() == []
    assert chk.value(c, {"c0_v": 80, "c0_n": 100}) == pytest.approx(0.2)
    assert chk.value(c, {"c0_v": 101, "c0_n": 100}) == 0  # an estimate a little above the rows: none duplicated
    assert chk.answered(c, {"c0_v": 80, "c0_n": 100}) and not chk.answered(c, {"c0_n": 100})
    ctx = AuditContext(metric_history=lambda m, col, n, weekday: [0.0] * 10)
    v = chk.verdict(c, {"c0_v": 80, "c0_n": 100}, 100, ctx)
    # A rate of 0 still has a binomial spread, at half a row in 100: 3 x sqrt(0.005 x 0.995 / 100) = 0.0212.
    lo, hi = v.observed["band"]
    assert not v.ok and v.observed["model"] == "proportion" and lo == 0 and hi == pytest.approx(0.0211601)
    assert chk.verdict(compiled(chk), {"c0_v": 99, "c0_n": 100}, 100, ctx).ok
    assert chk.measured(c, {"c0_v": 80, "c0_n": 100}, 100) == {("duplicate_fraction", ""): pytest.approx(0.2)}
    with pytest.raises(ValueError, match="duplicate_fraction is the batch's, it takes no column"):
        C.anomaly("duplicate_fraction", "trip_id")


def test_the_tails_come_from_a_years_runs_once_there_are_60() -> None:
    # Known answer: a calm month (a null fraction of 0.4-0.6%) inside a year whose stormiest 1 day in 50 reached
    # 20%. The window alone puts a storm of 19% far outside; the year's 99.5th percentile is a storm: it passes.
    calm = [0.004 + 0.0001 * (i % 20) for i in range(30)]
    year = calm * 4 + [0.2] * 3  # 123 runs, 3 storms (2.4%)
    assert not judge("null_fraction", calm, 3.0, rows=900).contains(0.19)
    with_year = judge("null_fraction", calm, 3.0, rows=900, memory=year)
    assert with_year.contains(0.19) and "heavy tail" in with_year.describe(3.0)
    assert not judge("null_fraction", calm, 3.0, rows=900, memory=year[:59]).contains(0.19)  # < 60 runs: the window
    # A month of storms (3 in the window, 10%) no longer lets a 15% fault through once the year says they are rare.
    stormy = calm[:27] + [0.3] * 3
    assert judge("null_fraction", stormy, 3.0, rows=900).contains(0.15)
    long_calm = [0.004 + 0.0001 * (i % 20) for i in range(364)] + [0.3]  # 1 storm in 365 runs: 0.3%
    assert not judge("null_fraction", stormy, 3.0, rows=900, memory=long_calm).contains(0.15)


def test_the_check_reads_the_years_runs_for_its_tails(tmp_path: Path) -> None:
    store = RunStore(f"sqlite:///{tmp_path / 'runs.db'}")
    history = MetricHistory(store.engine)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    for i in range(120):  # 4 storms (20% nulls) in the first 90 days, then 30 calm ones (0.5%)
        at = t0 + timedelta(days=i)
        store.save(RunRecord(run_id=f"r{i:03d}", table_name="t.f", status="published", started_at=at))
        nulls = 0.2 if i in (10, 30, 50, 70) else 0.005
        history.record(f"r{i:03d}", "t.f", at, {("null_fraction", "dep_delay"): nulls})
    ctx = AuditContext(metric_history=lambda m, col, n, weekday: history.published("t.f", m, col, n, weekday))
    chk = C.anomaly("null_fraction", column="dep_delay")
    c = compiled(chk)
    storm = chk.verdict(c, {"c0_f": 180, "c0_n": 1000}, 1000, ctx)  # 18%: as the year's storms
    assert storm.ok, c.threshold
    assert "heavy tail" in c.threshold and storm.observed["history"] == 30
    assert not chk.verdict(c, {"c0_f": 300, "c0_n": 1000}, 1000, ctx).ok  # 30%: beyond any day of the year


def test_a_per_weekday_band_is_made_of_each_runs_deviation_from_its_weekdays_level() -> None:
    # Known answer: Mondays always 100 rows, Tuesdays always 200. Each run's deviation from the median of its
    # weekday's previous runs (from the 4th run of each weekday on: 2 x 37) is 0, so judged on a Tuesday the
    # band's values are 200 each; the plain prediction (the median of 30 runs of both levels) is far worse.
    mondays, tuesdays = [100.0] * 40, [200.0] * 40  # newest first
    recent = [v for pair in zip(tuesdays, mondays, strict=True) for v in pair]
    got = A.weekday_band("row_count", {0: mondays, 1: tuesdays}, recent, today=1, window=30)
    assert got is not None
    values, words = got
    assert values == pytest.approx([200.0] * 2 * (40 - A.RHYTHM_MIN))
    assert words.startswith("per-weekday band: Tuesdays' level 200 (their last 8 runs), 74 runs' deviations")
    monday = A.weekday_band("row_count", {0: mondays, 1: tuesdays}, recent, today=0, window=30)
    assert monday is not None and monday[0] == pytest.approx([100.0] * 74)
    assert A.weekday_band("null_fraction", {0: mondays, 1: tuesdays}, recent, today=1, window=30) is None


def test_no_per_weekday_band_without_a_weekly_cycle_or_a_long_history() -> None:
    rng = random.Random(3)
    days = [1000 * math.exp(rng.gauss(0, 0.1)) for _ in range(140)]  # newest first, no weekly cycle
    by_weekday = {w: days[w::7] for w in range(7)}
    assert A.weekday_band("row_count", by_weekday, days, today=0, window=30) is None  # a median of 8 is noisier
    short = {w: vs[:8] for w, vs in by_weekday.items()}  # 56 runs: under WEEKDAY_RUNS
    assert A.weekday_band("row_count", short, days[:56], today=0, window=30) is None


def test_the_band_reaches_the_last_days_own_deviation() -> None:
    # A steady weekly cycle, then yesterday (a Monday) 30% down, published by a person: today, a Tuesday 30% down
    # is inside the band; without yesterday's, it is not.
    mondays = [100.0 * (1 + 0.02 * ((i * 7) % 5 - 2)) for i in range(40)]
    tuesdays = [2 * v for v in mondays]
    holiday = [70.0, *mondays[1:]]
    recent = [v for pair in zip(holiday, tuesdays, strict=True) for v in pair]
    with_it = A.weekday_band("row_count", {0: holiday, 1: tuesdays}, recent, today=1, window=30, latest=[0, 1])
    without = A.weekday_band("row_count", {0: holiday, 1: tuesdays}, recent, today=1, window=30)
    assert with_it is not None and without is not None
    assert judge("row_count", with_it[0], 3.0).contains(140.0)
    assert not judge("row_count", without[0], 3.0).contains(140.0)


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_a_tuesday_40_percent_down_blocks_where_fridays_and_weekends_are_busier(tmp_path: Path, seed: int) -> None:
    # 140 days, Fridays and Saturdays 1.4x and Sundays 1.3x a weekday's 1000 rows, each day x/÷ up to 16% at
    # random: the plain band (both levels, or a rhythm found in 30 runs) is too wide to see a Tuesday 40% down
    # on some histories, or too narrow for a real Tuesday 20% down on others. Each run against its own weekday's
    # level, the year's deviations make the band: the drop blocks, real Tuesdays pass.
    history = daily_history(tmp_path, {4: 1400.0, 5: 1400.0, 6: 1300.0}, days=140, noise=0.15, seed=seed)
    tuesday = SATURDAY + timedelta(days=3)
    ctx = AuditContext(
        metric_history=lambda m, col, n, weekday: history.published("t.x", m, col, n, weekday), run_at=tuesday
    )
    chk = C.anomaly("row_count")
    c = compiled(chk)
    assert not chk.verdict(c, {"c0_n": 600}, 600, ctx).ok
    assert "per-weekday band: Tuesdays' level" in c.threshold
    for rows in (800, 1000, 1200):
        assert chk.verdict(compiled(chk), {"c0_n": rows}, rows, ctx).ok, rows


def test_volume_judges_a_batch_by_its_own_day_where_the_table_names_a_time_column(tmp_path: Path) -> None:
    # 56 days backfilled in one afternoon (every commit on a Monday): Saturdays 500 rows, other days 1000. The
    # metric history keys each run on its batch's day, so a Saturday's batch of 1000 blocks and one of 500
    # passes; by commit times (Iceberg's history) every run is a Monday and both pass.
    history = daily_history(tmp_path, {5: 500.0}, days=56, noise=0.03)
    monday = SATURDAY + timedelta(days=2)
    rows = [500 if (SATURDAY - timedelta(days=d)).weekday() == 5 else 1000 for d in range(1, 57)]
    commits = [(monday - timedelta(minutes=i), n) for i, n in enumerate(rows)]
    ctx = AuditContext(
        history=lambda: commits,
        metric_history=lambda m, col, n, weekday: history.published("t.x", m, col, n, weekday),
        run_at=monday,
        batch_at=SATURDAY,
    )
    chk = C.volume(runs=30)
    c = compiled(chk)
    usual = chk.verdict(c, {}, 500, ctx)
    assert usual.ok and "judged by the batch's day, 2026-11-28, a Saturday" in c.threshold, c.threshold
    assert usual.observed["seasonality"] == "weekly rhythm: Saturdays 0.50x the median day"
    assert not chk.verdict(compiled(chk), {}, 1000, ctx).ok  # a weekday's volume on a Saturday
    assert not chk.verdict(compiled(chk), {}, 350, ctx).ok
    weekly = C.volume(runs=30, seasonality="weekly")
    assert not weekly.verdict(compiled(weekly), {}, 1000, ctx).ok
    no_day = AuditContext(history=lambda: commits, metric_history=ctx.metric_history, run_at=monday)
    assert chk.verdict(compiled(chk), {}, 1000, no_day).ok  # no time column: commit times, as before


def test_a_change_beyond_blocks_beyond_always_blocks_however_wide_the_tails() -> None:
    # A null fraction usually 0.5%, 20% on the year's storm days (4 in 120): a 12% batch is inside the year's
    # tails and passes; with blocks_beyond = 0.1 (ten points) it blocks, and a usual day still passes.
    calm = [0.005 + 0.0005 * (i % 5) for i in range(120)]
    stormy = [0.2 if i % 30 == 7 else v for i, v in enumerate(calm)]
    plain = judge("null_fraction", stormy[:30], 3.0, rows=900, memory=stormy)
    assert plain.contains(0.12)
    capped = judge("null_fraction", stormy[:30], 3.0, rows=900, memory=stormy, beyond=0.1)
    assert not capped.contains(0.12) and capped.contains(0.01) and capped.hi == pytest.approx(capped.median + 0.1)
    assert "a change of 10 points always blocks" in capped.describe(3.0)
    # Counts: a history swinging x/÷ 2 passes a 40% drop; blocks_beyond = 0.35 blocks it (and 1/0.65 as many).
    swinging = [1000.0 * (2.0 if i % 3 == 0 else 0.5 if i % 3 == 1 else 1.0) for i in range(30)]
    assert judge("row_count", swinging, 3.0).contains(600)
    b = judge("row_count", swinging, 3.0, beyond=0.35)
    assert not b.contains(600) and b.contains(700) and not b.contains(1000 / 0.6) and "35% fewer" in b.describe(3.0)


def test_the_check_takes_blocks_beyond_from_its_declaration() -> None:
    history = [0.2 if i % 10 == 3 else 0.005 for i in range(30)]  # a storm every 10 days: tails reach 20%
    ctx = AuditContext(metric_history=lambda m, col, n, weekday: history[:n])
    usual = C.anomaly("null_fraction", column="dep_delay")
    assert usual.verdict(compiled(usual), {"c0_f": 120, "c0_n": 1000}, 1000, ctx).ok  # 12%: like the storms
    strict = C.anomaly("null_fraction", column="dep_delay", blocks_beyond=0.1)
    c = compiled(strict)
    assert not strict.verdict(c, {"c0_f": 120, "c0_n": 1000}, 1000, ctx).ok
    assert "always blocks" in c.threshold
    with pytest.raises(ValueError, match="blocks_beyond"):
        C.anomaly("row_count", blocks_beyond=1.5)


def _storms(days: int, seed: int) -> tuple[list[float], list[float]]:
    """Null fractions of two columns missing together (a cancelled flight lacks both; a diverted one only the
    second): mostly calm, a storm one day in 12."""
    rng = random.Random(seed)
    arr, dep = [], []
    for i in range(days):
        cancelled = rng.uniform(0.2, 0.5) if i % 12 == 5 else rng.uniform(0.002, 0.012)
        diverted = rng.uniform(0.0, 0.004)
        arr.append(cancelled + diverted)
        dep.append(cancelled)
    return dep, arr


def test_a_column_whose_nulls_follow_anothers_is_judged_by_what_that_one_leaves_unexplained() -> None:
    dep, arr = _storms(120, 1)
    comp = companion(dep, {"arr_delay": arr, "carrier": [0.0] * 120, "noise": [random.random() for _ in dep]})
    assert comp is not None and comp.column == "arr_delay" and comp.slope == pytest.approx(1.0, abs=0.05)
    assert comp.gain < 0.1
    assert companion(dep[: COMPANION_RUNS - 1], {"arr_delay": arr}) is None  # too short a history
    assert companion(dep, {"noise": [random.random() for _ in dep]}) is None  # explains nothing
    history = History(reversed(dep), [f"r{i}" for i in range(120)][::-1])
    years = {"dep_delay": history, "arr_delay": History(reversed(arr), history.runs)}

    def judged(dep_now: float, arr_now: float) -> Explained:
        e = nulls_explained("dep_delay", dep_now, {"dep_delay": dep_now, "arr_delay": arr_now}, years.__getitem__, 3)
        assert e is not None and e.comp.column == "arr_delay"
        return e

    storm = judged(0.45, 0.452)  # both columns: a storm, however far outside dep_delay's own calm band
    assert storm.ok and abs(storm.residual) < 0.01
    spike = judged(0.11, 0.008)  # dep_delay alone: 10 points no companion explains
    assert not spike.ok and spike.residual == pytest.approx(0.11 - spike.expected)
    assert "nulls beyond those arr_delay's predict: +10 points" in spike.describe()
    stormy_spike = judged(0.45 + 0.10, 0.452)  # the same fault on a stormy day
    assert not stormy_spike.ok
    lagging = judged(0.30, 0.36)  # fewer than arr_delay's predict (diversions): the plain band's to judge
    assert lagging.ok and lagging.residual < -0.05


def test_the_null_check_reads_every_columns_history_and_the_batchs_file_metrics(tmp_path: Path) -> None:
    store = RunStore(f"sqlite:///{tmp_path / 'runs.db'}")
    history = MetricHistory(store.engine)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    dep, arr = _storms(60, 2)
    for i in range(60):
        at = t0 + timedelta(days=i)
        store.save(RunRecord(run_id=f"r{i:03d}", table_name="t.f", status="published", started_at=at))
        history.record(
            f"r{i:03d}", "t.f", at, {("null_fraction", "dep_delay"): dep[i], ("null_fraction", "arr_delay"): arr[i]}
        )
    chk = C.anomaly("null_fraction", column="dep_delay")

    def verdict(dep_nulls: int, arr_nulls: int) -> tuple[Verdict, str]:
        c = compiled(chk)
        fm = FileMetrics(rows=1000, null_counts={"dep_delay": dep_nulls, "arr_delay": arr_nulls, "carrier": 0})
        ctx = AuditContext(
            metric_history=lambda m, col, n, weekday: history.published("t.f", m, col, n, weekday),
            file_metrics=lambda: fm,
        )
        return chk.verdict(c, {"c0_f": dep_nulls, "c0_n": 1000}, 1000, ctx), c.threshold

    storm, _ = verdict(400, 404)
    assert storm.ok and storm.observed["companion"] == "arr_delay"
    spike, words = verdict(110, 8)  # inside dep_delay's own band (storms reach 50%), not inside arr_delay's
    assert not spike.ok and "nulls beyond those arr_delay's predict" in words, words
    assert spike.observed["unexplained"] == pytest.approx(0.11 - spike.observed["expected"], abs=1e-5)
    assert "points beyond what arr_delay's nulls predict (at most +" in observed(spike.observed)


def test_a_mean_inside_its_wide_band_blocks_when_the_columns_minimum_moved_with_it() -> None:
    # A year of arrival delays: calm days around 0 (earliest arrival ~-50), one stormy day in ten whose mean
    # reaches 40-60 through its late flights while the earliest arrival stays where it was.
    rng = random.Random(5)
    means = [rng.uniform(45, 60) if i % 10 == 3 else rng.gauss(2, 5) for i in range(200)]
    mins = [rng.gauss(-50, 5) for _ in range(200)]
    b = judge("mean", means[:30], 3.0, memory=means)
    assert b.contains(25.0)  # the storms widen the mean's own band
    year = {"min": mins, "max": [rng.gauss(500, 150) for _ in range(200)]}
    shifted = mean_shifted(25.0, b, {"min": -27.0, "max": 520.0}, year.__getitem__, 3.0)  # everything +23
    assert shifted is not None and shifted.bound == "min"
    assert "the column moved as a whole: its min -27 is above its band" in shifted.describe()
    assert mean_shifted(25.0, b, {"min": -49.0, "max": 900.0}, year.__getitem__, 3.0) is None  # a storm
    assert mean_shifted(4.0, b, {"min": -27.0, "max": 520.0}, year.__getitem__, 3.0) is None  # the mean barely moved
    down = mean_shifted(-21.0, b, {"min": -73.0, "max": 480.0}, year.__getitem__, 3.0)
    assert down is not None and down.bound == "min"
    assert mean_shifted(25.0, b, {"min": -27.0, "max": 520.0}, lambda bound: year[bound][:5], 3.0) is None  # short


def test_the_mean_check_reads_the_columns_bounds_from_the_batchs_file_metrics(tmp_path: Path) -> None:
    store = RunStore(f"sqlite:///{tmp_path / 'runs.db'}")
    history = MetricHistory(store.engine)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    rng = random.Random(6)
    for i in range(90):
        at = t0 + timedelta(days=i)
        store.save(RunRecord(run_id=f"r{i:03d}", table_name="t.f", status="published", started_at=at))
        mean = rng.uniform(45, 60) if i % 10 == 3 else rng.gauss(2, 5)
        values = {("mean", "arr_delay"): mean, ("min", "arr_delay"): rng.gauss(-50, 5)}
        history.record(f"r{i:03d}", "t.f", at, {**values, ("max", "arr_delay"): rng.gauss(500, 150)})
    chk = C.anomaly("mean", column="arr_delay")

    def verdict(mean: float, low: float) -> tuple[Verdict, str]:
        c = compiled(chk)
        fm = FileMetrics(rows=900, lower={"arr_delay": low}, upper={"arr_delay": 600.0})
        ctx = AuditContext(
            metric_history=lambda m, col, n, weekday: history.published("t.f", m, col, n, weekday),
            file_metrics=lambda: fm,
        )
        return chk.verdict(c, {"c0_s": mean * 900, "c0_c": 900}, 900, ctx), c.threshold

    storm, _ = verdict(25.0, -51.0)
    assert storm.ok
    moved, words = verdict(25.0, -27.0)
    assert not moved.ok and "the column moved as a whole: its min" in words, words
    assert moved.observed["moved_with"] == "min"
    assert "moved as a whole: its min -27 outside [" in observed(moved.observed)
