"""Two `wap approve` processes of one run awaiting review at once: exactly one wins (the run store's conditional
change of its status), publishes the rows once, and exits 0; the other exits 4 (conflict) saying who approved it.
Main is read back with PyIceberg."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from support.cli_harness import WAP, Proc, Reader, env, setup_run, unique_catalog, wap, write_config
from support.data import trips_file
from wapflow.errors import EXIT_CONFLICT, EXIT_REVIEW

TABLES = '[tables."nyc.trips"]\nreview = "always"\nchecks = [{ check = "not_null", column = "passenger_count" }]\n'


def _finish(p: subprocess.Popen[str]) -> Proc:
    out, err = p.communicate(timeout=300)
    return Proc(p.returncode, out, err)


def test_two_approvals_at_once_exactly_one_publishes(tmp_path: Path, spark: Any) -> None:
    catalog = unique_catalog("rr")
    cfg = write_config(tmp_path, TABLES, catalog=catalog)
    f = trips_file(tmp_path / "landing", "a.parquet", 100)
    held = setup_run(spark, cfg, "nyc.trips", f)  # the run held for review (the scene; the approvals are processes)
    assert held.exit_code == EXIT_REVIEW, held.message
    run_id = held.run_id
    reader = Reader(tmp_path, catalog)
    assert reader.rows("nyc.trips") == [] and reader.branches("nyc.trips") == [f"wap_{run_id}"]

    procs = [
        subprocess.Popen(
            [WAP, "approve", run_id, "--reason", f"checked by {who}", "--by", who, "--config", str(cfg), "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env(),
            stdin=subprocess.DEVNULL,
        )
        for who in ("ann", "ben")
    ]
    outs = [_finish(p) for p in procs]
    codes = sorted(o.code for o in outs)
    assert codes == [0, EXIT_CONFLICT], [o.text for o in outs]
    winner = next(o for o in outs if o.code == 0)
    loser = next(o for o in outs if o.code == EXIT_CONFLICT)
    who = winner.doc["message"].split("approved by ", 1)[1].split(":", 1)[0]
    assert winner.doc["status"] == "published" and who in ("ann", "ben")
    error = loser.doc["error"]
    assert error["type"] == "AlreadyDecided" and f"already approved by {who}" in error["message"]
    assert "Traceback" not in loser.text

    rows = reader.rows("nyc.trips")
    assert sorted(r["trip_id"] for r in rows) == list(range(1, 101))  # the rows on main once
    assert reader.branches("nyc.trips") == []
    report = wap("report", run_id, "--config", str(cfg), "--json").doc
    assert report["status"] == "published" and report["review"]["by"] == who
    assert report["review"]["reason"] == f"checked by {who}"


def test_an_approval_killed_before_or_after_main_moved_resumes_and_publishes_once(tmp_path: Path, spark: Any) -> None:
    """SIGKILL of `wap approve` after its second audit (nothing published yet) and after main moved (the run
    store not told): `wap runs` shows the run interrupted with its resume command, which publishes it exactly
    once, approval recorded."""
    import shlex

    catalog = unique_catalog("rk")
    cfg = write_config(tmp_path, TABLES, catalog=catalog)
    expected: list[int] = []
    for i, point in enumerate(("audit", "publish:moved")):
        f = trips_file(tmp_path / "landing", f"k{i}.parquet", 50, start_id=1 + 1000 * i, seed=i)
        held = setup_run(spark, cfg, "nyc.trips", f)  # held for review, in this process (the scene)
        assert held.exit_code == EXIT_REVIEW, held.message
        run_id = held.run_id
        reader = Reader(tmp_path, catalog)  # the catalog exists once the first run made the table
        killed = wap("approve", run_id, "--reason", "looked fine", "--config", str(cfg), WAP_CRASH_AT=point)
        assert killed.code == -9, killed.text  # SIGKILL at the crash point: nothing after it ran
        runs = wap("runs", "--config", str(cfg), "--json")
        (row,) = [r for r in runs.doc["runs"] if r["run_id"] == run_id]
        assert row["status"] == "interrupted", row
        resume = wap("report", run_id, "--config", str(cfg), "--json").doc["resume"]
        assert resume and f"--run-id {run_id}" in resume, resume
        again = wap(*shlex.split(resume)[1:], "--config", str(cfg), "--json")
        assert again.code == 0 and again.doc["status"] == "published", again.text
        expected += list(range(1 + 1000 * i, 51 + 1000 * i))
        rows = reader.rows("nyc.trips")
        assert sorted(r["trip_id"] for r in rows) == expected  # every approved row on main, once
        report = wap("report", run_id, "--config", str(cfg), "--json").doc
        assert report["status"] == "published" and report["review"]["reason"] == "looked fine", report
    assert reader.branches("nyc.trips") == []
