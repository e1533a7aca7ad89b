"""A blocked real day published in one command: `wap approve` of a run blocked only by checks that judge it against
the table's history (anomaly, volume). Re-audited (those verdicts warn, saying who and why), published, and the
day enters the history the next runs are judged against. A run blocked by a rule about its rows is not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import wapflow
from support.data import trips_file
from support.embedded_reader import rows
from wapflow.errors import UsageError
from wapflow.pipeline import run_wap

pytestmark = pytest.mark.spark

VOLUME = {"check": "volume", "runs": 3, "tolerance": 0.5}
NOT_NULL = {"check": "not_null", "column": "passenger_count"}


def test_a_blocked_real_day_is_published_by_one_approval_and_enters_the_history(
    lakehouse_factory: Any, landing: Path
) -> None:
    lh = lakehouse_factory({"nyc.trips": {"checks": [VOLUME, NOT_NULL]}})
    for day in range(3):
        f = trips_file(landing, f"d{day}.parquet", 100, start_id=1000 * day + 1, seed=day)
        assert run_wap(lh, "nyc.trips", [str(f)]).status == "published"
    storm = run_wap(lh, "nyc.trips", [str(trips_file(landing, "storm.parquet", 20, start_id=9001))])
    assert storm.status == "blocked", storm.message
    assert [c["check"] for c in storm.checks if c["status"] == "failed"] == ["volume"]
    on_main = len(rows(lh, "nyc.trips"))

    res = wapflow.approve(lh, storm.run_id, reason="snow storm: a real day", by="ana")
    assert res.status == "published", res.message
    assert len(rows(lh, "nyc.trips")) == on_main + 20  # the run's own rows, once
    (volume,) = [c for c in res.checks if c["check"] == "volume"]
    assert volume["status"] == "warned" and "overridden by ana: snow storm: a real day" in volume["threshold"]
    rec = lh.store.get(storm.run_id)
    assert rec is not None and (rec.status, rec.review, rec.review_by) == ("published", "approved", "ana")
    got = wapflow.metrics(lh, "nyc.trips", metric="row_count")
    assert (got[0]["run_id"], got[0]["status"], got[0]["value"]) == (storm.run_id, "published", 20.0)
    with pytest.raises(wapflow.AlreadyDecided):
        wapflow.approve(lh, storm.run_id, reason="again", by="bo")


def test_a_run_blocked_by_a_rule_about_its_rows_is_not_overridden(lakehouse_factory: Any, landing: Path) -> None:
    lh = lakehouse_factory({"nyc.trips": {"checks": [NOT_NULL]}})
    bad = run_wap(lh, "nyc.trips", [str(trips_file(landing, "nulls.parquet", 50, null_rate=0.3))])
    assert bad.status == "blocked"
    with pytest.raises(UsageError, match=r"not_null\(passenger_count\): no approval overrides that"):
        wapflow.approve(lh, bad.run_id, reason="looks fine", by="ana")
    assert rows(lh, "nyc.trips") == [] and lh.store.get(bad.run_id).status == "blocked"
