"""The set of a category column's values (anomaly metric "values"), without a JVM: a value each of the window's
runs had and the batch lacks vanished, a value none of the remembered runs had appeared; either blocks, with the
values named. Synthetic histories with known answers, recorded in and read back from a real run store."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from wapflow import checks as C
from wapflow.audit.anomaly import VALUES_CAP, category_changes
from wapflow.audit.checktype import AuditContext, Compiled
from wapflow.audit.spec import AnomalyCheck, CheckType
from wapflow.runs.metrics import MetricHistory
from wapflow.runs.store import RunRecord, RunStore

T0 = datetime(2026, 11, 1, tzinfo=UTC)
DAILY = ["AA", "B6", "DL", "UA"]  # every day
RARE = "OO"  # three days of the first ten


def compiled(chk: CheckType) -> Compiled:
    return Compiled(0, chk, None, None, None, "", {c: c for c in chk.columns()})  # type: ignore[arg-type]


def test_vanished_and_appeared_against_known_sets() -> None:
    window = [["AA", "B6", "HA"], ["AA", "B6"], ["AA", "B6", "DL"]]
    older = [["AA", "B6", "OO"]]
    assert category_changes(["AA", "B6"], window, window + older) == ([], [])
    assert category_changes(["AA"], window, window + older) == (["B6"], [])  # in each run of the window
    assert category_changes(["AA", "B6", "DL", "HA"], window, window + older) == ([], [])  # seen, not every day
    assert category_changes(["AA", "B6", "OO"], window, window + older) == ([], [])  # remembered beyond the window
    assert category_changes(["AA", "B6", "ZZ"], window, window + older) == ([], ["ZZ"])
    assert category_changes(["ZZ"], [], []) == ([], ["ZZ"])


def days_of(tmp_path: Path, n: int) -> MetricHistory:
    """`n` daily published runs of t.flights: the DAILY carriers every day, RARE on days 2, 5 and 7, each run's
    set recorded as the audit records it (the check's `measured`)."""
    store = RunStore(f"sqlite:///{tmp_path / 'runs.db'}")
    history = MetricHistory(store.engine)
    chk = C.anomaly("values", column="carrier")
    for i in range(n):
        at = T0 + timedelta(days=i)
        rid = f"r{i:03d}"
        carriers = DAILY + ([RARE] if i in (2, 5, 7) else [])
        store.save(RunRecord(run_id=rid, table_name="t.flights", status="published", started_at=at))
        history.record(rid, "t.flights", at, chk.measured(compiled(chk), {"c0_v": carriers}, 900))
    store.save(RunRecord(run_id="blocked", table_name="t.flights", status="blocked", started_at=T0))
    history.record("blocked", "t.flights", T0, {("values", "carrier"): json.dumps(["QQ"])})  # never history
    return history


def context(history: MetricHistory) -> AuditContext:
    return AuditContext(metric_texts=lambda m, col, n: history.published_texts("t.flights", m, col, n))


def test_a_vanished_or_new_category_blocks_and_is_named(tmp_path: Path) -> None:
    history = days_of(tmp_path, 60)
    assert json.loads(history.published_texts("t.flights", "values", "carrier", 1)[0]) == DAILY
    chk = C.anomaly("values", column="carrier")
    c = compiled(chk)
    ctx = context(history)
    usual = chk.verdict(c, {"c0_v": DAILY}, 900, ctx)
    assert usual.ok and usual.observed == {"values": 4, "history": 30, "memory": 60}, usual.observed
    # The rare carrier, last seen 52 days ago (outside the 30-run window, inside the memory): not new.
    assert chk.verdict(c, {"c0_v": [*DAILY, RARE]}, 900, ctx).ok
    gone = chk.verdict(c, {"c0_v": ["AA", "B6", "UA"]}, 900, ctx)
    assert not gone.ok and not gone.warn_only and gone.observed["vanished"] == ["DL"]
    new = chk.verdict(c, {"c0_v": [*DAILY, "ZZ"]}, 900, ctx)
    assert not new.ok and new.observed["appeared"] == ["ZZ"] and "vanished" not in new.observed
    assert "each of the last 30 published runs" in c.threshold
    # The blocked run's "QQ" never entered the history: still new.
    assert not chk.verdict(c, {"c0_v": [*DAILY, "QQ"]}, 900, ctx).ok


def test_a_short_history_warns_and_too_many_values_is_not_a_category(tmp_path: Path) -> None:
    history = days_of(tmp_path, 3)
    chk = C.anomaly("values", column="carrier")
    c = compiled(chk)
    short = chk.verdict(c, {"c0_v": ["ZZ"]}, 900, context(history))
    assert not short.ok and short.warn_only and "3 of 7 runs of history" in c.threshold
    many = [f"v{i}" for i in range(VALUES_CAP + 1)]
    wide = chk.verdict(c, {"c0_v": many}, 900, context(days_of(tmp_path / "x", 10)))
    assert wide.warn_only and "not a category column" in wide.observed
    assert chk.measured(c, {"c0_v": many}, 900) == {}  # not recorded either


def test_values_takes_a_column() -> None:
    with pytest.raises(ValueError, match="needs a column"):
        AnomalyCheck.model_validate({"check": "anomaly", "metric": "values"})
