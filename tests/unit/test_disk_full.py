"""A full disk is named as such (errors.DiskFull, exit 3, not retried) from what the OS and SQLite really
raise, and the error says which filesystems are full, one line per filesystem."""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

import pytest
import sqlalchemy as sa

from wapflow.errors import DiskFull
from wapflow.pipeline.steps.record import full_places
from wapflow.spark import errors as spark_errors


def test_enospc_from_the_os_is_disk_full() -> None:
    try:
        try:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/lake/x.parquet")
        except OSError as e:
            raise RuntimeError("writing failed") from e
    except RuntimeError as e:
        err = spark_errors.classify(e, doing="writing nyc.trips")
    assert isinstance(err, DiskFull) and err.exit_code == 3 and err.kind == "environment" and not err.retryable
    assert "no space left on a filesystem while writing nyc.trips" in err.message


def test_a_full_sqlite_store_is_disk_full(tmp_path: Path) -> None:
    """SQLite's own SQLITE_FULL (a database at its page limit), through SQLAlchemy as the run store uses it."""
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'runs.db'}")
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE t (x TEXT)")
    with pytest.raises(sa.exc.OperationalError) as full, engine.begin() as conn:
        conn.exec_driver_sql("PRAGMA max_page_count = 3")
        for _ in range(200):
            conn.exec_driver_sql("INSERT INTO t VALUES (?)", ("x" * 2000,))
    assert isinstance(full.value.orig, sqlite3.OperationalError)
    err = spark_errors.classify(full.value, doing="recording the run")
    assert isinstance(err, DiskFull), err
    engine.dispose()


def test_other_os_errors_are_not_disk_full() -> None:
    err = spark_errors.classify(OSError(errno.EACCES, "Permission denied"), doing="writing")
    assert not isinstance(err, DiskFull)


def test_full_places_names_each_filesystem_once_with_what_lives_there(tmp_path: Path) -> None:
    (tmp_path / "wh").mkdir()
    places = {"the warehouse": tmp_path / "wh", "the run store": tmp_path, "Spark's logs": tmp_path / "wh" / "logs"}
    # A threshold above any disk's size: every place counts as full; all three share tmp_path's filesystem.
    listed = full_places(places, below=2**62)
    assert len(listed) == 1, listed
    assert "the warehouse, the run store, Spark's logs" in listed[0] and "KiB free" in listed[0]


def test_a_record_the_store_refused_is_applied_once_when_it_opens_unless_the_run_moved_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """runs.pending + RunStore: a kept record is written by the next RunStore that opens, only while its record is
    the same attempt still running (or absent); a record that moved on meanwhile wins."""
    from datetime import UTC, datetime

    from wapflow.runs import pending
    from wapflow.runs.store import RunRecord, RunStore

    monkeypatch.setenv(pending.ENV, str(tmp_path / "pending"))
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    store = RunStore(url)
    owner = {"host": "h", "pid": 1, "started": 1.0}
    store.save(RunRecord("r1", "a.b", "running", owner=owner))
    store.save(RunRecord("r2", "a.b", "running", owner=owner))
    store.save(RunRecord("r3", "a.b", "published"))
    store.close()
    at = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
    error = {"type": "DiskFull", "kind": "environment", "message": "no space left"}
    for rid, who in (("r1", owner), ("r2", {"host": "h", "pid": 2, "started": 2.0}), ("r3", owner), ("r4", None)):
        rec = RunRecord(rid, "a.b", "failed", owner=who, error=error, finished_at=at)
        kept = pending.keep(url, rid, rec.to_row())
        assert kept is not None and kept.parent.parent == tmp_path / "pending"
    assert "runs.db" not in str(pending.waiting(url))  # the store's URL never reaches a file name

    again = RunStore(url)
    assert sorted(again.applied_pending) == ["r1", "r4"]
    r1, r2, r3, r4 = (again.get(r) for r in ("r1", "r2", "r3", "r4"))
    assert r1 is not None and r1.status == "failed" and r1.error == error and r1.finished_at == at.replace(tzinfo=None)
    assert r2 is not None and r2.status == "running"  # another attempt owns it now: the kept record is stale
    assert r3 is not None and r3.status == "published"
    assert r4 is not None and r4.status == "failed"  # the store never had it
    assert pending.waiting(url) == [] and RunStore(url).applied_pending == []


def test_a_wal_store_on_a_full_filesystem_is_disk_full() -> None:
    """SQLITE_IOERR_SHMSIZE ("disk I/O error"): what opening a WAL database on a full filesystem gives."""
    e = sqlite3.OperationalError("disk I/O error")
    e.sqlite_errorcode = 4874  # type: ignore[attr-defined]
    assert isinstance(spark_errors.classify(e, doing="opening the run store"), DiskFull)
    e.sqlite_errorcode = 10  # type: ignore[attr-defined]  # plain SQLITE_IOERR: not known to be a full disk
    assert not isinstance(spark_errors.classify(e, doing="opening the run store"), DiskFull)
