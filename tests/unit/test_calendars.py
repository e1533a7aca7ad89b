"""A table's holiday calendar (`holidays`): which days are near a holiday, how a count is judged on them, and a
calendar that does not exist named in wap.toml. No Spark."""

from __future__ import annotations

from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from wapflow import checks as C
from wapflow.audit.anomaly import HOLIDAY_CHANGE, MIN_EFFECT_COUNT, judge
from wapflow.audit.calendars import holiday_near, parse
from wapflow.audit.checktype import AuditContext, Compiled
from wapflow.config import load_config
from wapflow.errors import ConfigError
from wapflow.service.render import observed


def test_a_holiday_and_the_day_either_side_are_near_it() -> None:
    assert holiday_near(date(2013, 11, 28), "US") == "Thanksgiving Day, 2013-11-28"
    assert holiday_near(date(2013, 12, 24), "US") == "the day before Christmas Day (2013-12-25)"
    assert holiday_near(date(2013, 12, 26), "US") == "the day after Christmas Day (2013-12-25)"
    assert holiday_near(date(2013, 5, 26), "US") == "the day before Memorial Day (2013-05-27)"  # its Sunday
    assert holiday_near(date(2013, 12, 31), "US") == "the day before New Year's Day (2014-01-01)"  # across years
    assert holiday_near(date(2013, 11, 26), "US") is None
    assert holiday_near(date(2013, 2, 12), "US") is None
    assert holiday_near(date(2013, 2, 12), "US-NY") == "Lincoln's Birthday, 2013-02-12"  # a state's own
    assert holiday_near(date(2013, 7, 4), "GB") is None


def test_a_calendar_is_a_country_and_a_subdivision_it_has() -> None:
    assert parse("us-ny") == ("US", "NY") and parse("GB") == ("GB", None)
    with pytest.raises(ValueError, match="no holiday calendar 'XX'"):
        parse("XX")
    with pytest.raises(ValueError, match="no subdivision 'ZZ' of US"):
        parse("US-ZZ")


def test_wap_toml_names_a_calendar_that_does_not_exist_in_one_line(tmp_path: Path) -> None:
    p = tmp_path / "wap.toml"
    p.write_text('[tables."a.b"]\nholidays = "us-ny"\nchecks = []\n')
    assert load_config(p).table("a.b").holidays == "US-NY"
    p.write_text('[tables."a.b"]\nholidays = "United States"\nchecks = []\n')
    with pytest.raises(ConfigError) as e:
        load_config(p)
    msg = str(e.value)
    assert "holidays" in msg and "no holiday calendar 'United States': a country code such as US" in msg
    assert e.value.exit_code == 2


# A steady Thursday count (990 a day, a few rows either way): its band is the least change, x/÷ 1.25.
THURSDAYS = [990.0 + d for d in (-6, 4, -2, 8, 0, -4, 6, 2, -8, 3)]


def test_a_count_near_a_holiday_is_judged_with_a_wider_least_change() -> None:
    thanksgiving = 634.0  # New York's flights on Thanksgiving 2013: 0.64x a Thursday
    plain = judge("row_count", THURSDAYS, 3.0)
    assert not plain.contains(thanksgiving)
    assert plain.lo == pytest.approx(990 / (1 + MIN_EFFECT_COUNT), rel=0.01)
    near = judge("row_count", THURSDAYS, 3.0, holiday="Thanksgiving Day, 2013-11-28")
    assert near.contains(thanksgiving)
    assert near.lo == pytest.approx(990 / (1 + HOLIDAY_CHANGE), rel=0.01)
    assert "least change 60% around a holiday (Thanksgiving Day, 2013-11-28)" in near.describe(3.0)
    assert not near.contains(990 * 0.6 * 0.98)  # a 40% loss of a usual day still blocks on a holiday
    # Rates and means are judged as on any day.
    rates = [0.01, 0.012, 0.011, 0.009, 0.01, 0.013, 0.01]
    assert judge("null_fraction", rates, 3.0, rows=900, holiday="x") == judge("null_fraction", rates, 3.0, rows=900)


def test_the_check_says_the_holiday_it_judged_the_day_by() -> None:
    chk = C.anomaly("row_count")
    c = Compiled(0, chk, None, None, None, "", {})  # type: ignore[arg-type]
    holiday = "Thanksgiving Day, 2013-11-28"
    ctx = AuditContext(
        metric_history=lambda m, col, n, weekday: THURSDAYS[:n],
        batch_at=datetime(2013, 11, 28, tzinfo=UTC),
        holiday=holiday,
    )
    v = chk.verdict(c, {"c0_n": 634}, 634, ctx)
    assert v.ok, c.threshold
    assert v.observed["holiday"] == holiday and "around a holiday" in c.threshold
    assert f"near a holiday: {holiday}" in observed(v.observed)
    without = chk.verdict(c, {"c0_n": 634}, 634, AuditContext(metric_history=ctx.metric_history))
    assert not without.ok and "holiday" not in without.observed
