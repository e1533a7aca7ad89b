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
