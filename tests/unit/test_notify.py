"""Local folders' landing events (wapflow.storage.notify) on this machine's real inotify."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest

from wapflow.storage.notify import FolderEvents, folder_of

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")


@pytest.fixture
def events():
    ev = FolderEvents()
    assert ev.available
    yield ev
    ev.close()


def test_a_file_renamed_in_or_written_wakes_the_wait_with_its_source(tmp_path: Path, events: FolderEvents) -> None:
    landing, other = tmp_path / "landing", tmp_path / "other"
    landing.mkdir()
    other.mkdir()
    assert events.watch("trips", landing) and events.watch("zones", other)
    assert events.wait(0.05) == set()  # nothing landed

    (tmp_path / ".tmp").write_bytes(b"x" * 10)
    os.rename(tmp_path / ".tmp", landing / "a.parquet")  # the atomic landing
    started = time.monotonic()
    assert events.wait(5) == {"trips"}
    assert time.monotonic() - started < 1

    (other / "b.csv").write_text("id\n1\n")  # written in place: counted once closed
    assert events.wait(5) == {"zones"}


def test_a_folder_made_inside_is_watched_and_its_files_wake_the_wait(tmp_path: Path, events: FolderEvents) -> None:
    events.watch("trips", tmp_path)
    (tmp_path / "2026-11-27").mkdir()
    assert events.wait(5) == {"trips"}  # the folder itself: files may have landed before its watch
    (tmp_path / "2026-11-27" / "c.parquet").write_bytes(b"y")
    assert events.wait(5) == {"trips"}
    (tmp_path / "_temporary").mkdir()  # Spark's and Hadoop's bookkeeping: not watched
    assert events.wait(0.2) == set()


def test_wake_ends_a_wait_at_once(events: FolderEvents) -> None:
    threading.Timer(0.1, events.wake).start()
    started = time.monotonic()
    assert events.wait(30) == set()
    assert time.monotonic() - started < 5
    events.wake()  # a wake before the wait is not lost
    started = time.monotonic()
    events.wait(30)
    assert time.monotonic() - started < 5


def test_folder_of_names_the_folder_to_watch(tmp_path: Path) -> None:
    (tmp_path / "in" / "x").mkdir(parents=True)
    (tmp_path / "in" / "f.parquet").write_bytes(b"")
    assert folder_of(str(tmp_path / "in")) == (tmp_path / "in").resolve()
    assert folder_of(f"file://{tmp_path / 'in'}") == (tmp_path / "in").resolve()
    assert folder_of(str(tmp_path / "in" / "f.parquet")) == (tmp_path / "in").resolve()
    assert folder_of(str(tmp_path / "in" / "*" / "*.parquet")) == (tmp_path / "in").resolve()
    assert folder_of("s3://bucket/landing/") is None
    assert folder_of(str(tmp_path / "missing" / "*.csv")) is None
