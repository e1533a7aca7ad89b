"""Two `wap run` processes on one SQLite catalog at once: both publish, nothing lost."""

from __future__ import annotations

import json
import subprocess

from conftest import trips_file
from test_cli import WAP, _env, write_config


def test_two_processes_publish_to_one_table_at_once(tmp_path, landing):
    cfg = write_config(tmp_path, "lakehouse", checks=[{"check": "not_null", "column": "passenger_count"}])
    seed = trips_file(landing, "seed.parquet", 10)
    first = subprocess.run(
        [WAP, "run", "nyc.trips", str(seed), "--config", str(cfg), "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        env=_env(),
    )
    assert first.returncode == 0, first.stderr
    files = [trips_file(landing, f"p{i}.parquet", 100, start_id=1000 * (i + 1), seed=i) for i in range(2)]
    procs = [
        subprocess.Popen(
            [WAP, "run", "nyc.trips", str(f), "--config", str(cfg), "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
        )
        for f in files
    ]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, out + err
        assert json.loads(out)["status"] == "published"
    q = subprocess.run(
        [WAP, "query", "SELECT count(*), count(DISTINCT trip_id) FROM nyc.trips", "--config", str(cfg), "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        env=_env(),
    )
    assert json.loads(q.stdout)["rows"] == [[210, 210]]
    # Whichever published second re-applied its snapshot on top of the other's (or found main unmoved).
    assert {json.loads(o)["published_via"] for o, _ in outs} <= {"fast_forward", "cherry_pick"}
