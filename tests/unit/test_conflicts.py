"""wapflow.lakehouse.conflicts, the one retry policy for commit conflicts, on real conflicts: two PyIceberg clients
of one embedded (SQLite) catalog, where moving main on metadata loaded before the other client's append fails
with PyIceberg's CommitFailedException ("branch main has changed"), as a publish meets a concurrent one (no JVM)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from wapflow.config import parse_config
from wapflow.errors import EXIT_TRANSIENT, CommitConflict, ConfigError
from wapflow.lakehouse.conflicts import CONFLICT_ATTEMPTS, conflict_wait, retry_on_conflict
from wapflow.lakehouse.pyiceberg_client import open_catalog
from wapflow.spark import errors as spark_errors


def catalog(tmp_path: Path) -> Any:
    """A table whose main holds one append (id 1)."""
    (tmp_path / "lakehouse").mkdir()
    cfg = parse_config({"lakehouse": {"warehouse": str(tmp_path / "lakehouse"), "catalog_name": "lake"}})
    cat = open_catalog(cfg, why="the test")
    cat.create_namespace("ns")
    append(cat.create_table("ns.t", schema=pa.schema([("id", pa.int64())])), 1)
    return cat


def append(tbl: Any, *ids: int) -> None:
    tbl.append(pa.table({"id": pa.array(ids, pa.int64())}))


def stale_handle(cat: Any) -> Any:
    """The table as loaded before another client's append to main (id 2): moving main on it conflicts."""
    tbl = cat.load_table("ns.t")
    append(cat.load_table("ns.t"), 2)
    return tbl


def move_main_to_first(tbl: Any) -> None:
    """main set back to the table's first snapshot, on the metadata `tbl` holds (PyIceberg requires main unchanged)."""
    first = min(tbl.snapshots(), key=lambda s: s.timestamp_ms).snapshot_id
    tbl.manage_snapshots().create_branch(snapshot_id=first, branch_name="main").commit()


def ids(cat: Any) -> list[int]:
    return sorted(cat.load_table("ns.t").scan().to_arrow().column("id").to_pylist())


def test_the_conflict_is_real(tmp_path: Path) -> None:
    """The exception the tests below retry is one wapflow classifies as a commit conflict."""
    tbl = stale_handle(catalog(tmp_path))
    with pytest.raises(Exception) as caught:
        move_main_to_first(tbl)
    assert spark_errors.commit_conflict(caught.value)


def test_a_conflict_is_committed_again_after_the_refresh(tmp_path: Path) -> None:
    cat = catalog(tmp_path)
    current = {"tbl": stale_handle(cat)}
    waits: list[float] = []
    calls: list[int] = []

    def commit() -> str:
        calls.append(1)
        move_main_to_first(current["tbl"])
        return "done"

    def refresh() -> None:
        current["tbl"] = cat.load_table("ns.t")

    got = retry_on_conflict(commit, what="moving main of ns.t", on_conflict=refresh, sleep=waits.append)
    assert got == "done" and len(calls) == 2 and waits == [0.2]
    assert ids(cat) == [1]  # committed on the refreshed table, over the other client's append


def test_every_attempt_conflicting_is_exit_5_naming_the_commit(tmp_path: Path) -> None:
    """Without a refresh every attempt meets the same conflict: the waits double from 0.2 s, then CommitConflict."""
    cat = catalog(tmp_path)
    tbl = stale_handle(cat)
    waits: list[float] = []
    with pytest.raises(CommitConflict) as caught:
        retry_on_conflict(lambda: move_main_to_first(tbl), what="moving main of ns.t", sleep=waits.append)
    err = caught.value
    assert err.exit_code == EXIT_TRANSIENT == 5 and err.retryable
    assert err.message.startswith(f"moving main of ns.t conflicted with other commits {CONFLICT_ATTEMPTS} times")
    assert "run the command again" in (err.hint or "")
    assert waits == [0.2, 0.4, 0.8, 1.6]  # between the 5 attempts; none after the last
    assert err.__cause__ is not None and spark_errors.commit_conflict(err.__cause__)  # the last conflict itself
    assert ids(cat) == [1, 2]  # main as the other client left it


def test_the_wait_doubles_up_to_five_seconds() -> None:
    assert [conflict_wait(a) for a in range(1, 8)] == [0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]


def test_anything_but_a_conflict_is_raised_at_once(tmp_path: Path) -> None:
    cat = catalog(tmp_path)
    calls: list[int] = []

    def bad() -> None:
        calls.append(1)
        cat.load_table("ns.missing")

    with pytest.raises(Exception) as caught:
        retry_on_conflict(bad, what="x", sleep=lambda s: pytest.fail("no wait for a non-conflict"))
    assert type(caught.value).__name__ == "NoSuchTableError" and calls == [1]

    def verdict() -> None:
        calls.append(2)
        raise ConfigError("a bad declaration")

    with pytest.raises(ConfigError):
        retry_on_conflict(verdict, what="x", sleep=lambda s: pytest.fail("a WapError is a verdict, not retried"))
    assert calls == [1, 2]
