"""Numbers and times as people read them: the one formatter of values for display, in the CLI, the dashboard,
alerts and reports (wapflow.service.render builds its report text on it; the audit words its findings with it).

What it promises: an integer (or a float that is a whole number, below 1e15) exactly, `12001` never `1.2e+04`;
thousands separated only where asked (`grouped`: table cells), never in --json, which keeps the machine values;
other numbers to at most 4 significant digits (the whole part never rounded away: 1234567.8 is `1234568`), no
exponent for ordinary magnitudes; a magnitude below TINY as `< 0.000001` (a float sum's rounding noise, not a
figure); a share of a whole as a percentage to 2 decimals, a tiny one `< 0.01%`; Iceberg's time bounds (epoch
microseconds of a timestamp column, days of a date column) as times where the column's type is known.
Imports nothing of wapflow: every layer may use it.
"""

from __future__ import annotations

import math
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

SIGNIFICANT = 4  # digits of a number that is not whole
TINY = 1e-6  # magnitudes below this (but not 0) show as `< 0.000001`
_WHOLE_BELOW = 1e15  # floats whole below this show as integers
_EPOCH_DAY = date(1970, 1, 1)
_EPOCH = datetime(1970, 1, 1)

# Columns whose values a person copies into the next command (run ids, branches, tables, snapshot and alert ids,
# Nessie hashes): shown whole, never wrapped or cut, in the CLI's tables and the dashboard's grids.
ID_COLUMNS = frozenset({"run_id", "group_id", "branch", "table", "table_name", "snapshot_id", "pass_id", "hash", "id"})
# Columns of one short word (a status, a count, a duration): never wrapped or cut either (`publis/hed`,
# `awaiting_re…` read worse than a wider table).
WORD_COLUMNS = frozenset({"status", "state", "rows", "attempts", "severity", "action", "kind", "review", "took"})


def is_time(column: str) -> bool:
    """A time column (`started_at`, `run_at`): one value, never wrapped (`2026-1 / 2-02` reads as two)."""
    return column.endswith("_at")


def is_id(column: str) -> bool:
    """Whether a column holds ids (ID_COLUMNS, any `..._id`): copied as they are, their numbers never grouped."""
    return column in ID_COLUMNS or column.endswith("_id")


def is_whole(column: str) -> bool:
    """Whether a column's cells are shown whole: ids, words and times."""
    return is_id(column) or column in WORD_COLUMNS or is_time(column)


def number(v: float | int | Decimal, *, grouped: bool = False) -> str:
    """A number for people: a whole number exactly (`grouped`: with thousands separators, `12,001`), anything
    else to at most SIGNIFICANT significant digits without an exponent (212.5, 0.003, 1234568), a magnitude
    below TINY as `< 0.000001`; a bool as yes/no."""
    if isinstance(v, bool):
        return "yes" if v else "no"
    sep = "," if grouped else ""
    if isinstance(v, int):
        return f"{v:{sep}d}"
    if isinstance(v, Decimal) and v.is_finite() and v == v.to_integral_value():
        return f"{int(v):{sep}d}"
    f = float(v)
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "∞" if f > 0 else "-∞"
    if f.is_integer() and abs(f) < _WHOLE_BELOW:
        return f"{int(f):{sep}d}"
    if abs(f) < TINY:
        return f"< {TINY:.6f}" if f > 0 else f"> -{TINY:.6f}"
    if abs(f) >= _WHOLE_BELOW:
        return f"{f:.{SIGNIFICANT}g}"
    digits = max(0, SIGNIFICANT - 1 - math.floor(math.log10(abs(f))))
    r = round(f, digits)
    if float(r).is_integer():
        return f"{int(r):{sep}d}"
    return f"{r:{sep}.{digits}f}".rstrip("0").rstrip(".")


def rounded(v: float) -> float:
    """A float as `number` shows it, kept a number (a grid sorts it): to SIGNIFICANT significant digits, the whole
    part never rounded away; whole, tiny, huge and non-finite values unchanged."""
    f = float(v)
    if not math.isfinite(f) or f.is_integer() or abs(f) < TINY or abs(f) >= _WHOLE_BELOW:
        return f
    return round(f, max(0, SIGNIFICANT - 1 - math.floor(math.log10(abs(f)))))


def percent(share: float) -> str:
    """A share of a whole (0.0123) as a percentage to 2 decimals (`1.23%`); a share below 0.005% but not 0 as
    `< 0.01%`, so a tiny difference does not read as none."""
    p = float(share) * 100
    if p and abs(p) < 0.005:
        return "< 0.01%" if p > 0 else "> -0.01%"
    return f"{p:.2f}%"


def time_bound(kind: str, v: Any) -> Any:
    """A bound as Iceberg stores it, as a time where the column's type says it is one: a date column's days since
    1970 as a date, a timestamp's microseconds since 1970 as the wall time written (timestamp without time zone;
    `local`: a timestamp with time zone as naive local time, as PySpark returns it). `kind` is Iceberg's type
    name (date, timestamp, timestamptz, timestamp_ns, timestamptz_ns); other kinds and non-integers unchanged."""
    if isinstance(v, bool) or not isinstance(v, int):
        return v
    if kind == "date":
        return _EPOCH_DAY + timedelta(days=v)
    if kind in ("timestamp", "timestamp_ns"):
        micros = v // 1000 if kind.endswith("_ns") else v
        return _EPOCH + timedelta(microseconds=micros)
    if kind in ("timestamptz", "timestamptz_ns"):
        micros = v // 1000 if kind.endswith("_ns") else v
        return datetime.fromtimestamp(micros // 1_000_000).replace(microsecond=micros % 1_000_000)
    return v


def when(v: datetime | date) -> str:
    """A time to the second (`2026-11-19 08:00:00`, its offset where it has one), a date as `2026-11-19`."""
    if isinstance(v, datetime):
        return v.isoformat(sep=" ", timespec="seconds")
    return v.isoformat()
