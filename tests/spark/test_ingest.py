"""`wap ingest`: a source's files, each published exactly once, with batching and the split rule.

Real Spark and Iceberg in-process (one shared session); main read back with PyIceberg.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from support.cli_harness import LazyReader
from support.data import trips_file
from support.ingest import CHECKS
from wapflow.cli import app
from wapflow.errors import UsageError
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.outer.ingest import Ingest, batch_run_id, ingest
from wapflow.runs.ledger import files_table
from wapflow.sql.identifiers import TableName

pytestmark = pytest.mark.spark


def _config(lh: Lakehouse, tmp_path: Path) -> Path:
    """A wap.toml for the fixture's lakehouse (same warehouse, catalog, table and source), for the CLI."""
    lake, src = lh.config.lakehouse, lh.config.sources["trips"]
    cfg = tmp_path / "wap.toml"
    cfg.write_text(
        f'[lakehouse]\nwarehouse = "{lake.warehouse}"\ncatalog_name = "{lake.catalog_name}"\nmaster = "local[2]"\n\n'
        f'[tables."nyc.trips"]\nchecks = {json.dumps(CHECKS).replace(":", "=")}\n\n'
        f'[sources.trips]\ntable = "nyc.trips"\nlocation = "{src.location}"\nsettle_seconds = 0\n'
    )
    return cfg


def _ids(reader: LazyReader) -> list[int]:
    return sorted(r["trip_id"] for r in reader.rows("nyc.trips"))


def test_new_files_are_published_once_and_known_ones_skipped(source, landing):
    lh, reader = source()
    files = [trips_file(landing, f"f{i}.parquet", 50, start_id=1 + 100 * i, seed=i) for i in range(3)]
    res = ingest(lh, "trips")
    assert res.exit_code == 0 and res.new == 3 and len(res.runs) == 1, res.message()
    (run,) = res.runs
    assert run.status == "published" and run.run_id == batch_run_id("trips", [f.key for f in res.files])
    assert {f.state for f in res.files} == {"published"}
    assert {f.snapshot_id for f in res.files} == {reader.main("nyc.trips")}
    assert sorted(f.uri for f in res.files) == sorted(str(f) for f in files)
    assert _ids(reader) == [i + 100 * k for k in range(3) for i in range(1, 51)]

    head = reader.main("nyc.trips")
    again = ingest(lh, "trips")
    assert again.exit_code == 0 and again.files == [] and again.runs == []
    assert "nothing new" in again.message() and reader.main("nyc.trips") == head

    trips_file(landing, "f3.parquet", 10, start_id=1000)
    later = ingest(lh, "trips")
    assert [f.uri for f in later.files] == [str(landing / "f3.parquet")] and later.exit_code == 0
    assert len(_ids(reader)) == 160

    # The same name rewritten with other bytes is another file (its identity changed); unchanged it is not.
    trips_file(landing, "f3.parquet", 10, start_id=2000)
    os.utime(landing / "f3.parquet", ns=(1, 1))  # an old mtime: settled
    changed = ingest(lh, "trips")
    assert len(changed.files) == 1 and changed.exit_code == 0
    assert len(_ids(reader)) == 170 and len(lh.ledger.rows("trips", state="published")) == 5


def test_a_file_wap_run_published_already_is_settled_with_that_run_not_published_twice(source, landing):
    """`wap run` of a file, then its source's ingest: the ledger takes it as published by that run (same path,
    size and version), nothing is published twice; the other file runs; rewritten, the file is new data."""
    from wapflow import api

    lh, reader = source()
    early = trips_file(landing, "early.parquet", 30, start_id=1)
    first = api.run(lh, "nyc.trips", [str(early)])
    assert first.status == "published", first.message
    head = reader.main("nyc.trips")
    trips_file(landing, "later.parquet", 20, start_id=100)
    res = ingest(lh, "trips")
    assert res.exit_code == 0 and len(res.runs) == 1, res.message()
    rows = {Path(r.uri).name: r for r in lh.ledger.rows("trips")}
    assert rows["early.parquet"].state == "published" and rows["early.parquet"].run_id == first.run_id
    assert rows["early.parquet"].snapshot_id == head
    assert f"already by run {first.run_id}" in str(rows["early.parquet"].reason)
    assert rows["later.parquet"].state == "published" and rows["later.parquet"].run_id == res.runs[0].run_id
    assert _ids(reader) == [*range(1, 31), *range(100, 120)]  # each row once

    trips_file(landing, "early.parquet", 5, start_id=500)  # rewritten: another version of the file
    os.utime(landing / "early.parquet", ns=(1, 1))
    again = ingest(lh, "trips")
    assert again.exit_code == 0 and len(again.runs) == 1, again.message()
    assert len(_ids(reader)) == 55


def test_one_bad_file_does_not_hold_back_the_others(source, landing):
    """Among 12 files one is corrupt and one fails an error check: the batches that hold them are split in
    halves until each bad file runs alone; the 10 good files are published, each once."""
    lh, reader = source(max_files_per_run=6)
    good = []
    for i in range(12):
        if i == 2:
            (landing / "f02.parquet").write_bytes(b"PAR1 this is not parquet PAR1")
        elif i == 9:
            trips_file(landing, "f09.parquet", 30, null_rate=0.2, start_id=1 + 100 * i, seed=i)
        else:
            good.append(trips_file(landing, f"f{i:02d}.parquet", 30, start_id=1 + 100 * i, seed=i))
        os.utime(landing / f"f{i:02d}.parquet", ns=(10**18 + i * 10**9, 10**18 + i * 10**9))  # landing order
    res = ingest(lh, "trips")
    states = {Path(f.uri).name: f.state for f in res.files}
    assert states.pop("f02.parquet") == "failed" and states.pop("f09.parquet") == "blocked"
    assert set(states.values()) == {"published"} and len(states) == 10
    assert res.exit_code == 3  # a file failed (failed wins over blocked)
    assert _ids(reader) == sorted(i + 100 * k for k in range(12) if k not in (2, 9) for i in range(1, 31))
    bad = {Path(f.uri).name: f for f in res.files if f.state != "published"}
    assert bad["f02.parquet"].error and bad["f02.parquet"].error["kind"] == "input"
    assert "not_null(passenger_count)" in (bad["f09.parquet"].reason or "")
    # The two batches, then halves of halves: 12 runs here (one run per file after them would be 14; with
    # batches of 100 and one bad file, about 14 instead of 101).
    assert len(res.runs) == 12
    # The blocked file keeps its branch for inspection; the split batches left none.
    assert reader.branches("nyc.trips") == [f"wap_{bad['f09.parquet'].run_id}"]
    # The next ingest runs nothing, and says which file failed and the command that puts it back in line.
    again = ingest(lh, "trips")
    assert again.files == [] and again.exit_code == 0
    assert again.failed_before == [bad["f02.parquet"].uri], again.failed_before
    assert "1 of them failed before" in again.message() and f"`wap retry {bad['f02.parquet'].uri}`" in again.message()


def _claimed_by_a_dead_process(lh: Lakehouse) -> tuple[Any, str]:
    """The one pending file, listed and claimed for its batch's run by a process that then died (its pid is not
    alive any more): (its ledger row, the run id)."""
    Ingest(lh, lh.config.resolve_source("trips")).discover()  # listed and recorded, not run
    (row,) = lh.ledger.rows("trips", state="pending")
    run_id = batch_run_id("trips", [row.key])
    assert lh.ledger.claim([row.key], run_id) == [row.key]
    gone = json.dumps({"host": socket.gethostname(), "pid": 2**22 + 12345, "start": None})
    with lh.ledger.engine.begin() as conn:
        conn.execute(sa.update(files_table).where(files_table.c.key == row.key).values(owner=gone))
    return row, run_id


def test_a_claim_left_by_a_killed_process_is_resumed(source, landing):
    lh, reader = source()
    trips_file(landing, "a.parquet", 20)
    first = ingest(lh, "trips")
    assert first.exit_code == 0
    trips_file(landing, "b.parquet", 20, start_id=500)
    row, run_id = _claimed_by_a_dead_process(lh)
    res = ingest(lh, "trips")
    assert [r.run_id for r in res.runs] == [run_id] and res.exit_code == 0
    done = lh.ledger.get(row.key)
    assert done is not None and done.state == "published" and done.attempts == 1
    assert len(_ids(reader)) == 40


def test_a_claim_whose_run_a_live_process_runs_is_left_to_it(source, landing):
    """The claim names a dead process, but another live process runs the batch's run (a durable workflow another
    worker resumed): an ingest that takes the claim over leaves the files to that process, never fails them."""
    import subprocess

    from wapflow.runs.store import RunRecord, current_owner

    lh, reader = source()
    trips_file(landing, "a.parquet", 20)
    row, run_id = _claimed_by_a_dead_process(lh)
    worker = subprocess.Popen(["sleep", "120"])  # the live process running the run
    try:
        owner = current_owner() | {"pid": worker.pid}
        from wapflow.runs.store import _process_start

        owner["start"] = _process_start(worker.pid)
        lh.store.save(RunRecord(run_id=run_id, table_name="nyc.trips", status="running", owner=owner))
        res = ingest(lh, "trips")
        assert "running right now" in " ".join(r.message or "" for r in res.runs)
        left = lh.ledger.get(row.key)
        assert left is not None and left.state == "claimed" and left.run_id == run_id  # not failed
        assert lh.store.get(run_id).status == "running"  # the live process's record, untouched
        assert reader.main("nyc.trips") is None
    finally:
        worker.kill()
        worker.wait()


def test_cli_ingest_files_skip_and_retry(source, landing, tmp_path):
    lh, reader = source()
    cfg = _config(lh, tmp_path)
    runner = CliRunner()
    trips_file(landing, "ok.parquet", 20)
    dirty = trips_file(landing, "dirty.parquet", 20, null_rate=0.3, start_id=100)
    skipped = trips_file(landing, "skip.parquet", 20, start_id=200)
    res = runner.invoke(app, ["skip", str(skipped), "--reason", "a test export", "--source", "trips", "-c", str(cfg)])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["ingest", "trips", "-c", str(cfg), "--json"])
    assert res.exit_code == 1, res.output  # one file blocked
    doc = json.loads(res.stdout)
    assert doc["status"] == "blocked" and doc["counts"] == {"blocked": 1, "published": 1}
    res = runner.invoke(app, ["files", "trips", "--json", "-c", str(cfg)])
    rows = {Path(r["uri"]).name: r for r in json.loads(res.stdout)["files"]}
    assert {n: r["state"] for n, r in rows.items()} == {
        "ok.parquet": "published",
        "dirty.parquet": "blocked",
        "skip.parquet": "skipped",
    }
    assert rows["skip.parquet"]["reason"] == "a test export" and rows["ok.parquet"]["snapshot_id"]
    # After relaxing the check, `wap retry` puts the blocked file back; its kept branch is re-audited.
    cfg.write_text(cfg.read_text().replace('{"check"= "not_null", "column"= "passenger_count"}, ', ""))
    res = runner.invoke(app, ["retry", str(dirty), "-c", str(cfg), "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["files"][0]["state"] == "pending", res.output
    res = runner.invoke(app, ["ingest", "trips", "-c", str(cfg), "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["counts"] == {"published": 1}, res.output
    assert len(_ids(reader)) == 40
    # Bad usage: an unknown source is exit 2 with the known ones named.
    res = runner.invoke(app, ["ingest", "trip", "-c", str(cfg)])
    assert res.exit_code == 2 and "did you mean 'trips'" in res.output


def test_backfill_a_window_oldest_first_then_ingest_takes_the_rest(source, landing):
    from datetime import UTC, datetime

    from wapflow.outer.ingest import backfill

    lh, reader = source(max_files_per_run=2)
    months = {"jan": 1, "feb": 2, "mar": 3}
    for name, month in months.items():
        for day in (20, 5, 12):  # written out of order: batches follow the files' own times
            f = trips_file(landing, f"{name}{day:02d}.parquet", 10, start_id=month * 1000 + day * 10)
            t = datetime(2026, month, day, tzinfo=UTC).timestamp()
            os.utime(f, (t, t))
    jan = (datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 2, 1, tzinfo=UTC))
    plan = backfill(lh, "trips", since=jan[0], until=jan[1], dry_run=True)
    names = [[Path(u).name for u in b] for b in plan.planned]
    assert names == [["jan05.parquet", "jan12.parquet"], ["jan20.parquet"]] and plan.exit_code == 0
    assert lh.ledger.rows("trips") == [] and not reader.exists("nyc.trips")  # a dry run records nothing

    done = backfill(lh, "trips", since=jan[0], until=jan[1])
    assert done.exit_code == 0 and len(done.runs) == 2
    assert [Path(f.uri).name for f in done.files] == ["jan05.parquet", "jan12.parquet", "jan20.parquet"]
    ops = [s.get("wapflow.run-id") for s in reader.summaries("nyc.trips") if s.get("wapflow.run-id")]
    assert ops == [r.run_id for r in done.runs]  # the older batch reached main first
    again = backfill(lh, "trips", since=jan[0], until=jan[1])
    assert again.files == [] and again.runs == []  # resumable: what is done stays done

    rest = ingest(lh, "trips")
    assert sorted(Path(f.uri).name for f in rest.files) == sorted(
        f"{m}{d:02d}.parquet" for m in ("feb", "mar") for d in (5, 12, 20)
    )
    assert len(_ids(reader)) == 90 == len(set(_ids(reader)))  # every file once


def test_revert_a_run_in_the_middle_of_history(source, landing, tmp_path):
    from wapflow.outer.revert import revert

    lh, reader = source()
    runs = []
    for i in range(3):
        trips_file(landing, f"r{i}.parquet", 20, start_id=1 + 100 * i)
        res = ingest(lh, "trips")
        assert res.exit_code == 0
        runs.append(res.runs[0])
    files_before = {
        r[0]
        for r in lh.spark.sql(f"SELECT file_path FROM {lh.tables.ident(TableName.parse('nyc.trips'))}.files").collect()
    }
    mid = runs[1]
    doc = revert(lh, mid.run_id)
    assert doc["rows_removed"] == {"nyc.trips": 20} and doc["ledger_files"] == 1
    assert _ids(reader) == [i + 100 * k for k in (0, 2) for i in range(1, 21)]  # exactly the other runs' rows
    last = reader.summaries("nyc.trips")[-1]
    assert last["wapflow.reverted-run-id"] == mid.run_id and last["deleted-data-files"] == "1"
    assert reader.main("nyc.trips") == doc["snapshot_id"]
    files_after = {
        r[0]
        for r in lh.spark.sql(f"SELECT file_path FROM {lh.tables.ident(TableName.parse('nyc.trips'))}.files").collect()
    }
    assert files_after < files_before and len(files_before - files_after) == 1  # nothing else rewritten
    rec = lh.store.get(mid.run_id)
    assert (
        rec is not None and rec.status == "reverted" and rec.reverted["snapshots"] == {"nyc.trips": doc["snapshot_id"]}
    )
    (row,) = lh.ledger.rows(run_id=mid.run_id)
    assert row.state == "reverted" and Path(row.uri).name == "r1.parquet"
    assert ingest(lh, "trips").files == []  # a reverted file is not ingested again by itself

    with pytest.raises(UsageError, match="is reverted"):
        revert(lh, mid.run_id)
    # `wap retry RUN_ID` puts its file back; the same run id publishes again (the revert is on main).
    res = CliRunner().invoke(app, ["retry", mid.run_id, "--json"], env={"WAP_CONFIG": str(_config(lh, tmp_path))})
    assert res.exit_code == 0, res.output
    again = ingest(lh, "trips")
    assert [r.run_id for r in again.runs] == [mid.run_id] and again.exit_code == 0
    assert again.runs[0].published_via in ("fast_forward", "cherry_pick")
    assert _ids(reader) == [i + 100 * k for k in range(3) for i in range(1, 21)]


def test_a_file_rewritten_before_it_ran_is_said_and_never_run_twice(source, landing):
    lh, reader = source()
    # Rewritten after one listing, before the next: the listed version is superseded, the new one runs.
    f = trips_file(landing, "x.parquet", 20, start_id=1)
    Ingest(lh, lh.config.resolve_source("trips")).discover()
    trips_file(landing, "x.parquet", 25, start_id=500)
    os.utime(f, ns=(10**18, 10**18))
    res = ingest(lh, "trips")
    assert res.exit_code == 0 and len(res.runs) == 1
    assert _ids(reader) == list(range(500, 525))  # the version read, once
    rows = {r.state: r for r in lh.ledger.rows("trips")}
    assert set(rows) == {"published", "skipped"} and "replaced by a newer version" in (rows["skipped"].reason or "")
    assert rows["published"].size == f.stat().st_size

    # Rewritten after the claim, before the run read it: the version read is recorded published, the
    # claimed one skipped with the reason; a later listing does not run the file again.
    g = trips_file(landing, "y.parquet", 10, start_id=1000)
    ing = Ingest(lh, lh.config.resolve_source("trips"))
    ing.discover()
    (row,) = lh.ledger.rows("trips", state="pending")
    run_id = batch_run_id("trips", [row.key])
    assert lh.ledger.claim([row.key], run_id) == [row.key]
    trips_file(landing, "y.parquet", 12, start_id=2000)
    os.utime(g, ns=(2 * 10**18, 2 * 10**18))
    ing._run_batch(run_id, [row])
    y = {r.state: r for r in lh.ledger.rows("trips") if r.uri == str(g)}
    assert set(y) == {"published", "skipped"} and "changed before run" in (y["skipped"].reason or "")
    assert y["published"].size == g.stat().st_size and y["published"].run_id == run_id
    assert ingest(lh, "trips").files == []
    assert _ids(reader) == list(range(500, 525)) + list(range(2000, 2012))


def test_files_landed_just_before_a_one_off_ingest_are_waited_for(source, landing):
    """Files copied in right before `wap ingest` (a cron or CI job) are waited for once, up to settle_seconds,
    then published: the run does what it was started for instead of saying "all known" and exiting 0."""
    lh, reader = source(settle_seconds=2)
    lines: list[str] = []
    lh.progress = lines.append
    trips_file(landing, "a.parquet", 10)
    trips_file(landing, "b.parquet", 10, start_id=100)
    res = ingest(lh, "trips")
    assert res.exit_code == 0 and [f.state for f in res.files] == ["published", "published"], res.message()
    assert res.unsettled == 0 and len(_ids(reader)) == 20
    assert any("2 file(s) still being written; waiting" in line and "settle_seconds" in line for line in lines), lines


def test_a_file_still_being_written_after_the_wait_exits_5_saying_when_to_run_again(source, landing):
    """A file that keeps changing through the wait is not taken: exit 5 (a retry helps), and the message says
    so and when to run again, while the settled file beside it is published."""
    lh, reader = source(settle_seconds=1.5)
    settled = trips_file(landing, "old.parquet", 10)
    os.utime(settled, ns=(1, 1))
    growing = trips_file(landing, "growing.parquet", 10, start_id=100)
    stop = threading.Event()

    def keep_writing() -> None:
        while not stop.is_set():
            os.utime(growing)  # the writer is still appending: its mtime keeps moving
            time.sleep(0.2)

    writer = threading.Thread(target=keep_writing)
    writer.start()
    try:
        res = ingest(lh, "trips")
    finally:
        stop.set()
        writer.join()
    assert res.exit_code == 5 and res.status == "unsettled", res.message()
    assert [Path(f.uri).name for f in res.files] == ["old.parquet"] and res.files[0].state == "published"
    assert "1 file(s) are still being written" in res.message() and "run again after 1.5s" in res.message()
    assert len(_ids(reader)) == 10
