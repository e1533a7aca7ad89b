"""SIGKILL at every step of `wap run`, then the same command again: the run completes exactly once.

Each case kills a real `wap run` process at a named crash point (WAP_CRASH_AT: the process sends
itself SIGKILL there, see wapflow.faults) or from outside while Spark is writing, checks that the
run store shows the run as `interrupted` with the command that resumes it and that main is
unchanged, then runs that command and reads main back with PyIceberg: every row of the file is on
main exactly once (count and checksum), no branch or staging table is left, the run is published.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from support.catalogs import no_jvm
from support.cli_harness import WAP, Reader, checksum, env, setup_run, unique_catalog, wap, write_config
from support.data import write_parquet
from wapflow.demo.generate import generate_trips

pytestmark = [pytest.mark.spark, pytest.mark.slow]

# Each chain is one run killed again and again: every process resumes the previous crash and is
# itself killed at the next point; the last one completes the run. One kill per step, and resuming
# a run that already crashed several times is covered too. add_columns runs on a table that already
# has rows (seeded) and is killed where only it goes: its columns added to main's schema, main not moved
# (its write and publish points are new's, which test_watch_kill.py kills on a table with rows). A branch
# created with nothing on it (write:branch-created) is killed in test_tables_together_kill.py, for a group.
CHAINS = {
    "new": ["prepare", "write:table-created", "write:appended", "audit", "publish:locked", "publish:moved",
            "publish:recorded"],
    "quarantine": ["write:quarantine-appended", "publish:quarantine-published"],
    "add_columns": ["publish:columns-added"],
}  # fmt: skip
KINDS = list(CHAINS)
CHECKS = '[{ check = "not_null", column = "passenger_count" }, { check = "unique", columns = ["trip_id"] }]'


def _table(i: int) -> str:
    return f"crash.t{i}"


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory, spark):
    """One lakehouse, a table per case; add_columns tables seeded in-process (cheap) before any kill."""
    folder = tmp_path_factory.mktemp("crash")
    sections = []
    for i, kind in enumerate(KINDS):
        extra = {
            "quarantine": 'on_row_failure = "quarantine"\n',
            "add_columns": 'schema = "add_columns"\n',
        }.get(kind, "")
        sections.append(f'[tables."{_table(i)}"]\n{extra}checks = {CHECKS}\n')
    sections += [f'[tables."{_table(n)}"]\nchecks = {CHECKS}\n' for n in (98, 99)]
    catalog = unique_catalog("crash")  # the seeds run on this process's shared session, which caches catalogs
    cfg = write_config(folder, "\n".join(sections), catalog=catalog)
    for i, kind in enumerate(KINDS):
        if kind == "add_columns":
            seed = write_parquet(folder / "landing" / f"seed{i}.parquet", generate_trips(50, start_id=10_000))
            assert setup_run(spark, cfg, _table(i), seed).status == "published"
    return folder, cfg, Reader(folder, catalog)


def _batch(folder: Path, i: int, kind: str) -> Path:
    t = generate_trips(200, null_rate=0.1 if kind == "quarantine" else 0.0, start_id=1 + 1000 * i, seed=i)
    if kind == "add_columns":
        t = t.append_column("tip_amount", pa.array([float(n % 7) for n in range(t.num_rows)]))
    return write_parquet(folder / "landing" / f"batch{i}.parquet", t)


def _runs(cfg: Path) -> dict[str, dict]:
    p = wap("runs", "--config", str(cfg), "--json", "--limit", "200")
    assert p.code == 0, p.text
    return {r["run_id"]: r for r in p.doc["runs"]}


@pytest.mark.parametrize("kind", KINDS)
def test_sigkill_at_each_step_then_resume_publishes_exactly_once(lake, kind):
    folder, cfg, reader = lake
    i = KINDS.index(kind)
    table, run_id = _table(i), f"crash_{kind}"
    f = _batch(folder, i, kind)
    before = reader.main(table)
    before_rows = reader.rows(table)
    src_bytes = f.read_bytes()
    command = ["run", table, str(f), "--run-id", run_id]
    for point in CHAINS[kind]:
        killed = wap(*command, "--config", str(cfg), WAP_CRASH_AT=point)
        assert killed.code == -signal.SIGKILL, (point, killed.text)
        assert "Traceback" not in killed.stderr
        rec = _runs(cfg)[run_id]
        if point != "publish:recorded":
            assert rec["status"] == "interrupted", (point, rec)
            # The command the run store gives, as a person would paste it, is the one run next.
            command = shlex.split(rec["resume"])[1:]
            assert command[:3] == ["run", table, str(f)] and command[-2:] == ["--run-id", run_id]
        if point not in ("publish:moved", "publish:recorded"):
            # Nothing of the run is on main yet (a new table may exist, empty).
            if before is not None:
                assert reader.main(table) == before, point
            assert sorted(r["trip_id"] for r in reader.rows(table)) == sorted(r["trip_id"] for r in before_rows)
        assert f.read_bytes() == src_bytes

    done = wap(*command, "--config", str(cfg), "--json")
    assert done.code == 0, done.text
    assert done.doc["status"] == "published"
    assert f.read_bytes() == src_bytes

    expected = pq.read_table(f).to_pylist()
    if kind == "quarantine":
        good = [r for r in expected if r["passenger_count"] is not None]
        bad = [r for r in expected if r["passenger_count"] is None]
        assert bad  # the case quarantines something
        assert checksum(reader.rows(table), "trip_id") == checksum(good, "trip_id")
        q_rows = [
            {k: v for k, v in r.items() if not k.startswith("_wap_")} for r in reader.rows(f"{table}__quarantine")
        ]
        assert checksum(q_rows, "trip_id") == checksum(bad, "trip_id")
        assert reader.branches(f"{table}__quarantine") == []
    elif kind == "add_columns":
        new = [r for r in reader.rows(table) if r["trip_id"] < 10_000]
        assert checksum(new, "trip_id") == checksum(expected, "trip_id")
        assert len(reader.rows(table)) == 50 + len(expected)
        assert not any(t.startswith(f"{table}__wap_") for t in reader.tables("crash"))  # no staging left
    else:
        assert checksum(reader.rows(table), "trip_id") == checksum(before_rows + expected, "trip_id")
    assert reader.branches(table) == []
    # main's history carries the run once
    assert sum(1 for s in reader.summaries(table) if s.get("wapflow.run-id") == run_id) <= 1
    assert _runs(cfg)[run_id]["status"] == "published"

    # Run again, it answers from the catalog's metadata: no JVM (this process could not start one).
    again = no_jvm(*command, "--config", str(cfg), "--json")
    assert again.code == 0 and "already published" in again.doc["message"], again.text
    assert again.doc["published_via"] == "already" and _runs(cfg)[run_id]["status"] == "published"


def test_sigkill_from_outside_while_spark_writes(lake):
    """A kill that lands inside the Spark write job, sent by another process as an operator would."""
    folder, cfg, reader = lake
    table, run_id = _table(99), "crash_outside"
    t = generate_trips(300_000, start_id=1, seed=99)
    f = write_parquet(folder / "landing" / "big.parquet", t)
    p = subprocess.Popen(
        [WAP, "run", table, str(f), "--run-id", run_id, "--config", str(cfg)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(), stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert p.stderr is not None
    deadline = time.monotonic() + 240
    for line in p.stderr:
        if "writing to branch" in line or time.monotonic() > deadline:
            break
    time.sleep(0.5)
    os.kill(p.pid, signal.SIGKILL)
    p.wait(timeout=60)
    assert p.returncode == -signal.SIGKILL
    assert reader.rows(table) == []
    rec = _runs(cfg)[run_id]
    assert rec["status"] == "interrupted"
    done = wap(*shlex.split(rec["resume"])[1:], "--config", str(cfg), "--json")
    assert done.code == 0, done.text
    got = reader.rows(table)
    assert len(got) == 300_000 and len({r["trip_id"] for r in got}) == 300_000
    assert reader.branches(table) == []


def test_the_same_command_again_resumes_an_interrupted_run_under_its_own_id(lake):
    """A `wap run` without --run-id killed after its rows are on its branch: the same command again resumes that
    run (its id, its branch) and publishes it once; no branch is left to discard, and the run store holds one
    run of the file. Run once more, the file is refused as published already (exit 2, naming that run)."""
    folder, cfg, reader = lake
    table = _table(98)
    f = write_parquet(folder / "landing" / "resume.parquet", generate_trips(120, start_id=50_000, seed=98))
    command = ["run", table, str(f), "--config", str(cfg)]
    killed = wap(*command, WAP_CRASH_AT="write:appended")
    assert killed.code == -signal.SIGKILL, killed.text
    (interrupted,) = [r for r in _runs(cfg).values() if r["table"] == table]
    assert interrupted["status"] == "interrupted" and reader.rows(table) == []

    done = wap(*command, "--json")
    assert done.code == 0, done.text
    assert done.doc["run_id"] == interrupted["run_id"] and done.doc["status"] == "published", done.doc
    assert f"resuming run {interrupted['run_id']}" in done.stderr
    assert checksum(reader.rows(table), "trip_id") == checksum(pq.read_table(f).to_pylist(), "trip_id")
    assert reader.branches(table) == []
    assert [r["status"] for r in _runs(cfg).values() if r["table"] == table] == ["published"]

    again = wap(*command)
    assert again.code == 2 and f"by run {interrupted['run_id']}" in again.stderr, again.text
    assert len(reader.rows(table)) == 120
