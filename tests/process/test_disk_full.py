"""A full filesystem under the warehouse (a real size-limited tmpfs): the run fails as an environment error
(exit 3) that names a full disk and where, with no Java call names or stack traces on the terminal; main is
unchanged, the partial files the write left are removed, and once space is freed the same run id publishes its
rows exactly once (read back by PyIceberg)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.cli_harness import WAP, Proc, Reader, env, setup_run, unique_catalog, wap, write_config
from support.data import trips_file

pytestmark = pytest.mark.spark

TRIPS = '[tables."nyc.trips"]\nchecks = [{ check = "not_null", column = "trip_id" }]\n'


def _tmpfs(path: Path, size: str) -> Iterator[Path]:
    """`path` on a size-limited tmpfs of its own (root only: CI runs as root; elsewhere skipped)."""
    path.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a size-limited tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    if done.returncode != 0:
        if os.environ.get("CI"):
            pytest.fail(f"could not mount a tmpfs: {done.stderr!r}")
        pytest.skip(f"could not mount a tmpfs: {done.stderr!r}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """tmp_path/lake on a 24 MiB tmpfs."""
    yield from _tmpfs(tmp_path / "lake", "24m")


@pytest.fixture
def store_disk(tmp_path: Path) -> Iterator[Path]:
    """tmp_path/store on a 1 MiB tmpfs: a run store on a disk of its own."""
    yield from _tmpfs(tmp_path / "store", "1m")


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


def test_a_full_warehouse_fails_cleanly_and_the_rerun_publishes_once(
    tmp_path: Path, small_disk: Path, spark: Any
) -> None:
    landing = tmp_path / "landing"
    seed = trips_file(landing, "seed.parquet", 100)
    big = trips_file(landing, "big.parquet", 250_000, start_id=1_000_000, seed=7)
    catalog = unique_catalog("full")
    cfg = write_config(small_disk, TRIPS, catalog=catalog)
    first = setup_run(spark, cfg, "nyc.trips", seed)  # the table's first rows (the scene, in this process)
    assert first.status == "published", first.message
    reader = Reader(small_disk, catalog=catalog)
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


def _paused(pid: int, timeout: float = 120) -> bool:
    """Whether process `pid` stopped itself (WAP_PAUSE_AT) within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        if state == "T":
            return True
        time.sleep(0.05)
    return False


def test_a_run_store_on_a_full_disk_gets_the_outcome_at_the_next_command(
    tmp_path: Path, small_disk: Path, store_disk: Path, spark: Any
) -> None:
    """The warehouse fills up during the write and the run store's own disk is full too (filled while the run
    is paused just after its branch was made): the failure cannot be recorded when it happens. The record is
    kept aside (another filesystem) and the next command that can write the store records it: the run reads
    failed with DiskFull, not interrupted; the rerun publishes once."""
    landing = tmp_path / "landing"
    seed = trips_file(landing, "seed.parquet", 100)
    big = trips_file(landing, "big.parquet", 250_000, start_id=1_000_000, seed=7)
    store_url = f"sqlite:///{store_disk / 'runs.db'}"
    catalog = unique_catalog("fullstore")
    cfg = write_config(small_disk, TRIPS, lakehouse=f'run_store = "{store_url}"', catalog=catalog)
    spool = tmp_path / "pending"  # runs.pending's folder, a test's own (by default: runtime dir, /dev/shm, ...)
    assert setup_run(spark, cfg, "nyc.trips", seed).status == "published"  # the scene, in this process
    reader = Reader(small_disk, catalog=catalog)
    main_before = reader.main("nyc.trips")

    args = ["run", "nyc.trips", str(big), "--config", str(cfg), "--json", "--run-id", "full2"]
    proc = subprocess.Popen(
        [WAP, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(WAP_PENDING_DIR=str(spool), WAP_PAUSE_AT="write:branch-created"),
    )
    try:
        assert _paused(proc.pid), "the run never reached write:branch-created"
        store_filler, lake_filler = store_disk / "filler.bin", small_disk / "filler.bin"
        _fill(store_filler, leave=0)
        _fill(lake_filler, leave=2 * 2**20)
        os.kill(proc.pid, signal.SIGCONT)
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    p = Proc(proc.returncode, stdout, stderr)
    assert p.code == 3, p.text
    assert p.doc["error"]["type"] == "DiskFull", p.text
    assert "could not record run full2 in the run store" in p.text and str(spool) in p.text, p.text
    assert [f.name for f in spool.rglob("*.json")] == ["full2.json"]
    for noise in ("Traceback", "\tat org.", "bug in wapflow"):
        assert noise not in p.text, p.text

    store_filler.unlink()
    lake_filler.unlink()  # space freed
    runs = wap("runs", "--config", str(cfg), "--json", WAP_PENDING_DIR=str(spool))  # the next command: no data
    assert runs.code == 0, runs.text
    (rec,) = [r for r in runs.doc["runs"] if r["run_id"] == "full2"]
    assert rec["status"] == "failed", rec  # not interrupted
    report = wap("report", "full2", "--config", str(cfg), "--json")
    assert report.doc["error"]["type"] == "DiskFull", report.text
    assert list(spool.rglob("*.json")) == []  # applied once, then gone
    assert reader.main("nyc.trips") == main_before

    again = wap("run", "nyc.trips", str(big), "--config", str(cfg), "--json", "--run-id", "full2")
    assert again.code == 0, again.text
    ids = [r["trip_id"] for r in reader.rows("nyc.trips")]
    assert len(ids) == 100 + 250_000 and len(set(ids)) == len(ids)


@pytest.fixture
def jar_disk(tmp_path: Path) -> Iterator[Path]:
    """tmp_path/jars on a 2 MiB tmpfs: a jar cache with no room for the Iceberg runtime (46 MB)."""
    yield from _tmpfs(tmp_path / "jars", "2m")


def test_a_full_jar_cache_is_named_with_the_room_the_jar_needs(tmp_path: Path, jar_disk: Path) -> None:
    """`wap setup` on a disk that fills during a jar's download: one line naming the jar, the folder, the space
    free and needed, and what to do (exit 3, the environment's), never "a bug in wapflow"; no partial file left."""
    p = wap("setup", cwd=tmp_path, timeout=180, WAP_JARS_DIR=str(jar_disk))
    assert p.code == 3, p.text
    assert f"no space left for iceberg-spark-runtime-4.1_2.13-1.11.0.jar in the jar cache {jar_disk}" in p.text
    assert " MB free; it needs 4" in p.text and "WAP_JARS_DIR" in p.text, p.text
    assert "bug in wapflow" not in p.text and "Traceback" not in p.text, p.text
    assert list(jar_disk.iterdir()) == []  # the partial download was removed


def test_a_jar_cache_that_cannot_be_made_is_named(tmp_path: Path) -> None:
    """WAP_JARS_DIR under a regular file: the folder cannot be made; the error names it and the OS's reason."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    p = wap("setup", cwd=tmp_path, timeout=120, WAP_JARS_DIR=str(blocker / "jars"))
    assert p.code == 3, p.text
    assert f"in the jar cache {blocker / 'jars'}: Not a directory" in p.text, p.text
    assert "bug in wapflow" not in p.text and "Traceback" not in p.text, p.text


def test_doctor_warns_of_a_warehouse_disk_nearly_full(tmp_path: Path, small_disk: Path) -> None:
    """`wap doctor` says how much room the warehouse's disk has, and warns (with what to do) below 1 GB."""
    import json

    cfg = write_config(small_disk, TRIPS)
    p = wap("doctor", "--config", str(cfg), "--json")
    [warehouse] = [f for f in json.loads(p.stdout)["findings"] if f["part"] == "warehouse"]
    assert warehouse["status"] == "warn", warehouse
    assert "MB free on its disk" in warehouse["detail"] and "only 2" in warehouse["detail"], warehouse
    assert "a full disk fails runs (exit 3)" in warehouse["fix"]
    roomy = write_config(tmp_path / "roomy", TRIPS)
    [ok] = [f for f in wap("doctor", "--config", str(roomy), "--json").doc["findings"] if f["part"] == "warehouse"]
    assert ok["status"] == "ok" and " GB free" in ok["detail"], ok
