"""`wap` as a Spark Connect client, and `wap serve`.

One real Spark Connect server (wapflow.lakehouse.connect.ConnectServer: spark-submit of
SparkConnectServer with wapflow's jars and the Iceberg extensions) runs for the test session; each
case is a real `wap` process (run, revert, maintain) with `master = "sc://127.0.0.1:P"`, its own
warehouse and catalog name (the catalog is a session setting each client sends). Runs that only set the
scene for the command a test checks are made by a Connect client in the test process (the `client`
fixture, scene_run): the same client code as a `wap run` process, without that process's start. Then
`wap serve` itself: a real foreground process that other commands on its config find, stopped by SIGTERM.
main is read back with PyIceberg.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.cli_harness import WAP, Reader, env, wap
from support.data import changes_file, write_parquet
from support.spark_cluster import cluster_config, ids
from wapflow.config import load_config
from wapflow.demo.generate import generate_trips
from wapflow.lakehouse.connect import ConnectServer, port_answers
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.lakehouse.processes import free_port
from wapflow.maintain.run import ACTIONS
from wapflow.pipeline import RunResult, run_wap


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    """A Spark Connect server on a free port for the session (not recorded for `wap` to find); stopped at the end."""
    folder = tmp_path_factory.mktemp("connect-server")
    cfg = load_config(str(cluster_config(folder, "local[2]", catalog="boot", tables={})))
    for k in ("SPARK_REMOTE", "SPARK_CONNECT_MODE"):
        os.environ.pop(k, None)
    server = ConnectServer(cfg, free_port(), record=False)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def client(connect_server: ConnectServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A Spark Connect client session in this test process (a client of the session's server); stopped after.

    While it lives, pyspark's functions (F.lit, F.expr) build Connect columns, as in a `wap` process on Connect:
    SPARK_CONNECT_MODE_ENABLED is what PySpark's own `.remote(url)` builder and wapflow's channel set."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    monkeypatch.setenv("SPARK_CONNECT_MODE_ENABLED", "1")
    session = ConnectSession.builder.remote(connect_server.endpoint).create()
    try:
        yield session
    finally:
        session.stop()


def scene_run(client: Any, cfg: Path, table: str, path: Path | str) -> RunResult:
    """A run made by `client` in this process: for runs that only set the scene for the `wap` process a test
    checks (a `wap run` on Connect is the same run through the same client, plus a process start and imports)."""
    result = run_wap(Lakehouse(load_config(str(cfg)), spark=client), table, [str(path)])
    assert result.status == "published", result.message  # what a `wap run` exits 0 for
    return result


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory, connect_server: ConnectServer) -> tuple[Path, Path, Reader]:
    folder = tmp_path_factory.mktemp("connect")
    return folder, cluster_config(folder, connect_server.endpoint, catalog="conn"), Reader(folder, "conn")


@pytest.mark.spark
@pytest.mark.slow
def test_publish_blocked_quarantine_through_connect(lake: tuple[Path, Path, Reader], client: Any) -> None:
    """`wap run` processes publish a clean file (exit 0) and block a dirty one (exit 1, main unchanged). The
    quarantine run, the scene for `wap revert`, is made by the client here (exit 0 is the published one's)."""
    folder, cfg, reader = lake
    clean = write_parquet(folder / "in" / "clean.parquet", generate_trips(300, start_id=1))
    r = wap("run", "cl.pub", str(clean), "-c", str(cfg), "--json")
    assert r.code == 0, r.text
    assert r.doc["status"] == "published"
    assert ids(reader.rows("cl.pub")) == list(range(1, 301))
    head = reader.main("cl.pub")
    # The landed file is adopted as it is (copied, committed by PyIceberg on the catalog), not rewritten.
    [data] = [Path(t.file.file_path.removeprefix("file:")) for t in reader.cat.load_table("cl.pub").scan().plan_files()]
    assert data.name == f"{r.doc['run_id']}-adopted-00000.parquet" and data.read_bytes() == clean.read_bytes()

    dirty = write_parquet(folder / "in" / "dirty.parquet", generate_trips(300, start_id=1001, null_rate=0.1, seed=2))
    r = wap("run", "cl.pub", str(dirty), "-c", str(cfg), "--json")
    assert r.code == 1, r.text
    assert r.doc["status"] == "blocked"
    assert reader.main("cl.pub") == head

    quarantined = scene_run(client, cfg, "cl.quar", dirty)
    good, bad = reader.rows("cl.quar"), reader.rows("cl.quar__quarantine")
    assert bad and all(row["passenger_count"] is None for row in bad)
    assert all(row["passenger_count"] is not None for row in good)
    assert sorted(ids(good) + ids(bad)) == list(range(1001, 1301))

    # `wap revert` on Connect (PyIceberg commits the file removal): the run's rows leave both tables.
    run_id = quarantined.run_id
    r = wap("revert", run_id, "-c", str(cfg), "--json")
    assert r.code == 0, r.text
    assert set(r.doc["snapshots"]) == {"cl.quar", "cl.quar__quarantine"}
    assert reader.rows("cl.quar") == [] and reader.rows("cl.quar__quarantine") == []
    for t in ("cl.quar", "cl.quar__quarantine"):
        assert reader.summaries(t)[-1]["wapflow.reverted-run-id"] == run_id


@pytest.mark.spark
@pytest.mark.slow
def test_two_concurrent_runs_through_connect(lake: tuple[Path, Path, Reader], client: Any) -> None:
    folder, cfg, reader = lake
    # The table exists (two first runs racing to create it: one gets exit 5, "retry", by design).
    scene_run(client, cfg, "cl.conc", write_parquet(folder / "in" / "conc0.parquet", generate_trips(10, start_id=1)))
    files = [
        write_parquet(folder / "in" / f"conc{i}.parquet", generate_trips(400, start_id=1 + 10_000 * i, seed=i))
        for i in (1, 2)
    ]
    procs = [
        subprocess.Popen(
            [WAP, "run", "cl.conc", str(f), "-c", str(cfg), "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env(),
            stdin=subprocess.DEVNULL,
        )
        for f in files
    ]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, out + err
    assert ids(reader.rows("cl.conc")) == list(range(1, 11)) + list(range(10_001, 10_401)) + list(range(20_001, 20_401))
    assert reader.branches("cl.conc") == []


@pytest.mark.spark
@pytest.mark.slow
def test_wap_serve_is_found_by_commands_and_stops_on_sigterm(
    tmp_path: Path, connect_server: ConnectServer, engine: dict[str, str]
) -> None:
    """`wap serve` on a local-master config: `wap run` says it uses the server and publishes, with the warm
    engine on as by default (it starts none: the command is the server's client, not an engine's, which once
    failed as a Connect session without a SparkContext); a second `wap serve` on a busy port is one error (exit
    2); SIGTERM stops the server (port closed, exit 0)."""
    cfg = cluster_config(tmp_path, "local[2]", tables={"sv.t": ""})
    port = free_port()
    busy = wap("serve", "-c", str(cfg), "--port", str(connect_server.port))
    assert busy.code == 2, busy.text
    assert "already in use" in busy.text and "Traceback" not in busy.text

    serve = subprocess.Popen(
        [WAP, "serve", "-c", str(cfg), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(**engine),
        stdin=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 180
        while not port_answers(port) and time.monotonic() < deadline and serve.poll() is None:
            time.sleep(0.5)
        assert port_answers(port), serve.communicate(timeout=30)
        time.sleep(0.5)  # the state file is written right after the port answers
        st = wap("serve", "-c", str(cfg), "--status", "--json")
        assert st.code == 0 and st.doc["running"] and st.doc["endpoint"] == f"sc://127.0.0.1:{port}", st.text

        f = write_parquet(tmp_path / "in" / "a.parquet", generate_trips(200, start_id=1))
        r = wap("run", "sv.t", str(f), "-c", str(cfg), "--json", **engine)
        assert r.code == 0, r.text
        assert f"using the Spark Connect server of `wap serve` at sc://127.0.0.1:{port}" in r.stderr
        assert not list(Path(engine["XDG_RUNTIME_DIR"]).glob("wapflow/engine-*.json"))  # no engine started
        assert ids(Reader(tmp_path).rows("sv.t")) == list(range(1, 201))
        doc = wap("doctor", "-c", str(cfg), "--json").doc
        (spark,) = [f for f in doc["findings"] if f["part"] == "spark"]
        assert spark["status"] == "ok" and f"`wap serve` at sc://127.0.0.1:{port}" in spark["detail"], doc
    finally:
        serve.send_signal(signal.SIGTERM)
        out, err = serve.communicate(timeout=60)
    assert serve.returncode == 0, out + err
    assert not port_answers(port)
    assert wap("serve", "-c", str(cfg), "--status", "--json").doc["running"] is False


def test_wap_serve_bad_input_is_one_error_without_a_server(tmp_path: Path) -> None:
    """No JVM starts: a port that is not one, Java missing, --stop and --status with nothing running."""
    cfg = cluster_config(tmp_path, "local[2]", tables={})
    r = wap("serve", "-c", str(cfg), "--port", "70000")
    assert r.code == 2 and "not a TCP port" in r.text and "Traceback" not in r.text, r.text
    no_java = {"PATH": str(tmp_path / "empty-bin"), "JAVA_HOME": str(tmp_path / "no-jdk")}
    r = wap("serve", "-c", str(cfg), "--port", str(free_port()), **no_java)
    assert r.code == 3 and "Java was not found" in r.text and "Traceback" not in r.text, r.text
    remote = cluster_config(tmp_path / "remote", "sc://spark.example.com:15002", tables={})
    r = wap("serve", "-c", str(remote))
    assert r.code == 2 and "another machine" in r.text, r.text
    r = wap("serve", "-c", str(cfg), "--stop")
    assert r.code == 0 and "no Spark Connect server was running" in r.text, r.text
    assert wap("serve", "-c", str(cfg), "--status", "--json").doc["running"] is False


@pytest.mark.spark
def test_a_table_created_meanwhile_is_recognised_on_connect(client: Any) -> None:
    """Two first runs racing to create one table: the loser must see "created by another run" (a retry
    writes into it), not a bug. A Connect client gets no Java exception classes, only Spark's condition."""
    from wapflow.pipeline.steps.write import created_meanwhile
    from wapflow.spark import errors as spark_errors

    client.sql("CREATE NAMESPACE IF NOT EXISTS boot.race")
    client.sql("CREATE TABLE boot.race.t (a INT) USING iceberg")
    with pytest.raises(Exception) as caught:
        client.sql("CREATE TABLE boot.race.t (a INT) USING iceberg").collect()
    assert "TABLE_OR_VIEW_ALREADY_EXISTS" in spark_errors.conditions(caught.value)
    assert created_meanwhile(caught.value)
    with pytest.raises(Exception) as other:
        client.sql("SELECT * FROM boot.race.missing").collect()
    assert not created_meanwhile(other.value)


MERGE = 'mode = "merge"\nkey = ["id"]\ndelete_when = "op = \'D\'"\n'


@pytest.mark.spark
@pytest.mark.slow
def test_revert_through_connect(tmp_path: Path, connect_server: ConnectServer, client: Any) -> None:
    """`wap revert` as a Spark Connect client: an append deep in main's history leaves main in one new
    snapshot (PyIceberg on the same catalog) while the later run's rows stay; a merge rolls main back while it
    is the latest commit, and is refused (main unchanged) once main has moved on. The runs reverted are made
    by the client here (scene_run); every revert, and `wap runs`, is a `wap` process."""
    cfg = cluster_config(tmp_path, connect_server.endpoint, catalog="rev", tables={"cl.rev": ""})
    cfg.write_text(cfg.read_text() + f'[tables."cl.merge"]\n{MERGE}checks = []\n')  # about revert, not checks
    reader = Reader(tmp_path, "rev")

    def run(table: str, path: str) -> str:
        return scene_run(client, cfg, table, path).run_id

    first = run("cl.rev", str(write_parquet(tmp_path / "in" / "a.parquet", generate_trips(200, start_id=1))))
    second = run(
        "cl.rev", str(write_parquet(tmp_path / "in" / "b.parquet", generate_trips(150, start_id=1001, seed=3)))
    )
    second_head = reader.main("cl.rev")
    r = wap("revert", first, "-c", str(cfg), "--json")
    assert r.code == 0, r.text
    assert ids(reader.rows("cl.rev")) == list(range(1001, 1151))  # only the second run's rows on main
    assert r.doc["rows_removed"] == {"cl.rev": 200} and r.doc["snapshot_id"] == reader.main("cl.rev")
    last = reader.summaries("cl.rev")[-1]
    assert last["wapflow.reverted-run-id"] == first and last["deleted-records"] == "200", last
    assert reader.cat.load_table("cl.rev").current_snapshot().parent_snapshot_id == second_head  # one new snapshot
    runs = {x["run_id"]: x["status"] for x in wap("runs", "--config", str(cfg), "--json").doc["runs"]}
    assert runs[first] == "reverted" and runs[second] == "published", runs
    again = wap("revert", first, "-c", str(cfg))
    assert again.code == 2 and "is reverted" in again.text and "Traceback" not in again.text, again.text

    landing = tmp_path / "landing"
    run("cl.merge", changes_file(landing, "seed.parquet", [(i, f"n{i}", "I") for i in range(1, 6)]))
    before, rows = reader.main("cl.merge"), reader.rows("cl.merge")
    merge = run("cl.merge", changes_file(landing, "m.parquet", [(1, "merged", "U"), (2, None, "D")]))
    r = wap("revert", merge, "-c", str(cfg), "--json")
    assert r.code == 0, r.text
    assert reader.main("cl.merge") == before and r.doc["snapshot_id"] == before
    assert sorted(reader.rows("cl.merge"), key=lambda x: x["id"]) == sorted(rows, key=lambda x: x["id"])
    merge2 = run("cl.merge", changes_file(landing, "m2.parquet", [(3, "merged", "U")]))
    run("cl.merge", changes_file(landing, "later.parquet", [(9, "nine", "I")]))
    head = reader.main("cl.merge")
    r = wap("revert", merge2, "-c", str(cfg))
    assert r.code == 2 and "main has moved on since" in r.text and "Traceback" not in r.text, r.text
    assert reader.main("cl.merge") == head


@pytest.mark.spark
@pytest.mark.slow
def test_revert_through_connect_on_a_rest_catalog(
    tmp_path: Path, connect_server: ConnectServer, rest_catalog, client: Any
) -> None:
    """The same removal when wap.toml's catalog is an Iceberg REST catalog: PyIceberg's RestCatalog commits the
    snapshot that takes the first run's files off main; an independent REST client reads the rest back. The two
    runs are made by the client here (scene_run); the revert is a `wap` process."""
    from pyiceberg.catalog.rest import RestCatalog

    table = f"rr{os.getpid()}.trips"
    rest = f'catalog = "rest"\ncatalog_properties = {{ uri = "{rest_catalog.url}" }}\n'
    cfg = cluster_config(tmp_path, connect_server.endpoint, catalog="revrest", tables={table: ""}, lakehouse=rest)
    runs = []
    for name, start in (("a.parquet", 1), ("b.parquet", 501)):
        f = write_parquet(tmp_path / "in" / name, generate_trips(120, start_id=start, seed=start))
        runs.append(scene_run(client, cfg, table, f).run_id)
    reader = RestCatalog("reader", uri=rest_catalog.url)
    head = reader.load_table(table).current_snapshot().snapshot_id
    r = wap("revert", runs[0], "-c", str(cfg), "--json")
    assert r.code == 0, r.text
    t = reader.load_table(table)
    snap = t.current_snapshot()
    assert snap.parent_snapshot_id == head and snap.snapshot_id == r.doc["snapshot_id"]
    assert snap.summary["wapflow.reverted-run-id"] == runs[0]
    assert sorted(t.scan(selected_fields=("trip_id",)).to_arrow().column("trip_id").to_pylist()) == list(
        range(501, 621)
    )


@pytest.mark.spark
@pytest.mark.slow
def test_wap_maintain_through_connect(tmp_path: Path, connect_server: ConnectServer, client: Any) -> None:
    """A real `wap maintain` process with master sc://...: the Iceberg procedures run as SQL on the server;
    several small files become one, PyIceberg reads the same rows, snapshots are expired, and every action is
    in the run store. Before that, with a run inside revert_window (the clock given to the pass), the
    compaction of the files before it is skipped, saying why: a Connect client has no Iceberg Java API for the
    file swap on main. The five runs are made by the client here (scene_run)."""
    from datetime import UTC, datetime, timedelta

    from wapflow.maintain import maintain

    base = cluster_config(tmp_path, connect_server.endpoint, catalog="cmaint", tables={"cm.t": ""})
    common = 'expire_older_than = "0s"\nkeep_last = 1\nmin_input_files = 2\nevery = "never"\n'
    cfg, windowed = tmp_path / "wap.toml", tmp_path / "windowed.toml"
    windowed.write_text(base.read_text() + f'[maintenance]\n{common}revert_window = "1h"\n')
    cfg.write_text(base.read_text() + f'[maintenance]\n{common}revert_window = "0s"\n')
    reader = Reader(tmp_path, "cmaint")
    for i in range(5):
        scene_run(
            client,
            cfg,
            "cm.t",
            write_parquet(tmp_path / "in" / f"m{i}.parquet", generate_trips(30, start_id=1 + 100 * i, seed=i)),
        )
    rows = sorted(reader.rows("cm.t"), key=lambda r: r["trip_id"])
    assert len(rows) == 150
    table = reader.cat.load_table("cm.t")
    assert len(list(table.scan().plan_files())) == 5

    # A clock at which the fifth run is within revert_window (1h) and the four before it are not.
    head = table.current_snapshot()
    assert head is not None and head.parent_snapshot_id is not None
    parent = table.snapshot_by_id(head.parent_snapshot_id)
    assert parent is not None
    fourth, fifth = parent.timestamp_ms, head.timestamp_ms
    now = datetime.fromtimestamp((fifth + (fourth - fifth) / 2) / 1000, UTC) + timedelta(hours=1)
    held = maintain(Lakehouse(load_config(str(windowed)), spark=client), "cm.t", dry_run=True, now=now)
    compact = held.tables[0].action("compact")
    assert compact["status"] == "skipped", held.to_dict()
    why = compact["figures"]["skipped"]
    assert "within revert_window" in why and "Spark Connect" in why, why
    assert len(list(reader.cat.load_table("cm.t").scan().plan_files())) == 5

    dry = wap("maintain", "cm.t", "-c", str(cfg), "--dry-run", "--json")
    assert dry.code == 0, dry.text
    (planned,) = dry.doc["tables"]
    assert planned["status"] == "dry_run" and planned["summary"]["files_compacted"] == 5, planned
    assert len(list(reader.cat.load_table("cm.t").scan().plan_files())) == 5

    r = wap("maintain", "cm.t", "-c", str(cfg), "--json")
    assert r.code == 0, r.text
    (done,) = r.doc["tables"]
    assert done["status"] == "done", done
    s = done["summary"]
    assert s["data_files_before"] == 5 and s["data_files_after"] == 1 and s["files_compacted"] == 5, s
    assert s["snapshots_expired"] >= 4, s
    table = reader.cat.load_table("cm.t")
    assert len(list(table.scan().plan_files())) == 1
    assert sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["trip_id"]) == rows
    assert len(table.snapshots()) == 1

    log = wap("maintain", "--log", "cm.t", "-c", str(cfg), "--json")
    assert log.code == 0, log.text
    mine = [a for a in log.doc["actions"] if a["pass_id"] == r.doc["pass_id"]]
    by_action = {a["action"]: a for a in mine}
    assert set(by_action) == set(ACTIONS)
    assert by_action["compact"]["status"] == "done" and by_action["compact"]["figures"]["rewritten_data_files"] == 5
    assert by_action["expire_snapshots"]["figures"]["expired"] == s["snapshots_expired"]
