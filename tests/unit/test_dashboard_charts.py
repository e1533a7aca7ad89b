"""The dashboard's charts (wapflow.dashboard.charts) as the Vega-Lite specs they send: time axes a person reads
(UTC, 24-hour, dates over days), the anomaly band shaded, a point colour per run status, warned checks counted
as warned, and waits worked out when the page is drawn. (In a browser: tests/process/test_dashboard_browser.py.)"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from wapflow.dashboard import charts

T0 = datetime(2026, 11, 28, 14, 38, 5, tzinfo=UTC)


def _labels(times: list[datetime]) -> list[str]:
    """The tick labels a person sees, worked out as Vega's labelExpr does (utcFormat; midnight by its date)."""
    unit, fmt, step = charts.time_ticks(times)
    out = []
    for ms in charts.tick_values(times, unit, step):
        t = datetime.fromtimestamp(ms / 1000, UTC)
        midnight = unit in ("minute", "hour") and (t.hour, t.minute) == (0, 0)
        out.append(t.strftime(charts.TICK_FORMAT["day"] if midnight else fmt))
    return out


@pytest.mark.parametrize(
    ("span", "expected"),
    [
        # Runs seconds apart: whole seconds, never half ones (Vega's own ticks read ".500").
        (timedelta(seconds=4), ["14:38:05", "14:38:06", "14:38:07", "14:38:08", "14:38:09"]),
        (timedelta(minutes=30), ["14:40", "14:45", "14:50", "14:55", "15:00", "15:05"]),
        # Afternoon hours in 24-hour time (not 02 PM), midnight by its date.
        (timedelta(hours=12), ["16:00", "18:00", "20:00", "22:00", "Nov 29", "02:00"]),
        (timedelta(days=5), ["Nov 29", "Nov 30", "Dec 01", "Dec 02", "Dec 03"]),
    ],
)
def test_tick_labels_read_as_times_or_dates(span: timedelta, expected: list[str]) -> None:
    times = [T0 + span * i / 7 for i in range(8)]
    assert _labels(times) == expected


def test_a_single_run_still_has_a_tick() -> None:
    assert _labels([T0]) == ["14:38:05"]


def _spec(chart: Any) -> dict[str, Any]:
    return dict(chart.to_dict())


def _points(statuses: list[str]) -> list[dict[str, Any]]:
    return [
        {
            "run_at": T0 + timedelta(hours=2 * i),
            "run_id": f"r{i}",
            "status": s,
            "value": 100.0 + i,
            "median": None if i < 3 else 101.0,
            "band_low": None if i < 3 else 95.0,
            "band_high": None if i < 3 else 107.0,
        }
        for i, s in enumerate(statuses)
    ]


def test_a_trend_shades_the_band_and_colours_each_run_by_status() -> None:
    points = _points(["published"] * 4 + ["published", "blocked", "awaiting_review", "rejected"])
    spec = _spec(charts.trend_chart(points, "row_count", warned={"r4"}))
    area, median, line, dots = spec["layer"]
    assert area["mark"]["type"] == "area" and (area["encoding"]["y"]["field"], area["encoding"]["y2"]["field"]) == (
        "band_low",
        "band_high",
    )
    assert median["mark"]["strokeDash"] and line["mark"]["type"] == "line"
    color = dots["encoding"]["color"]["scale"]
    assert color["domain"] == ["published", "warned", "blocked", "held", "rejected"]
    assert len(set(color["range"])) == 5
    assert len(set(dots["encoding"]["shape"]["scale"]["range"])) == 5
    assert [r["status"] for r in spec["datasets"][spec["data"]["name"]]] == [
        *["published"] * 4,
        "warned",
        "blocked",
        "held",
        "rejected",
    ]
    x = dots["encoding"]["x"]
    assert (x["type"], x["scale"]["type"]) == ("temporal", "utc")
    assert spec["usermeta"] == {"embedOptions": {"renderer": "svg"}}


def test_a_band_that_changes_each_day_is_drawn_as_each_runs_own() -> None:
    """A per-weekday band (Saturdays' edges half a weekday's) is shaded as steps, each run's band around its own
    point, not as slopes from one day's band to the next; the tooltip says whether a band is as judged or
    recomputed."""
    points = [
        {
            "run_at": T0 + timedelta(days=i),
            "run_id": f"r{i}",
            "status": "published",
            "value": 500.0 if (T0 + timedelta(days=i)).weekday() == 5 else 1000.0,
            "median": 500.0 if (T0 + timedelta(days=i)).weekday() == 5 else 1000.0,
            "band_low": 400.0 if (T0 + timedelta(days=i)).weekday() == 5 else 800.0,
            "band_high": 625.0 if (T0 + timedelta(days=i)).weekday() == 5 else 1250.0,
            "band_from": "recomputed" if i == 0 else "as judged",
        }
        for i in range(8)
    ]
    spec = _spec(charts.trend_chart(points, "row_count", warned=set()))
    area, median, _, dots = spec["layer"]
    assert area["mark"]["interpolate"] == "step" and median["mark"]["interpolate"] == "step"
    rows = spec["datasets"][spec["data"]["name"]]
    assert [(r["band_low"], r["band_high"]) for r in rows] == [(p["band_low"], p["band_high"]) for p in points]
    assert {(r["run_id"], r["band_from"]) for r in rows if r["band_from"] == "recomputed"} == {("r0", "recomputed")}
    assert {"field": "band_from", "type": "nominal", "title": "band"} in dots["encoding"]["tooltip"]


def test_a_warned_check_counts_as_warned() -> None:
    checks = [
        {"started_at": T0, "run_id": "r1", "check": "anomaly(mean(fare))", "check_status": "warned"},
        {"started_at": T0, "run_id": "r1", "check": "not_null(id)", "check_status": "passed"},
        {"started_at": T0 + timedelta(hours=1), "run_id": "r2", "check": "not_null(id)", "check_status": "failed"},
    ]
    spec = _spec(charts.check_outcomes(checks))
    rows = spec["datasets"][spec["data"]["name"]]
    assert sorted((r["run_id"], r["outcome"]) for r in rows) == [("r1", "passed"), ("r1", "warned"), ("r2", "failed")]
    assert spec["encoding"]["color"]["scale"]["domain"] == ["passed", "warned", "failed"]


@pytest.mark.parametrize(
    ("status", "warned", "shown"),
    [
        ("published", False, "published"),
        ("published", True, "warned"),
        ("awaiting_review", True, "held"),
        ("blocked", True, "blocked"),
        ("running", False, "other"),
    ],
)
def test_shown_status(status: str, warned: bool, shown: str) -> None:
    assert charts.shown_status(status, warned) == shown


def test_a_wait_is_worked_out_when_the_page_is_drawn() -> None:
    held = T0 - timedelta(seconds=119)
    assert charts.waited(held, now=T0) == "1m"
    assert charts.waited(held, now=T0 + timedelta(seconds=2)) == "2m"
    assert charts.waited(held.replace(tzinfo=None), now=T0 + timedelta(hours=50)) == "2d 2h"  # naive is UTC
