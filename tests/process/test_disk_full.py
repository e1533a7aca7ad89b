"""A full filesystem under the warehouse (a real size-limited tmpfs): the run fails as an environment error
(exit 3) that names a full disk and where, with no Java call names or stack traces on the terminal; main is
unchanged, the partial files the write left are removed, and once space is freed the same run id publishes its
rows exactly once (read back by PyIceberg)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.cli_harness import Reader, wap, write_config
from support.data import trips_file

pytestmark = pytest.mark.spark

TRIPS = '[tables."nyc.trips"]\nchecks = [{ check = "not_null", column = "trip_id" }]\n'


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """tmp_path/lake on a 24 MiB tmpfs of its own (root only: CI runs as root; elsewhere skipped)."""
    lake = tmp_path / "lake"
    lake.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a size-limited tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(lake)], capture_output=True)
    if done.returncode != 0:
        if os.environ.get("CI"):
            pytest.fail(f"could not mount a tmpfs: {done.stderr!r}")
        pytest.skip(f"could not mount a tmpfs: {done.stderr!r}")
    try:
        yield lake
    finally:
        subprocess.run(["umount", "-l", str(lake)], check=False)


def _fill(path: Path, leave: int) -> None:
    """Write a filler file until only about `leave` bytes of the filesystem are free."""
    st = os.statvfs(path.parent)
    size = max(0, st.f_bavail * st.f_frsize - leave)
    with open(path, "wb") as f:
        chunk = b"\0" * 2**20
        while size > 0:
            n = min(size, len(chunk))
            f.write(chunk[:n])
            size -= n


def test_a_full_warehouse_fails_cleanly_and_the_rerun_publishes_once(tmp_path: Path, small_disk: Path) -> None:
    landing = tmp_path / "landing"
    seed = trips_file(landing, "seed.parquet", 100)
    big = trips_file(landing, "big.parquet", 250_000, start_id=1_000_000, seed=7)
    cfg = write_config(small_disk, TRIPS, catalog="full")
    first = wap("run", "nyc.trips", str(seed), "--config", str(cfg), "--json")
    assert first.code == 0, first.text
    reader = Reader(small_disk, catalog="full")
    main_before = reader.main("nyc.trips")
    data = small_disk / "lakehouse" / "nyc" / "trips" / "data"
    files_before = sorted(p.name for p in data.rglob("*"))

    filler = small_disk / "filler.bin"
    _fill(filler, leave=2 * 2**20)  # the big file's rows need about 4 MiB
    p = wap("run", "nyc.trips", str(big), "--config", str(cfg), "--json", "--run-id", "full1")
    assert p.code == 3, p.text
    err = p.doc["error"]
    assert err["type"] == "DiskFull" and err["kind"] == "environment" and err["retryable"] is False, err
    assert "no space left on a filesystem while writing nyc.trips" in err["message"], err
    assert str(small_disk) in err["message"] and "the warehouse" in err["message"], err  # where, and what lives there
    assert "free space" in err["hint"]
    for noise in ("Traceback", "\tat org.", "\tat java.", "Py4J", "bug in wapflow"):
        assert noise not in p.text, p.text
    assert sorted(p.name for p in data.rglob("*")) == files_before  # the partial files are gone
    filler.unlink()  # space freed

    assert reader.main("nyc.trips") == main_before  # nothing was published
    again = wap("run", "nyc.trips", str(big), "--config", str(cfg), "--json", "--run-id", "full1")
    assert again.code == 0, again.text
    rows = reader.rows("nyc.trips")
    ids = [r["trip_id"] for r in rows]
    assert len(rows) == 100 + 250_000 and len(set(ids)) == len(ids)  # every row once
    runs = wap("runs", "--config", str(cfg), "--json")
    assert runs.code == 0, runs.text
    statuses = {r["run_id"]: r["status"] for r in runs.doc["runs"]}
    assert statuses["full1"] == "published", statuses
