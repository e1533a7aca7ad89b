"""SIGKILL a real `wap ingest` again and again, at each step of the outer loop, then let it finish:
every file's rows are on main exactly once (read back with PyIceberg), no branch is left, the ledger
agrees with main's history, and no run is left `running`.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from support.cli_harness import Reader, checksum, wap, write_config
from support.data import write_parquet
from wapflow.demo.generate import generate_trips

pytestmark = [pytest.mark.spark, pytest.mark.slow]

# One pass killed at each point in turn; each new process resumes what the previous one left (an orphaned
# claim is taken over and its run resumed). The points are met in this order across the processes:
# a batch claimed (nothing run; `wap watch` claims with the same code), a batch's run ended (ledger not
# updated). Every point inside a run is killed in test_watch_kill.py (durable workflows) and
# test_crash_resume.py (`wap run`, whose resume is the same run id run again, as a taken-over claim's is).
CHAIN = ["ingest:claimed", "ingest:ran"]


def test_sigkill_ingest_at_each_step_then_finish_exactly_once(tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    files = [
        write_parquet(landing / f"f{i}.parquet", generate_trips(40, start_id=1 + 1000 * i, seed=i)) for i in range(5)
    ]
    cfg = write_config(
        tmp_path,
        '[tables."k.trips"]\nchecks = [{ check = "not_null", column = "passenger_count" }]\n\n'
        f'[sources.trips]\ntable = "k.trips"\nlocation = "{landing}"\nsettle_seconds = 0\nmax_files_per_run = 2\n',
        catalog="killcat",
    )
    for point in CHAIN:
        killed = wap("ingest", "trips", "--config", str(cfg), WAP_CRASH_AT=point)
        assert killed.code == -signal.SIGKILL, (point, killed.text)
        assert "Traceback" not in killed.stderr
        ledger = wap("files", "trips", "--config", str(cfg), "--json")
        states = [r["state"] for r in ledger.doc["files"]]
        assert "claimed (orphaned)" in states, (point, states)  # what the killed process held

    done = wap("ingest", "trips", "--config", str(cfg), "--json")
    assert done.code == 0, done.text
    reader = Reader(tmp_path, "killcat")
    expected = [r for f in files for r in pq.read_table(f).to_pylist()]
    assert checksum(reader.rows("k.trips"), "trip_id") == checksum(expected, "trip_id")  # each row once
    assert reader.branches("k.trips") == []

    rows = wap("files", "trips", "--config", str(cfg), "--json").doc["files"]
    assert sorted(Path(r["uri"]).name for r in rows) == [f.name for f in files]
    assert {r["state"] for r in rows} == {"published"}
    # The ledger agrees with main: each file's snapshot is on main and carries its run id.
    summaries = {s.get("wapflow.run-id") for s in reader.summaries("k.trips")}
    assert {r["run_id"] for r in rows} <= summaries
    on_main = set()
    snap = reader.cat.load_table("k.trips").current_snapshot()
    while snap is not None:
        on_main.add(snap.snapshot_id)
        snap = (
            reader.cat.load_table("k.trips").snapshot_by_id(snap.parent_snapshot_id)
            if snap.parent_snapshot_id
            else None
        )
    assert {r["snapshot_id"] for r in rows} <= on_main
    runs = wap("runs", "--config", str(cfg), "--json").doc["runs"]
    assert runs and {r["status"] for r in runs} <= {"published", "discarded"}, runs
    again = wap("ingest", "trips", "--config", str(cfg), "--json")
    assert again.code == 0 and again.doc["files"] == [] and "nothing new" in again.doc["message"]


def test_two_watch_workers_and_an_ingest_on_one_source_split_the_files(tmp_path: Path) -> None:
    """Two `wap watch --once` workers (durable workflows, one DBOS database) and a one-off `wap ingest`,
    started at once on 20 files of one table: each file is run by exactly one of them, every row is on
    main once, no branch is left."""
    import json
    import subprocess

    from support.cli_harness import WAP, env

    landing = tmp_path / "landing"
    landing.mkdir()
    files = [
        write_parquet(landing / f"f{i:02d}.parquet", generate_trips(15, start_id=1 + 100 * i, seed=i))
        for i in range(20)
    ]
    cfg = write_config(
        tmp_path,
        '[tables."k.trips"]\nchecks = [{ check = "unique", columns = ["trip_id"] }]\n\n'
        f'[sources.trips]\ntable = "k.trips"\nlocation = "{landing}"\nsettle_seconds = 0\nmax_files_per_run = 3\n',
        catalog="twocat",
    )
    procs = [
        subprocess.Popen(
            [WAP, *command, "--config", str(cfg), "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env(),
        )
        for command in (
            ["watch", "--once", "--worker", "w1"],
            ["watch", "--once", "--worker", "w2"],
            ["ingest", "trips"],
        )
    ]
    outs = [p.communicate(timeout=900) for p in procs]
    docs = []
    for p, (so, se) in zip(procs, outs, strict=True):
        assert p.returncode == 0, so + se
        assert "Traceback" not in se
        docs.append(json.loads(so))
    # Each file is run by exactly one of them, except a batch handed back: three processes creating the new
    # table at once may make one lose with a commit conflict (transient), which puts its files back in line
    # (a second attempt in the ledger), and another takes them over. Either way each file is published once,
    # under one run id, and its rows are on main once (below).
    ledger = {f["uri"]: f for f in json.loads(wap("files", "trips", "--config", str(cfg), "--json").stdout)["files"]}
    assert set(ledger) == {str(f) for f in files} and {f["state"] for f in ledger.values()} == {"published"}
    # A process reports each file's state as the ledger had it when it finished: a file it handed back may be
    # "claimed" then, by the worker that took it over (which reports it published, a second attempt).
    published = {f["uri"] for d in docs for f in d["files"] if f["state"] == "published"}
    for d in docs:
        for f in d["files"]:
            assert f["state"] == "published" or (
                f["state"] == "claimed" and f["uri"] in published and ledger[f["uri"]]["attempts"] >= 2
            ), (f, ledger[f["uri"]])
    ran = [{f["uri"] for f in d["files"]} for d in docs]
    for i, j in ((0, 1), (0, 2), (1, 2)):
        for uri in ran[i] & ran[j]:
            assert ledger[uri]["attempts"] >= 2, f"{uri} was run by two workers in one attempt: {ledger[uri]}"
        runs_i = {f["uri"]: f["run_id"] for f in docs[i]["files"]}
        runs_j = {f["uri"]: f["run_id"] for f in docs[j]["files"]}
        assert all(runs_i[u] == runs_j[u] == ledger[u]["run_id"] for u in ran[i] & ran[j])  # one run id
    reader = Reader(tmp_path, "twocat")
    expected = [r for f in files for r in pq.read_table(f).to_pylist()]
    assert checksum(reader.rows("k.trips"), "trip_id") == checksum(expected, "trip_id")
    assert reader.branches("k.trips") == []


def test_sigkill_a_batch_with_its_models_at_each_step_of_their_one_commit_then_finish_once(tmp_path: Path) -> None:
    """A source whose table two models read: each batch and the models are one commit. Killed while the commit
    is planned, after its metadata is staged, and after it ran (ledger not updated): the next `wap ingest`
    resumes the same batch; every table holds each row once and what the models derive from all of them."""
    landing = tmp_path / "landing"
    landing.mkdir()
    files = [
        write_parquet(landing / f"f{i}.parquet", generate_trips(40, start_id=1 + 1000 * i, seed=i)) for i in range(2)
    ]
    check = '[{ check = "not_null", column = "passenger_count" }]'
    silver_columns, group_by = "trip_id, passenger_count, fare_amount", "passenger_count"
    cfg = write_config(
        tmp_path,
        f'[tables."k.trips"]\nchecks = {check}\n\n[tables."k.silver"]\nchecks = {check}\n\n'
        f'[tables."k.gold"]\nchecks = {check}\nmode = "merge"\nkey = ["passenger_count"]\n\n'
        f'[models."k.silver"]\nsql = "SELECT {silver_columns} FROM k.trips WHERE fare_amount > 0"\n\n'
        f'[models."k.gold"]\nsql = "SELECT passenger_count, count(*) AS trips FROM k.silver GROUP BY {group_by}"\n\n'
        f'[sources.trips]\ntable = "k.trips"\nlocation = "{landing}"\nsettle_seconds = 0\nmax_files_per_run = 1\n',
        catalog="killmodels",
    )
    for point in ["publish:group-planned", "publish:group-staged", "ingest:ran"]:
        killed = wap("ingest", "trips", "--config", str(cfg), WAP_CRASH_AT=point)
        assert killed.code == -signal.SIGKILL, (point, killed.text)

    done = wap("ingest", "trips", "--config", str(cfg), "--json")
    assert done.code == 0, done.text
    reader = Reader(tmp_path, "killmodels")
    expected = [r for f in files for r in pq.read_table(f).to_pylist()]
    assert checksum(reader.rows("k.trips"), "trip_id") == checksum(expected, "trip_id")
    positive = [r for r in expected if r["fare_amount"] > 0]
    assert sorted(r["trip_id"] for r in reader.rows("k.silver")) == sorted(r["trip_id"] for r in positive)
    assert sum(r["trips"] for r in reader.rows("k.gold")) == len(positive)
    assert [reader.branches(t) for t in ("k.trips", "k.silver", "k.gold")] == [[], [], []]
    rows = wap("files", "trips", "--config", str(cfg), "--json").doc["files"]
    assert {r["state"] for r in rows} == {"published"}
