"""wapflow.lakehouse.pyiceberg_client on a real embedded (SQLite) catalog, no JVM: the file removal `wap revert`
commits on a Spark Connect client. A concurrent commit on main is made by a second catalog client between the
removal's read of main and its commit (the window a real concurrent writer hits), and must survive it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from wapflow.config import WapConfig, parse_config
from wapflow.errors import UsageError
from wapflow.lakehouse.pyiceberg_client import MISSING_FILES, add_files, open_catalog, remove_added_files
from wapflow.sql.identifiers import TableName

T = TableName.parse("ns.t")
PROPS = {"wapflow.reverted-run-id": "r1"}


def batch(*ids: int) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64())})


def lake(tmp_path: Path) -> tuple[WapConfig, Any, list[int]]:
    """A table whose main holds two appends (ids 1-3, then 10-11): the config, a catalog client, the two snapshots."""
    (tmp_path / "lakehouse").mkdir()
    cfg = parse_config({"lakehouse": {"warehouse": str(tmp_path / "lakehouse"), "catalog_name": "lake"}})
    cat = open_catalog(cfg, why="the test")
    cat.create_namespace("ns")
    tbl = cat.create_table("ns.t", schema=batch().schema)
    snaps = []
    for ids in ((1, 2, 3), (10, 11)):
        tbl.append(batch(*ids))
        snaps.append(tbl.current_snapshot().snapshot_id)
    return cfg, cat, snaps


def main_ids(cfg: WapConfig) -> list[int]:
    tbl = open_catalog(cfg, why="the test").load_table("ns.t")
    return sorted(tbl.scan().to_arrow().column("id").to_pylist())


class CommitsMeanwhile:
    """The catalog, except that another client appends `ids` to `branch` right after the first load_table."""

    def __init__(self, cfg: WapConfig, cat: Any, ids: tuple[int, ...], branch: str = "main") -> None:
        self.cfg, self.cat, self.ids, self.branch, self.loads = cfg, cat, ids, branch, 0

    def load_table(self, ident: Any) -> Any:
        tbl = self.cat.load_table(ident)
        self.loads += 1
        if self.loads == 1:
            other = open_catalog(self.cfg, why="the other writer").load_table(ident)
            other.append(batch(*self.ids), branch=self.branch)
        return tbl


def test_removes_exactly_a_snapshots_files_in_one_snapshot_with_the_properties(tmp_path: Path) -> None:
    cfg, cat, (first, second) = lake(tmp_path)
    sid = remove_added_files(cat, T, [first], PROPS)
    tbl = cat.load_table("ns.t")
    snap = tbl.current_snapshot()
    assert snap.snapshot_id == sid and snap.parent_snapshot_id == second
    assert snap.summary["wapflow.reverted-run-id"] == "r1" and snap.summary["deleted-records"] == "3"
    assert main_ids(cfg) == [10, 11]


def test_a_commit_on_main_meanwhile_is_kept(tmp_path: Path) -> None:
    cfg, cat, (first, _) = lake(tmp_path)
    racing = CommitsMeanwhile(cfg, cat, (20, 21, 22))
    sid = remove_added_files(racing, T, [first], PROPS)  # type: ignore[arg-type]  # a Catalog in all it uses
    assert main_ids(cfg) == [10, 11, 20, 21, 22]  # the other writer's rows survive; the run's are gone
    tbl = cat.load_table("ns.t")
    snap = tbl.current_snapshot()
    assert snap.snapshot_id == sid and snap.summary["wapflow.reverted-run-id"] == "r1"
    assert tbl.snapshot_by_id(snap.parent_snapshot_id).summary["added-records"] == "3"  # on the other commit


def test_adding_files_to_a_branch_while_another_branch_commits_retries_on_the_new_head(tmp_path: Path) -> None:
    """Two runs' branches of one table (Spark Connect runs adopting files): the other run's commit lands between
    this one's load and commit. Its branch check still passes, but the snapshot PyIceberg built carries a stale
    sequence number, which the catalog refuses with a ValueError; that is a conflict to retry, not a bug (CI
    saw it as `BugError: ... older than last sequence number`)."""
    cfg, cat, (_, second) = lake(tmp_path)
    tbl = cat.load_table("ns.t")
    for ref in ("wap_a", "wap_b"):
        tbl.manage_snapshots().create_branch(second, ref).commit()
    landed = tmp_path / "lakehouse" / "landed.parquet"
    pq.write_table(batch(100, 101), landed)
    racing = CommitsMeanwhile(cfg, cat, (50,), branch="wap_a")
    add_files(racing, T, "wap_b", [str(landed)], PROPS)  # type: ignore[arg-type]  # a Catalog in all it uses
    assert racing.loads == 2  # the first attempt was stale
    tbl = cat.load_table("ns.t")

    def ids(ref: str) -> list[int]:
        sid = tbl.metadata.refs[ref].snapshot_id
        return sorted(tbl.scan(snapshot_id=sid).to_arrow().column("id").to_pylist())

    assert ids("wap_b") == [1, 2, 3, 10, 11, 100, 101]
    assert ids("wap_a") == [1, 2, 3, 10, 11, 50]  # the other run's commit is kept
    assert ids("main") == [1, 2, 3, 10, 11]
    b = tbl.snapshot_by_id(tbl.metadata.refs["wap_b"].snapshot_id)
    assert b.summary["wapflow.reverted-run-id"] == "r1" and b.parent_snapshot_id == second


def test_a_file_no_longer_on_main_fails_and_changes_nothing(tmp_path: Path) -> None:
    from pyiceberg.expressions import LessThan

    cfg, cat, (first, _) = lake(tmp_path)
    cat.load_table("ns.t").delete(LessThan("id", 5))  # the first append's file leaves main (as compaction would)
    head = cat.load_table("ns.t").current_snapshot().snapshot_id
    with pytest.raises(Exception, match=MISSING_FILES):
        remove_added_files(cat, T, [first], PROPS)
    assert cat.load_table("ns.t").current_snapshot().snapshot_id == head and main_ids(cfg) == [10, 11]


@pytest.mark.parametrize("kind", ["nessie", "hive"])
def test_catalogs_pyiceberg_is_not_opened_for_are_one_clear_error(tmp_path: Path, kind: str) -> None:
    lh: dict[str, Any] = {"warehouse": str(tmp_path), "catalog": kind}
    if kind == "nessie":
        lh["nessie_uri"] = "http://127.0.0.1:19120/api/v2"
    cfg = parse_config({"lakehouse": lh})
    with pytest.raises(UsageError) as e:
        open_catalog(cfg, why="a Spark Connect client removes a run's files")
    assert f'not catalog = "{kind}"' in e.value.message and "local[*]" in (e.value.hint or "")
