"""Two `wap approve` processes of one run awaiting review at once: exactly one wins (the run store's conditional
change of its status), publishes the rows once, and exits 0; the other exits 4 (conflict) saying who approved it.
Main is read back with PyIceberg."""

from __future__ import annotations

import subprocess
from pathlib import Path

from support.cli_harness import WAP, Proc, Reader, env, wap, write_config
from support.data import trips_file
from wapflow.errors import EXIT_CONFLICT, EXIT_REVIEW

TABLES = '[tables."nyc.trips"]\nreview = "always"\nchecks = [{ check = "not_null", column = "passenger_count" }]\n'


def _finish(p: subprocess.Popen[str]) -> Proc:
    out, err = p.communicate(timeout=300)
    return Proc(p.returncode, out, err)


def test_two_approvals_at_once_exactly_one_publishes(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, TABLES)
    f = trips_file(tmp_path / "landing", "a.parquet", 100)
    held = wap("run", "nyc.trips", str(f), "--config", str(cfg), "--json")
    assert held.code == EXIT_REVIEW, held.text
    run_id = held.doc["run_id"]
    reader = Reader(tmp_path)
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
