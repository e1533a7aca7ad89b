"""`wap watch`: batches run as durable DBOS workflows (real DBOS on SQLite, real Spark and Iceberg in-process),
and a watch's bad configuration refused before anything runs (real `wap` processes, no JVM started).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import sys
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from support.cli_harness import wap, write_config
from support.data import trips_file
from wapflow.config import WatchConfig
from wapflow.lakehouse.processes import free_port
from wapflow.outer.durable import Durable, workflow_id
from wapflow.outer.watch import Watcher
from wapflow.runs.databases import dbos_database_url


def workflows(lh) -> dict[str, str]:
    """DBOS's own record of the workflows: id -> status (read from its system database)."""
    from wapflow.outer.durable import database_url

    engine = sa.create_engine(database_url(lh, None))
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT workflow_uuid, status FROM workflow_status")).all()
    engine.dispose()
    return {str(w): str(s) for w, s in rows}


@pytest.mark.spark
def test_watch_runs_each_batch_as_one_durable_workflow(source, landing):
    """6 files in batches of 4, one corrupt and one dirty: the good four are published, the corrupt one
    fails, the dirty one is blocked; every batch was one workflow that ended SUCCESS. The same claim
    enqueued again is the same workflow (nothing runs twice); a file put back with `wap retry` is a new
    claim and so a new workflow that runs."""
    lh, reader = source(max_files_per_run=4)
    lh.config.watch = WatchConfig(interval=0.5, worker="t1")
    for i in range(6):
        if i == 2:
            (landing / "f02.parquet").write_bytes(b"PAR1 not parquet at all PAR1")
        else:
            trips_file(landing, f"f{i:02d}.parquet", 20, null_rate=0.3 if i == 4 else 0.0, start_id=1 + 100 * i, seed=i)
        os.utime(landing / f"f{i:02d}.parquet", ns=(10**18 + i * 10**9, 10**18 + i * 10**9))

    res = Watcher(lh, ["trips"], once=True).run()
    states = {Path(f.uri).name: f.state for f in res.files}
    assert states == {
        "f00.parquet": "published",
        "f01.parquet": "published",
        "f02.parquet": "failed",
        "f03.parquet": "published",
        "f04.parquet": "blocked",
        "f05.parquet": "published",
    }, res.to_dict()
    assert res.exit_code == 3
    ids = sorted(r["trip_id"] for r in reader.rows("nyc.trips"))
    assert ids == sorted(i + 100 * k for k in (0, 1, 3, 5) for i in range(1, 21))  # each good row once
    wfs = workflows(lh)
    assert set(wfs.values()) == {"SUCCESS"} and len(wfs) == len(res.runs) >= 4  # batches, then split halves
    published = [f for f in res.files if f.state == "published"]
    assert {workflow_id(f.run_id or "", [f]) for f in published} <= set(wfs)

    # A duplicated trigger: the same claim, enqueued again, is the finished workflow; main does not move.
    head = reader.main("nyc.trips")
    run_id = published[0].run_id or ""
    rows = [f for f in published if f.run_id == run_id]
    durable = Durable(lh, worker="t1", concurrency=1)
    try:
        from dbos import DBOS

        wid = durable.enqueue("trips", "nyc.trips", run_id, rows)
        assert DBOS.retrieve_workflow(wid).get_result()["status"] == "published"
    finally:
        durable.stop(0)
    assert reader.main("nyc.trips") == head and len(workflows(lh)) == len(wfs)

    # `wap retry` on the blocked file: a new claim, so a new workflow, which runs (and blocks again).
    dirty = next(f for f in res.files if f.state == "blocked")
    lh.ledger.retry([dirty.key], "try again")
    again = Watcher(lh, ["trips"], once=True).run()
    assert [(Path(f.uri).name, f.state) for f in again.files] == [("f04.parquet", "blocked")]
    assert again.files[0].claims == dirty.claims + 1 and again.files[0].run_id == dirty.run_id
    assert workflows(lh)[workflow_id(dirty.run_id or "", [again.files[0]])] == "SUCCESS"
    assert reader.main("nyc.trips") == head
    # DBOS's SQLite database was opened by wapflow in WAL mode (outer.durable._sqlite_engine), not DBOS's journal.
    dbos_db = dbos_database_url(lh.config).removeprefix("sqlite:///")
    with contextlib.closing(sqlite3.connect(dbos_db)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


@pytest.mark.spark
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="folder events are Linux's inotify")
def test_a_file_landing_in_a_watched_folder_is_listed_at_once(source, landing, tmp_path):
    """The listing interval is an hour: after the first listing at the start, only the folder's event (a file
    renamed in) can make the watch see the file, and it does; the ledger says published."""
    lh, reader = source()
    lh.config.watch = WatchConfig(interval=3600, worker="ev")
    staged = trips_file(tmp_path, "staged.parquet", 30, start_id=500)
    watcher = Watcher(lh, ["trips"])
    outcome: dict[str, str] = {}

    def land_then_stop() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not all(s.listed for s in getattr(watcher, "sources", [])):
            time.sleep(0.05)
        time.sleep(0.3)  # the first listing is over: the next one is an hour away
        os.rename(staged, landing / "landed.parquet")
        while time.monotonic() < deadline:
            rows = lh.ledger.rows("trips")
            if rows and rows[0].state not in ("pending", "claimed"):
                outcome["state"] = rows[0].state
                break
            time.sleep(0.1)
        watcher._ask_stop()

    helper = threading.Thread(target=land_then_stop)
    helper.start()
    watcher.run()  # the main thread: a watch installs the stop signals' handlers
    helper.join()
    assert outcome == {"state": "published"}
    assert sorted(r["trip_id"] for r in reader.rows("nyc.trips")) == list(range(500, 530))


@pytest.mark.parametrize(
    ("source_extra", "code", "words"),
    [
        ('schedule = "*/5 * * *"', 2, "is not a cron schedule"),
        ('schedule = "61 * * * *"', 2, "is not a cron schedule"),
        ('events = "kafka://x"', 2, "is not an SQS queue"),
        ('events = "http://127.0.0.1:{port}/123456789012/landed"', 3, "cannot read events from"),
    ],
    ids=["cron-fields", "cron-range", "events-scheme", "events-unreachable"],
)
def test_bad_watch_configuration_is_refused_before_anything_runs(tmp_path, source_extra, code, words):
    landing = tmp_path / "landing"
    landing.mkdir()
    extra = source_extra.replace("{port}", str(free_port()))
    cfg = write_config(
        tmp_path,
        f'[s3]\nendpoint = "http://127.0.0.1:{free_port()}"\nregion = "us-east-1"\n\n'
        '[tables."k.trips"]\nchecks = []\n\n'  # so that what is refused is the source
        f'[sources.trips]\ntable = "k.trips"\nlocation = "{landing}"\n{extra}\n',
    )
    res = wap("watch", "--config", str(cfg), timeout=120)
    assert res.code == code, res.text
    assert words in res.stderr and "Traceback" not in res.stderr
    assert "starting Spark" not in res.stderr  # refused before a JVM started
    assert not (tmp_path / "lakehouse" / "dbos.sqlite").exists()


def test_watch_of_an_unknown_source_or_a_missing_location(tmp_path):
    source = f'[sources.trips]\ntable = "k.trips"\nlocation = "{tmp_path / "nowhere"}"\n'
    cfg = write_config(tmp_path, '[tables."k.trips"]\nchecks = []\n\n' + source)
    unknown = wap("watch", "trips", "tripz", "--config", str(cfg))
    assert unknown.code == 2 and "no [sources.tripz] section" in unknown.stderr, unknown.text
    missing = wap("watch", "--config", str(cfg))
    assert missing.code == 2 and "does not exist" in missing.stderr, missing.text  # names nothing: usage
    assert "Traceback" not in unknown.stderr + missing.stderr
