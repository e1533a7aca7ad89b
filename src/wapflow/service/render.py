"""Values as people read them: the one place that turns a check's observed value, a report field or a
maintenance figure into text, for the CLI and the dashboard alike.

The run store and --json keep the values as they are (dicts, lists, None); what a person sees never shows a
Python repr: no `None` (an absent value is `—`, or the field is left out), no `{...}` or quoted keys, numbers
as wapflow.display words them (counts exact, others to at most 4 significant digits, no exponent), a band as
`[212.5, 1150]`. Pure Python on wapflow.display alone: the CLI and the dashboard (which may import wapflow.service
only) both use it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from wapflow.display import number, when

NONE = "—"  # an absent value
NULL = "null"  # a SQL NULL in a row of data (a failing row's column)

# Evidence of an anomaly or volume check (wapflow.audit.anomaly.Band.evidence) and its short-history verdict.
_BAND_KEYS = {"value", "band", "median", "mad", "history"}
_SHORT_KEYS = {"value", "history", "min_history"}
# Evidence of an anomaly check on a category column's values (metric "values").
_VALUES_KEYS = {"values", "history", "memory"}
# What a run changes (wapflow.writing.modes.Changes.to_dict), the observed value of its `changes` line.
_CHANGE_KINDS = ("rows_inserted", "rows_updated", "rows_deleted", "rows_replaced")
# Maintenance figures a person does not read in a line (timings, id lists; --json has them).
_QUIET_FIGURES = ("seconds", "snapshot_ids", "sample")


def text(v: Any, none: str = NONE) -> str:
    """Any value of a report for people: None as `none`, numbers (number), times to the second, a pair of
    numbers as `[a, b]`, other lists comma-separated, mappings as `key value` pairs."""
    if v is None:
        return none
    if isinstance(v, str):
        return v
    if isinstance(v, bool | int | float | Decimal):
        return number(v)
    if isinstance(v, datetime | date):
        return when(v)
    if isinstance(v, Mapping):
        return ", ".join(f"{_label(k)} {text(x, none)}" for k, x in v.items())
    if isinstance(v, Sequence | set | frozenset):
        items = list(v)
        if items and all(isinstance(x, int | float | Decimal) and not isinstance(x, bool) for x in items):
            return "[" + ", ".join(number(x) for x in items) + "]"
        return ", ".join(text(x, none) for x in items)
    return str(v)


def _label(key: object) -> str:
    return str(key).replace("_", " ")


def observed(v: Any) -> str:
    """A check's observed value: a count or rate, a text, an anomaly or volume check's evidence (`value 759.3,
    band [212.5, 1150], 2.4 MADs above the median`), its short history (`value 200, 2 of 7 runs of history`),
    or what a run changes (`inserted 5, updated 3; main had 100 rows`)."""
    if isinstance(v, Mapping):
        keys = set(v)
        if keys >= _BAND_KEYS:
            return _band(v)
        if keys >= _SHORT_KEYS:
            return _short_history(v)
        if keys >= _VALUES_KEYS:
            return _values(v)
        if keys & set(_CHANGE_KINDS):
            return _changes(v)
    return text(v)


def _band(v: Mapping[str, Any]) -> str:
    value, (lo, hi), median, mad = v["value"], v["band"], v["median"], v["mad"]
    parts = [f"value {number(value)}" if value is not None else "no value", f"band [{number(lo)}, {number(hi)}]"]
    if value is not None and mad:
        d = (float(value) - float(median)) / float(mad)
        if round(d, 1):
            parts.append(f"{abs(d):.1f} MADs {'above' if d > 0 else 'below'} the median {number(median)}")
        else:
            parts.append(f"at the median {number(median)}")
    else:
        parts.append(f"median {number(median)}")
    parts.append(_runs(v["history"]) + (f" ({v['seasonality']})" if v.get("seasonality") else ""))
    if v.get("left_out"):  # runs of the same span the band was not made of (blocked, awaiting review...)
        parts.append(f"left out {v['left_out']}")
    if v.get("day"):  # the batch's own day (its table's time_column), which seasonality judged it by
        parts.append(f"judged by the batch's day, {str(v['day']).split(':')[0]}")
    if v.get("holiday"):  # the holiday of the table's calendar the day is near: a count's least change is wider
        parts.append(f"near a holiday: {v['holiday']}")
    if v.get("companion"):  # a null fraction against what its companion column's nulls predict
        parts.append(
            f"{float(v['unexplained']) * 100:+.2g} points beyond what {v['companion']}'s nulls predict "
            f"(at most {float(v['unexplained_at_most']) * 100:+.2g})"
        )
    if v.get("moved_with"):  # a mean that moved with one of its column's bounds: the column moved as a whole
        lo, hi = v["bound_band"]
        parts.append(
            f"moved as a whole: its {v['moved_with']} {number(v['bound_value'])} outside [{number(lo)}, {number(hi)}]"
        )
    return ", ".join(parts)


def _values(v: Mapping[str, Any]) -> str:
    """A category column's values against the history: what vanished or appeared (blocking), what rare value
    went or came (reported), and the runs it was judged against."""
    parts = [_count(int(v["values"]), "value")]
    for key, words in (
        ("vanished", "vanished"),
        ("appeared", "appeared"),
        ("rare_values_missing", "rare, missing"),
        ("rare_new_values", "rare, new"),
    ):
        if v.get(key):
            parts.append(f"{words}: {', '.join(str(x) for x in v[key])}")
    parts.append(f"{_runs(int(v['history']))} of history, {int(v['memory'])} remembered")
    return "; ".join(parts)


def _short_history(v: Mapping[str, Any]) -> str:
    value = "no value" if v["value"] is None else f"value {number(v['value'])}"
    basis = f" ({v['seasonality']})" if v.get("seasonality") else ""
    return f"{value}, {v['history']} of {v['min_history']} runs of history{basis}"


def _changes(v: Mapping[str, Any]) -> str:
    kinds = [f"{k.removeprefix('rows_')} {number(int(v.get(k) or 0))}" for k in _CHANGE_KINDS if v.get(k)]
    words = ", ".join(kinds) or "no change"
    return f"{words}; main had {_count(int(v.get('main_rows') or 0), 'row')}" if "main_rows" in v else words


def _runs(n: int) -> str:
    return _count(n, "run")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def check_cells(c: Mapping[str, Any]) -> dict[str, str]:
    """A check result's fields for people: observed, failing rows, threshold (absent ones as `—`)."""
    return {
        "observed": observed(c.get("observed")),
        "failing_rows": text(c.get("failing_rows")),
        "threshold": text(c.get("threshold") or None),
    }


def datum(v: Any) -> str:
    """A value of the data itself (a query's result, a failing row): exactly as stored, never rounded (333.05 is
    333.05, not 333); NULL as `null`, times in ISO form, nested values as text."""
    if v is None:
        return NULL
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float | Decimal):
        return str(v)
    if isinstance(v, datetime | date):
        return v.isoformat(sep=" ") if isinstance(v, datetime) else v.isoformat()
    if isinstance(v, str):
        return v
    return text(v)


def sample_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A failing row as a person reads it: a NULL as `null`, nested values as text; scalars as they are."""
    return {
        k: NULL if v is None else (text(v) if isinstance(v, Mapping | list | tuple | set) else v)
        for k, v in row.items()
    }


def kept_because(reasons: Mapping[str, Any]) -> str:
    """Why snapshots stay, with how many: `head of branch main: 1 snapshot, keep_last: 5 snapshots`."""
    return ", ".join(f"{why}: {_count(int(n), 'snapshot')}" for why, n in reasons.items()) or "nothing kept"


def figures(f: Mapping[str, Any], skip: Iterable[str] = _QUIET_FIGURES) -> str:
    """A maintenance action's figures in a line: `expire 3; keep 6; kept because head of branch main: 1
    snapshot, keep_last: 5 snapshots` (timings and id lists left out: --json has them)."""
    quiet = set(skip)
    parts = []
    for k, v in f.items():
        if k in quiet:
            continue
        if k == "kept_because" and isinstance(v, Mapping):
            shown = kept_because(v)
        elif k == "dropped" and isinstance(v, list):
            shown = ", ".join(_dropped(d) for d in v) or "none"
        elif isinstance(v, Mapping):
            shown = ", ".join(f"{_label(key)} = {text(x)}" for key, x in v.items()) or "none"
        elif isinstance(v, list | tuple) and not v:
            shown = "none"
        else:
            shown = text(v)
        parts.append(f"{_label(k)} {shown}")
    return "; ".join(parts)


def _dropped(d: Any) -> str:
    if isinstance(d, Mapping) and "branch" in d:
        what = ", ".join(text(d[k]) if k == "status" else f"run {text(d[k])}" for k in ("run_id", "status") if k in d)
        return f"{d['branch']} ({what})" if what else str(d["branch"])
    return text(d)


def shown_rows(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Rows for a table a person reads (the dashboard's): mappings and lists as text, and in a column with an
    absent value every value as text, the absent ones `—`; a column without one keeps its numbers."""
    names = list(dict.fromkeys(k for r in rows for k in r))
    gappy = {k for k in names if any(r.get(k) is None for r in rows) and any(r.get(k) is not None for r in rows)}
    out = []
    for r in rows:
        line: dict[str, Any] = {}
        for k in names:
            v = r.get(k)
            if k in gappy or v is None or isinstance(v, Mapping | list | tuple | set):
                line[k] = observed(v) if k == "observed" else text(v)
            else:
                line[k] = v
        out.append(line)
    return out
