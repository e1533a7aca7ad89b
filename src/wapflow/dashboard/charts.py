"""The dashboard's charts (Altair, drawn by Vega-Lite as SVG): runs and metrics over the time each run started.

Time is UTC on every axis, with ticks a person reads: 24-hour (15:00; midnight by its date, Nov 28), with
seconds where the runs span minutes, dates where they span days. A trend shades the anomaly band and draws each
run as a point coloured and shaped by its status. Pure functions of rows from wapflow.service: app.py renders
them; tests/unit/test_dashboard_charts.py checks them without Streamlit or a browser.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import altair as alt

from wapflow.service.review import age_words
from wapflow.service.runs import AWAITING_REVIEW

# The CLI's colours (wapflow.cli.output.STATUS_COLOR) as chart colours; other statuses grey.
STATUS_COLORS = {
    "published": "#2e9d4f",
    "blocked": "#e0a500",
    "failed": "#d33c3c",
    "interrupted": "#8e44ad",
    "awaiting_review": "#1f8fb3",
    "rejected": "#c2185b",
}
# A run's point on a trend: its status as a person names it (a published run with a warned check is "warned",
# one awaiting review "held"), each its own colour and shape, so a blocked or warned run stands out.
POINT_STYLE = {
    "published": ("#2e9d4f", "circle"),
    "warned": ("#f57c00", "triangle-up"),
    "blocked": ("#d33c3c", "square"),
    "held": ("#1f8fb3", "diamond"),
    "failed": ("#7b1fa2", "cross"),
    "rejected": ("#c2185b", "triangle-down"),
    "other": ("#9e9e9e", "circle"),
}
CHECK_COLORS = {"passed": "#2e9d4f", "warned": "#f57c00", "failed": "#d33c3c", "quarantined": "#8e44ad"}


def runs_per_day(rows: list[dict[str, Any]]) -> Any:
    """Runs per day (UTC), stacked by status in the CLI's colours; days as dates, read level."""
    statuses = list(dict.fromkeys(r["status"] for r in rows))
    return _svg(
        alt.Chart(alt.InlineData(values=rows))
        .mark_bar()
        .encode(
            x=alt.X("day:O", title="day (UTC)", axis=alt.Axis(labelAngle=0)),
            y=alt.Y("sum(runs):Q", title="runs", axis=alt.Axis(format="d", tickMinStep=1)),
            color=alt.Color("status:N", title="status", scale=_palette(statuses, STATUS_COLORS)),
            tooltip=["day:O", "status:N", "runs:Q"],
        )
    )


# Tick steps a person counts in: seconds, minutes, hours; days beyond.
TICK_STEPS = (
    ("second", 1, (1, 2, 5, 10, 15, 30)),
    ("minute", 60, (1, 2, 5, 10, 15, 30)),
    ("hour", 3600, (1, 2, 3, 6, 12)),
)
TICK_FORMAT = {"second": "%H:%M:%S", "minute": "%H:%M", "hour": "%H:%M", "day": "%b %d"}


def time_ticks(times: list[datetime], ticks: int = 8) -> tuple[str, str, int]:
    """(interval, format, step) of a time axis over `times`: about `ticks` ticks on whole seconds, minutes or
    hours labelled 24-hour (14:38, with seconds where the runs span a few minutes), or on days labelled with
    the date (Nov 28) where they span more than a day and a half."""
    span = (max(times) - min(times)).total_seconds() if times else 0.0
    want = span / ticks
    if span <= 1.5 * 86400:
        for unit, seconds, steps in TICK_STEPS:
            for step in steps:
                if step * seconds >= want:
                    return unit, TICK_FORMAT[unit], step
    return "day", TICK_FORMAT["day"], max(1, math.ceil(want / 86400))


def time_axis(times: list[datetime], field: str, title: str = "run started (UTC)") -> alt.X:
    """The x axis of a chart over runs: UTC time, ticks and their labels from time_ticks (the tick values are
    given: Vega's own would fall on half seconds or 12-hour clock labels)."""
    unit, fmt, step = time_ticks(times)
    label = f"utcFormat(datum.value, '{fmt}')"
    if unit in ("minute", "hour"):  # midnight by its date, so a day's change shows: ... 21:00 Nov 28 03:00 ...
        day = f"utcFormat(datum.value, '{TICK_FORMAT['day']}')"
        label = f"utchours(datum.value) == 0 && utcminutes(datum.value) == 0 ? {day} : {label}"
    axis = alt.Axis(
        values=[
            alt.DateTime(
                year=t.year, month=t.month, date=t.day, hours=t.hour, minutes=t.minute, seconds=t.second, utc=True
            )
            for t in (datetime.fromtimestamp(v / 1000, UTC) for v in tick_values(times, unit, step))
        ],
        labelExpr=label,
        labelAngle=0,
        labelOverlap=True,
    )
    return alt.X(f"{field}:T", title=title, scale=alt.Scale(type="utc", padding=14), axis=axis)


UNIT_SECONDS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}


def tick_values(times: list[datetime], unit: str, step: int) -> list[int]:
    """Ticks (ms since the epoch) every `step` `unit`s (whole ones, UTC) from the first time to the last; the
    first time itself when none falls between."""
    if not times:
        return []
    every = UNIT_SECONDS[unit] * step
    lo, hi = _ms(min(times)) // 1000, _ms(max(times)) // 1000
    first = -(-lo // every) * every  # the first whole tick at or after lo
    ticks = [t * 1000 for t in range(first, hi + 1, every)]
    return ticks or [lo * 1000]


def _ms(t: datetime) -> int:
    """A time as the charts take it: milliseconds since the epoch (a time without a zone is UTC)."""
    return int((t if t.tzinfo else t.replace(tzinfo=UTC)).timestamp() * 1000)


def _svg(chart: Any) -> Any:
    """Drawn as SVG (not canvas): marks stay elements a browser test can read, and small charts stay sharp."""
    return chart.properties(height=260, usermeta={"embedOptions": {"renderer": "svg"}})


def _palette(values: list[str], colors: dict[str, str]) -> alt.Scale:
    """A colour per value, in a fixed order; values without a colour of their own grey."""
    domain = list(dict.fromkeys(values))
    return alt.Scale(domain=domain, range=[colors.get(v, "#9e9e9e") for v in domain])


def shown_status(status: str, warned: bool) -> str:
    """A run's status on a trend, as a person names it: held (awaiting review), warned (published with a
    warned check), published, blocked, failed, rejected; anything else "other"."""
    if status == AWAITING_REVIEW:
        return "held"
    if status == "published":
        return "warned" if warned else "published"
    return status if status in POINT_STYLE else "other"


def trend_chart(points: list[dict[str, Any]], label: str, warned: set[str]) -> Any:
    """One metric per run over time: the band each run was judged by shaded from its low to its high edge, its
    median dashed, each run a point coloured and shaped by its status (so a blocked or warned run stands out).
    The band is drawn as steps, each run's own around its point: a per-weekday band's edges change from one day
    to the next, and a slope between a Friday's band and a Saturday's would be neither."""
    rows = [
        {
            "run_at": _ms(p["run_at"]),
            "run_id": p["run_id"],
            "status": shown_status(p["status"], p["run_id"] in warned),
            "value": p["value"],
            "band_low": p["band_low"],
            "median": p["median"],
            "band_high": p["band_high"],
            "band_from": p.get("band_from"),
        }
        for p in points
    ]
    base = alt.Chart(alt.InlineData(values=rows)).encode(x=time_axis([p["run_at"] for p in points], "run_at"))
    y = alt.Y("value:Q", title=label, scale=alt.Scale(zero=False))
    banded = base.transform_filter("isValid(datum.band_low) && isValid(datum.band_high)")
    band = banded.mark_area(opacity=0.22, color="#4c78a8", interpolate="step").encode(
        y=alt.Y("band_low:Q", title=label, scale=alt.Scale(zero=False)), y2="band_high:Q"
    )
    median = banded.mark_line(color="#4c78a8", strokeDash=[4, 3], strokeWidth=1, interpolate="step").encode(
        y=alt.Y("median:Q", title=label, scale=alt.Scale(zero=False))
    )
    line = base.transform_filter("isValid(datum.value)").mark_line(color="#616161", strokeWidth=1).encode(y=y)
    statuses = [s for s in POINT_STYLE if s in {r["status"] for r in rows}]
    dots = base.mark_point(filled=True, size=110, opacity=1, stroke="white", strokeWidth=0.8).encode(
        y=y,
        color=alt.Color(
            "status:N",
            title="run",
            legend=alt.Legend(symbolSize=110),
            scale=alt.Scale(domain=statuses, range=[POINT_STYLE[s][0] for s in statuses]),
        ),
        shape=alt.Shape(
            "status:N",
            legend=alt.Legend(symbolSize=110),
            scale=alt.Scale(domain=statuses, range=[POINT_STYLE[s][1] for s in statuses]),
        ),
        tooltip=[
            "run_id:N",
            "status:N",
            "value:Q",
            "band_low:Q",
            "band_high:Q",
            alt.Tooltip("band_from:N", title="band"),
            alt.Tooltip("run_at:T", format="%Y-%m-%d %H:%M:%S", formatType="utc"),
        ],
    )
    return _svg(alt.layer(band, median, line, dots))


def over_time(rows: list[dict[str, Any]], value: str, title: str, series: str | None = None) -> Any:
    """A value per run (one line per `series` value, if given) over the time each run started, with points."""
    keep = ["run_id", value, *([series] if series else [])]
    shown = [r for r in rows if r.get(value) is not None]
    data = [{"started_at": _ms(r["started_at"]), **{k: r.get(k) for k in keep}} for r in shown]
    enc: dict[str, Any] = {
        "x": time_axis([r["started_at"] for r in shown], "started_at"),
        "y": alt.Y(f"{value}:Q", title=title),
        "tooltip": [f"{k}:N" for k in keep],
    }
    if series:
        enc["color"] = alt.Color(f"{series}:N", title=series)
    return _svg(alt.Chart(alt.InlineData(values=data)).mark_line(point=True).encode(**enc))


def check_outcomes(checks: list[dict[str, Any]]) -> Any:
    """Checks per run by outcome (passed, warned, failed...), stacked: a warned check counts as warned."""
    data = [
        {
            "started_at": _ms(c["started_at"]),
            "run_id": c["run_id"],
            "check": c["check"],
            "outcome": str(c.get("check_status") or "unknown"),
        }
        for c in checks
    ]
    seen = {d["outcome"] for d in data}
    order = [o for o in CHECK_COLORS if o in seen] + sorted(seen - set(CHECK_COLORS))
    return _svg(
        alt.Chart(alt.InlineData(values=data))
        .mark_bar(size=12)
        .encode(
            x=time_axis([c["started_at"] for c in checks], "started_at"),
            y=alt.Y("count():Q", title="checks", axis=alt.Axis(format="d", tickMinStep=1)),
            color=alt.Color("outcome:N", title="outcome", scale=_palette(order, CHECK_COLORS)),
            tooltip=["run_id:N", "check:N", "outcome:N"],
        )
    )


def waited(since: datetime, now: datetime | None = None) -> str:
    """How long a run has waited, from when it was held, at this render: cached reads keep the time, never the
    age, so "waiting 2m" advances with each refresh."""
    held = since if since.tzinfo else since.replace(tzinfo=UTC)
    return age_words(max(0.0, ((now or datetime.now(UTC)) - held).total_seconds()))
