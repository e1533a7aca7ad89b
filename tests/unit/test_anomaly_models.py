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
from wapflow.audit.anomaly import MAD_SCALE, judge
from wapflow.audit.checktype import AuditContext, Compiled
from wapflow.audit.spec import CheckType
from wapflow.runs.metrics import MetricHistory
from wapflow.runs.store import APPROVED, RunRecord, RunStore


def compiled(chk: CheckType) -> Compiled:
    return Compiled(0, chk, None, None, None, "", {c: c for c in chk.columns()})  # type: ignore[arg-type]


def test_counts_are_judged_by_ratio_the_same_at_any_scale() -> None:
    small = [90.0, 100.0, 110.0, 95.0, 105.0, 100.0, 98.0, 102.0]
    big = [v * 1000 for v in small]
    b, B = judge("row_count", small, 3.0), judge("row_count", big, 3.0)
    assert b.model == "log" and (B.lo, B.hi) == (pytest.approx(b.lo * 1000), pytest.approx(b.hi * 1000))
    logs = [math.log(v) for v in small]
    spread = MAD_SCALE * statistics.median(abs(v - statistics.median(logs)) for v in logs)
    assert b.hi == pytest.approx(100 * math.exp(3 * spread)) and b.lo == pytest.approx(100 * math.exp(-3 * spread))
    assert b.lo > 0 and not b.contains(60) and b.contains(90)  # a 40% drop blocks, 10% does not


def test_a_count_change_under_the_least_change_never_blocks() -> None:
    b = judge("row_count", [1000.0] * 10, 3.0)  # a constant history: no spread at all
    assert b.contains(1000 * 1.14) and b.contains(1000 / 1.14) and not b.contains(1200) and not b.contains(800)
    assert "least change 15%" in b.describe(3.0)


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
    prices = [rng.gauss(16.5, 0.33) for _ in range(30)]
    b = judge("mean", prices, 3.0)
    assert b.hi - b.median == pytest.approx(3 * b.spread)  # not 5% x 3 of the median (2.5) as before
    assert not b.contains(statistics.median(prices) + 4 * 0.33)


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
