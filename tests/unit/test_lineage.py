"""Run lineage (wapflow.lakehouse.lineage) on hand-made snapshot histories: no Spark."""

from __future__ import annotations

from datetime import UTC, datetime

from wapflow.lakehouse.lineage import (
    find_published,
    on_main,
    origin,
    run_id_of,
    run_of,
    run_properties,
)
from wapflow.lakehouse.model import REVERTED_PROP, RUN_ID_PROP, SOURCE_SNAPSHOT_PROP, Snapshot
from wapflow.sql.identifiers import TableName

T = TableName.parse("nyc.trips")


def snap(sid: int, parent: int | None, **summary: str) -> Snapshot:
    return Snapshot(sid, parent, datetime(2026, 1, 1, tzinfo=UTC), "append", dict(summary))


class FakeTables:
    """The three reads lineage needs of Tables: snapshots, main's head, ancestry."""

    def __init__(self, snaps: list[Snapshot], head: int) -> None:
        self.snaps = {s.snapshot_id: s for s in snaps}
        self.main = head

    def snapshots(self, table: TableName) -> dict[int, Snapshot]:
        return self.snaps

    def head(self, table: TableName, ref: str) -> int:
        return self.main

    def ancestry(self, snapshots: dict[int, Snapshot], head: int | None) -> list[Snapshot]:
        out = []
        while head is not None:
            out.append(snapshots[head])
            head = snapshots[head].parent_id
        return out


def test_a_cherry_pick_is_its_source_snapshots_run() -> None:
    props = run_properties("r1", ["a.parquet", "b.parquet"], "f" * 32)
    branch = snap(10, 1, **props)
    picked = snap(11, 2, **{SOURCE_SNAPSHOT_PROP: "10"})
    other = snap(12, 11, **{RUN_ID_PROP: "r2"})
    snaps = {s.snapshot_id: s for s in (branch, picked, other)}
    assert picked.run_id is None and run_of(snaps, picked) == "r1" and run_of(snaps, other) == "r2"
    assert origin(snaps, picked) is branch and origin(snaps, other) is other
    assert origin(snaps, snap(13, 12, **{SOURCE_SNAPSHOT_PROP: "99"})) is None  # the source was expired
    assert run_id_of({SOURCE_SNAPSHOT_PROP: "99"}, lambda sid: None) is None
    assert branch.summary["wapflow.sources"] == "a.parquet,b.parquet"


def test_published_follows_cherry_picks_and_stops_at_a_revert() -> None:
    base = snap(1, None, **{RUN_ID_PROP: "r0"})
    mine = snap(10, 1, **{RUN_ID_PROP: "r1"})  # on the run's branch, never on main
    picked = snap(2, 1, **{SOURCE_SNAPSHOT_PROP: "10"})
    tables = FakeTables([base, mine, picked], head=2)
    assert find_published(tables, T, "r1") == 2 and on_main(tables, T, "r1") == [2]  # type: ignore[arg-type]
    assert find_published(tables, T, "r9") is None  # type: ignore[arg-type]
    reverted = snap(3, 2, **{REVERTED_PROP: "r1"})
    tables = FakeTables([base, mine, picked, reverted], head=3)
    assert find_published(tables, T, "r1") is None  # type: ignore[arg-type]
    again = snap(4, 3, **{RUN_ID_PROP: "r1"})  # published again after `wap retry`
    tables = FakeTables([base, mine, picked, reverted, again], head=4)
    assert on_main(tables, T, "r1") == [4]  # type: ignore[arg-type]
