"""Rows on main at a snapshot whose summary has no total (Iceberg leaves total-records out after a delete of every
file: a Spark Declarative Pipelines refresh truncates, then appends)."""

from __future__ import annotations

from datetime import datetime

from wapflow.lakehouse.model import Snapshot, rows_at


def snap(sid: int, parent: int | None, **summary: str) -> Snapshot:
    return Snapshot(sid, parent, datetime(2026, 12, 2), summary.pop("op", "append"), summary)


def test_a_total_is_used_as_it_is_and_a_missing_one_is_carried_from_the_nearest_ancestor() -> None:
    chain = {
        1: snap(1, None, **{"added-records": "20", "total-records": "20"}),
        2: snap(2, 1, op="delete", **{"deleted-records": "20"}),  # truncate: no totals
        3: snap(3, 2, **{"added-records": "30"}),
    }
    assert [rows_at(chain, s) for s in (1, 2, 3)] == [20, 0, 30]


def test_no_ancestor_with_a_total_is_unknown_not_zero() -> None:
    chain = {2: snap(2, 1, **{"added-records": "5"})}  # its parent expired
    assert rows_at(chain, 2) is None
    assert rows_at({1: snap(1, None, **{"added-records": "5"})}, 1) == 5  # the first snapshot starts from nothing
    assert rows_at(chain, None) is None
