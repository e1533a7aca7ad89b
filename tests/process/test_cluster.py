"""`wap run` on a real Spark standalone cluster: executors in their own JVMs do the writes.

A master and two workers (tests/support/spark_cluster.py) run once per session; each case is a real `wap run`
process with `master = "spark://..."`, the embedded SQLite catalog and a local warehouse (one machine,
so every JVM sees the same paths). The Iceberg jars reach the executors through `spark.jars`. The
verdict on main comes from PyIceberg (tests/support/cli_harness.Reader), not from wapflow.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from support.cli_harness import WAP, Reader, env, wap
from support.data import write_parquet
from support.spark_cluster import StandaloneCluster, cluster_config, executor_pids, ids
from wapflow.demo.generate import generate_trips

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory, spark_cluster: StandaloneCluster) -> tuple[Path, Path, Reader]:
    folder = tmp_path_factory.mktemp("cluster")
    return folder, cluster_config(folder, spark_cluster.url), Reader(folder)


def test_publish_blocked_and_quarantine_on_a_cluster(lake: tuple[Path, Path, Reader], engine: dict[str, str]) -> None:
    """Clean rows publish; a failing check blocks (main unchanged); quarantine splits good and bad rows: through
    one warm engine, whose one application keeps its executors on the cluster, as a user's commands run by
    default. (Runs of separate processes racing on one table are tests/process/test_bad_input_matrix.py's; the
    next test runs a `wap run` process of its own on the cluster.)"""
    folder, cfg, reader = lake
    clean = write_parquet(folder / "in" / "clean.parquet", generate_trips(300, start_id=1))
    r = wap("run", "cl.pub", str(clean), "-c", str(cfg), "--json", **engine)
    assert r.code == 0, r.text
    assert r.doc["status"] == "published"
    assert ids(reader.rows("cl.pub")) == list(range(1, 301))
    head = reader.main("cl.pub")

    dirty = write_parquet(folder / "in" / "dirty.parquet", generate_trips(300, start_id=1001, null_rate=0.1, seed=2))
    r = wap("run", "cl.pub", str(dirty), "-c", str(cfg), "--json", **engine)
    assert r.code == 1, r.text
    assert r.doc["status"] == "blocked"
    assert reader.main("cl.pub") == head
    assert ids(reader.rows("cl.pub")) == list(range(1, 301))
    assert reader.branches("cl.pub") == [r.doc["branch"]]  # the blocked run's, kept

    r = wap("run", "cl.quar", str(dirty), "-c", str(cfg), "--json", **engine)
    assert r.code == 0, r.text
    good, bad = reader.rows("cl.quar"), reader.rows("cl.quar__quarantine")
    assert bad and all(row["passenger_count"] is None for row in bad)
    assert all(row["passenger_count"] is not None for row in good)
    assert sorted(ids(good) + ids(bad)) == list(range(1001, 1301))
    stopped = wap("engine", "stop", "-c", str(cfg), **engine)  # its executors hold the cluster's two cores
    assert stopped.code == 0, stopped.text


def test_executor_killed_mid_write(lake: tuple[Path, Path, Reader], spark_cluster: StandaloneCluster) -> None:
    """SIGKILL an executor JVM while the write job runs: Spark retries its tasks on a new executor or the run
    fails; either way main holds the file's rows exactly once or is unchanged."""
    folder, cfg, reader = lake
    # No seed run (each `wap run` here costs a driver and two executors): the killed run makes the table.
    # Big enough that the write takes seconds on two 1-core executors (several files: several tasks).
    n = 150_000
    big = [
        write_parquet(folder / "in" / "big" / f"p{i}.parquet", generate_trips(n, start_id=100_001 + n * i, seed=i))
        for i in range(4)
    ]
    stderr_path = folder / "kill.err"
    with stderr_path.open("w") as err_file:
        proc = subprocess.Popen(
            [WAP, "run", "cl.kill", *map(str, big), "-c", str(cfg), "--json"],
            stdout=subprocess.PIPE,
            stderr=err_file,
            text=True,
            env=env(),
            stdin=subprocess.DEVNULL,
        )
        killed = None
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            if "writing to branch" in stderr_path.read_text():
                time.sleep(1.0)  # into the write job's tasks
                pids = executor_pids(spark_cluster.worker_pids())
                if pids:
                    killed = pids[0]
                    subprocess.run(["kill", "-KILL", str(killed)], check=True)
                    break
            time.sleep(0.1)
        out, _ = proc.communicate(timeout=600)
    text = out + stderr_path.read_text()
    assert killed is not None, "the write was over before an executor could be killed: " + text
    assert proc.returncode in (0, 3, 5), text
    rows = ids(reader.rows("cl.kill"))
    if proc.returncode == 0:
        assert rows == list(range(100_001, 700_001))
    else:
        assert rows == []  # main unchanged (the run may have made the table, empty)
    print(f"executor {killed} killed mid-write; wap run exit {proc.returncode}")
