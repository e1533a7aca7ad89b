"""A category column's values and their rows (anomaly metric "values"), without a JVM: a value each of the
window's runs had, and which the batch would have held 7 or more rows of, vanished; a value none of the
remembered runs had, in 1% or more of the batch's rows, appeared; either blocks, with the values named, and rarer
changes are only reported. Synthetic histories with known answers, recorded in and read back from a real run
store."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from wapflow import checks as C
from wapflow.audit.anomaly import VALUES_CAP, as_counts, category_changes
from wapflow.audit.checktype import AuditContext, Compiled
from wapflow.audit.spec import AnomalyCheck, CheckType
from wapflow.runs.metrics import MetricHistory
from wapflow.runs.store import RunRecord, RunStore

T0 = datetime(2026, 11, 1, tzinfo=UTC)
# Flights a day per carrier: AA 500 (half the day), B6 300, DL 190, HA 2 (one return trip), 992 in all.
DAY = {"AA": 500, "B6": 300, "DL": 190, "HA": 2}
RARE = "OO"  # 1 flight, on days 2, 5 and 7 only


def compiled(chk: CheckType) -> Compiled:
    return Compiled(0, chk, None, None, None, "", {c: c for c in chk.columns()})  # type: ignore[arg-type]


def test_vanished_and_appeared_against_known_counts() -> None:
    window = [{"AA": 90, "B6": 10}, {"AA": 95, "B6": 5, "HA": 1}, {"AA": 92, "B6": 8}]
    older = [{"AA": 99, "OO": 1}]
    same = category_changes({"AA": 93, "B6": 7}, window, window + older)
    assert same.ok and same == category_changes({"AA": 93, "B6": 7, "HA": 1, "OO": 1}, window, window + older)
    # B6's median share is 8%: at 100 rows, 8 expected, e^-8 by chance: vanished. At 50 rows, 4: reported only.
    gone = category_changes({"AA": 100}, window, window + older)
    assert gone.vanished == [("B6", pytest.approx(8.0))] and not gone.ok
    small = category_changes({"AA": 50}, window, window + older)
    assert small.ok and small.rare_gone == ["B6"]
    # New: in 1% or more of the rows blocks (2 of 102), under it is reported (1 of 201).
    assert category_changes({"AA": 92, "B6": 8, "ZZ": 2}, window, window).appeared == [("ZZ", 2)]
    rare = category_changes({"AA": 190, "B6": 10, "ZZ": 1}, window, window)
    assert rare.ok and rare.rare_new == ["ZZ"]
    # A run that recorded its set alone (no rows) counts as expecting the value.
    assert as_counts(["AA", "B6"]) == {"AA": None, "B6": None}
    assert category_changes({"AA": 5}, [as_counts(["AA", "B6"])], []).vanished == [("B6", 5.0)]


def days_of(tmp_path: Path, n: int) -> MetricHistory:
    """`n` daily published runs of t.flights (DAY, RARE on days 2, 5 and 7), each run's values recorded as the
    audit records them (the check's `measured`), and a blocked run whose value QQ is never history."""
    store = RunStore(f"sqlite:///{tmp_path / 'runs.db'}")
    history = MetricHistory(store.engine)
    chk = C.anomaly("values", column="carrier")
    for i in range(n):
        at = T0 + timedelta(days=i)
        rid = f"r{i:03d}"
        carriers = {**DAY, **({RARE: 1} if i in (2, 5, 7) else {})}
        store.save(RunRecord(run_id=rid, table_name="t.flights", status="published", started_at=at))
        history.record(rid, "t.flights", at, chk.measured(compiled(chk), {"c0_v": carriers}, 992))
    store.save(RunRecord(run_id="blocked", table_name="t.flights", status="blocked", started_at=T0))
    history.record("blocked", "t.flights", T0, {("values", "carrier"): json.dumps({"QQ": 500})})
    return history


def context(history: MetricHistory) -> AuditContext:
    return AuditContext(metric_texts=lambda m, col, n: history.published_texts("t.flights", m, col, n))


def test_a_vanished_or_new_category_blocks_and_is_named(tmp_path: Path) -> None:
    history = days_of(tmp_path, 60)
    assert json.loads(history.published_texts("t.flights", "values", "carrier", 1)[0]) == DAY
    chk = C.anomaly("values", column="carrier")
    c = compiled(chk)
    ctx = context(history)
    usual = chk.verdict(c, {"c0_v": DAY}, 992, ctx)
    assert usual.ok and usual.observed == {"values": 4, "history": 30, "memory": 60}, usual.observed
    # The rare carrier, last seen 52 days ago (outside the 30-run window, inside the memory): not new.
    assert chk.verdict(c, {"c0_v": {**DAY, RARE: 1}}, 993, ctx).ok
    # HA's return trip cancelled: 2 flights expected, missing by chance on e^-2 of days: reported, passes.
    no_ha = chk.verdict(c, {"c0_v": {"AA": 500, "B6": 300, "DL": 190}}, 990, ctx)
    assert no_ha.ok and no_ha.observed["rare_values_missing"] == ["HA"]
    gone = chk.verdict(c, {"c0_v": {"AA": 500, "B6": 300, "HA": 2}}, 802, ctx)
    assert not gone.ok and not gone.warn_only and gone.observed["vanished"] == ["DL (~154 rows expected)"]
    new = chk.verdict(c, {"c0_v": {**DAY, "ZZ": 50}}, 1042, ctx)
    assert not new.ok and new.observed["appeared"] == ["ZZ (50 rows)"] and "vanished" not in new.observed
    assert "each of the last 30 published runs" in c.threshold
    # The blocked run's QQ never entered the history: still new.
    assert not chk.verdict(c, {"c0_v": {**DAY, "QQ": 100}}, 1092, ctx).ok


def test_a_short_history_warns_and_too_many_values_is_not_a_category(tmp_path: Path) -> None:
    history = days_of(tmp_path, 3)
    chk = C.anomaly("values", column="carrier")
    c = compiled(chk)
    short = chk.verdict(c, {"c0_v": {"ZZ": 900}}, 900, context(history))
    assert not short.ok and short.warn_only and "3 of 7 runs of history" in c.threshold
    many = {f"v{i}": 1 for i in range(VALUES_CAP + 1)}
    wide = chk.verdict(c, {"c0_v": many}, 900, context(days_of(tmp_path / "x", 10)))
    assert wide.warn_only and "not a category column" in wide.observed
    assert chk.measured(c, {"c0_v": many}, 900) == {}  # not recorded either


def test_values_takes_a_column_and_is_a_grouped_count() -> None:
    with pytest.raises(ValueError, match="needs a column"):
        AnomalyCheck.model_validate({"check": "anomaly", "metric": "values"})
    chk = C.anomaly("values", column="carrier")
    assert not chk.observable and chk.aggregates(compiled(chk)) == []
    assert C.anomaly("distinct", column="carrier").observable


def test_the_report_says_which_values_in_words(tmp_path: Path) -> None:
    from wapflow.service import render

    history = days_of(tmp_path, 60)
    chk = C.anomaly("values", column="carrier")
    gone = chk.verdict(compiled(chk), {"c0_v": {"AA": 500, "B6": 300, "ZZ": 40}}, 840, context(history))
    assert render.observed(gone.observed) == (
        "3 values; vanished: DL (~161 rows expected); appeared: ZZ (40 rows); rare, missing: HA; "
        "30 runs of history, 60 remembered"
    )
