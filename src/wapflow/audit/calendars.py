"""Public holidays near a batch's day: the days whose counts are not like the rest of their weekday.

A table may name the holiday calendar its data follows (`holidays = "US"`, `"US-NY"`, `"GB"`, `"DE-BY"`: a
country and optionally a subdivision, as the `holidays` package names them). A batch whose own day is a holiday
of it, or a day either side (Christmas Eve, the Sunday of a Monday holiday), is judged with a wider least change
for counts and sums (wapflow.audit.anomaly.HOLIDAY_CHANGE): a year of daily runs holds each holiday once, so no
band learns it from the history. No Spark; the `holidays` package is read only where a table names a calendar.
"""

from __future__ import annotations

from datetime import date, timedelta
from functools import lru_cache
from typing import Any

# A holiday and this many days either side of it.
HOLIDAY_DAYS = 1


def parse(code: str) -> tuple[str, str | None]:
    """A calendar's country and subdivision ("US-NY" -> ("US", "NY")), checked against those the `holidays`
    package knows; ValueError naming what is wrong and a few codes that exist."""
    import holidays

    head, _, tail = code.strip().partition("-")
    country, subdiv = head.upper(), tail.upper()
    known: dict[str, list[str]] = holidays.list_supported_countries()
    if country not in known:
        close = sorted(c for c in known if c[:1] == country[:1] and len(c) == 2)
        raise ValueError(
            f"no holiday calendar {code!r}: a country code such as US, GB, DE, FR"
            + (f" (known beginning with {country[:1]}: {', '.join(close)})" if close else "")
        )
    if subdiv and subdiv not in known[country]:
        raise ValueError(
            f"no subdivision {subdiv!r} of {country} in the holiday calendars: {', '.join(known[country][:12])}"
            + (", ..." if len(known[country]) > 12 else "")
        )
    return country, subdiv or None


@lru_cache(maxsize=64)
def _year(code: str, year: int) -> dict[date, str]:
    import holidays

    country, subdiv = parse(code)
    cal: Any = holidays.country_holidays(country, subdiv=subdiv, years=year)
    return {d: str(name) for d, name in cal.items()}


def holiday_near(day: date, code: str) -> str | None:
    """The holiday of calendar `code` on `day` or within HOLIDAY_DAYS of it, in words ("Thanksgiving Day, the
    day before Christmas Day"); None where there is none."""
    for offset in sorted(range(-HOLIDAY_DAYS, HOLIDAY_DAYS + 1), key=abs):
        d = day + timedelta(days=offset)
        name = _year(code, d.year).get(d)
        if name is not None:
            if offset == 0:
                return f"{name}, {d:%Y-%m-%d}"
            when = "before" if offset > 0 else "after"
            return f"the day {when} {name} ({d:%Y-%m-%d})" if abs(offset) == 1 else f"{abs(offset)} days {when} {name}"
    return None
