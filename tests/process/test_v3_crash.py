"""Format v3 under SIGKILL and concurrent writers (issue 48, point 4), with real `wap` processes and PyIceberg
reading the catalog, an independent reader that would see a partial state if one existed.

1. A merge-on-read WAP merge killed after its commit on the run's branch and after main moved, then resumed:
   main changed once, its touched files kept (deletion vectors, not rewrites). An append that moves main
   while the merge waits to publish keeps its rows: the merge is applied again on the new main.
2. `wap revert` by row lineage (after a compaction rewrote the run's files) killed before and after its
   commit and at a random moment, then run again: the run's rows are off main once, the others stay. Appends
   committed while it plans and runs keep their rows (the delete is planned again on a conflict)."""

from __future__ import annotations

import os
import random
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest

from support.cli_harness import WAP, Reader, env, setup_run, unique_catalog, wap, write_config
from support.data import changes_file, trips_file
from support.killable import stopped

pytestmark = [pytest.mark.spark, pytest.mark.slow]

CRM = "crm.customers"
MERGE = f'[tables."{CRM}"]\nmode = "merge"\nkey = ["id"]\ndelete_when = "op = \'D\'"\nchecks = []\nformat_version = 3\n'
TRIPS = "nyc.trips"
APPENDS = f'[tables."{TRIPS}"]\nchecks = []\nformat_version = 3\n'
SEED = int(os.environ.get("WAP_V3_CRASH_SEED", "48"))


def _finish(proc: subprocess.Popen[str]) -> str:
    """Let a paused process go on to its end (continued again each time it passes its pause point again:
    a merge applied again is audited again)."""
    deadline = time.monotonic() + 300
    while proc.poll() is None:
        assert time.monotonic() < deadline, "the process did not end"
        if stopped(proc.pid):
            proc.send_signal(signal.SIGCONT)
        time.sleep(0.2)
    return proc.communicate()[0]


def _paused(argv: list[str], point: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [WAP, *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env(WAP_PAUSE_AT=point)
    )
    deadline = time.monotonic() + 120
    while not stopped(proc.pid):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
        time.sleep(0.2)
    return proc


def test_a_merge_on_read_merge_killed_resumed_and_raced_by_an_append_changes_main_once(tmp_path, spark):
    catalog = unique_catalog("v3m")
    cfg = write_config(tmp_path, MERGE, catalog=catalog)
    landing = tmp_path / "landing"
    seed = changes_file(landing, "seed.parquet", [(i, f"n{i}", "I") for i in range(1, 21)])
    assert setup_run(spark, cfg, CRM, seed).status == "published"
    reader = Reader(tmp_path, catalog)
    seed_files = {t.file.file_path for t in reader.cat.load_table(CRM).scan().plan_files()}
    before = reader.main(CRM)

    f = changes_file(landing, "cdc.parquet", [(1, "one", "U"), (2, None, "D"), (30, "thirty", "I")])
    command = ["run", CRM, str(f), "--run-id", "v3_merge"]
    for point in ("write:appended", "publish:moved"):
        killed = wap(*command, "--config", str(cfg), WAP_CRASH_AT=point)
        assert killed.code == -signal.SIGKILL, (point, killed.text)
        rec = {r["run_id"]: r for r in wap("runs", "--config", str(cfg), "--json").doc["runs"]}["v3_merge"]
        assert rec["status"] == "interrupted", (point, rec)
        command = shlex.split(rec["resume"])[1:]
        if point == "write:appended":
            assert reader.main(CRM) == before
    done = wap(*command, "--config", str(cfg), "--json")
    assert done.code == 0 and done.doc["status"] == "published", done.text
    rows = {r["id"]: r["name"] for r in reader.rows(CRM)}
    assert sorted(rows) == [1, *range(3, 21), 30] and rows[1] == "one", rows
    assert sum(1 for s in reader.summaries(CRM) if s.get("wapflow.run-id") == "v3_merge") == 1
    tasks = reader.cat.load_table(CRM).scan().plan_files()
    assert seed_files <= {t.file.file_path for t in tasks} and any(t.delete_files for t in tasks)
    assert reader.branches(CRM) == []

    # An append publishes while a merge waits between audit and publish: both land, the merge applied again.
    g = changes_file(landing, "cdc2.parquet", [(3, "three", "U"), (30, None, "D")])
    proc = _paused(["run", CRM, str(g), "--config", str(cfg), "--json"], "audit")
    app = changes_file(landing, "app.parquet", [(40, "forty", "I"), (41, "forty-one", "I")])
    spark.catalog.refreshTable(f"{catalog}.{CRM}")
    assert setup_run(spark, cfg, CRM, app).status == "published"
    out = _finish(proc)
    assert proc.returncode == 0 and "applied again" in out, out
    rows = {r["id"]: r["name"] for r in reader.rows(CRM)}
    assert sorted(rows) == [1, *range(3, 21), 40, 41] and rows[3] == "three", rows
    assert reader.branches(CRM) == []


def _compacted_table(tmp_path: Path, spark) -> tuple[Path, Reader, list[str]]:
    """A v3 table with three appended runs, compacted at once into one file; the runs' ids."""
    catalog = unique_catalog("v3r")
    cfg = write_config(tmp_path, APPENDS + 'maintenance = { min_input_files = 2, every = "never" }\n', catalog=catalog)
    runs = []
    for i in range(3):
        f = trips_file(tmp_path / "landing", f"{i}.parquet", 50, start_id=1 + 100 * i, seed=i)
        res = setup_run(spark, cfg, TRIPS, f)
        assert res.status == "published", res.message
        runs.append(res.run_id)
    reader = Reader(tmp_path, catalog)
    files = {t.file.file_path for t in reader.cat.load_table(TRIPS).scan().plan_files()}
    done = wap("maintain", TRIPS, "--config", str(cfg), "--json")
    assert done.code == 0, done.text
    assert not files & {t.file.file_path for t in reader.cat.load_table(TRIPS).scan().plan_files()}
    return cfg, reader, runs


def _ids(reader: Reader) -> list[int]:
    return sorted(r["trip_id"] for r in reader.rows(TRIPS))


def test_a_lineage_revert_killed_at_each_step_and_at_random_then_run_again_takes_the_rows_off_once(tmp_path, spark):
    cfg, reader, runs = _compacted_table(tmp_path, spark)
    everything = _ids(reader)
    rng = random.Random(SEED)
    print(f"v3 revert crash seed {SEED}: WAP_V3_CRASH_SEED={SEED} replays it")
    gone = [i for i in everything if not 101 <= i <= 150]
    for point in ("revert:planned", "random", "revert:committed"):
        if point == "random":
            proc = subprocess.Popen([WAP, "revert", runs[1], "--config", str(cfg)], env=env(), text=True)
            time.sleep(rng.uniform(2.0, 15.0))
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        else:
            killed = wap("revert", runs[1], "--config", str(cfg), WAP_CRASH_AT=point)
            # The random kill may have come after the record: then there is nothing left to revert (exit 2).
            finished = point == "revert:committed" and killed.code == 2 and "is reverted" in killed.text
            assert killed.code == -signal.SIGKILL or finished, (point, killed.text)
        assert _ids(reader) in (everything, gone), point  # all or nothing, read from outside
    assert _ids(reader) == gone  # killed after its commit: the rows are off
    done = wap("revert", runs[1], "--config", str(cfg), "--json")
    assert done.code == 0 or "is reverted" in done.text, done.text
    assert _ids(reader) == gone
    assert sum(1 for s in reader.summaries(TRIPS) if s.get("wapflow.reverted-run-id") == runs[1]) == 1
    rec = {r["run_id"]: r for r in wap("runs", "--config", str(cfg), "--json").doc["runs"]}[runs[1]]
    assert rec["status"] == "reverted", rec


def test_appends_during_a_lineage_revert_keep_their_rows(tmp_path, spark):
    cfg, reader, runs = _compacted_table(tmp_path, spark)
    # One append while the revert has planned (paused), then more while its delete runs.
    proc = _paused(["revert", runs[0], "--config", str(cfg), "--json"], "revert:planned")
    landing = tmp_path / "landing"
    n = 0
    spark.catalog.refreshTable(f"{reader.cat.name}.{TRIPS}")

    def append() -> None:
        nonlocal n
        f = trips_file(landing, f"c{n}.parquet", 5, start_id=1000 + 10 * n, seed=100 + n)
        spark.catalog.refreshTable(f"{reader.cat.name}.{TRIPS}")
        assert setup_run(spark, cfg, TRIPS, f).status == "published"
        n += 1

    append()
    proc.send_signal(signal.SIGCONT)
    while proc.poll() is None:
        append()
    out = proc.communicate()[0]
    assert proc.returncode == 0, out
    appended = [1000 + 10 * k + j for k in range(n) for j in range(5)]
    assert _ids(reader) == sorted([*range(101, 151), *range(201, 251), *appended])
