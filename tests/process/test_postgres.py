"""The production profile (issue 13): the Iceberg JDBC catalog, the run store and file ledger, and DBOS's system
database on one real PostgreSQL server (tests/support/pg_server.py), the warehouse on the local S3 server (moto).

Driven as a user drives it: real `wap` processes (each its own Spark application; a run that only follows what
a process did is made on the tests' shared SparkSession instead), read back independently: PyIceberg's
SqlCatalog on the same PostgreSQL tables with its own S3 FileIO, and psycopg on the run store's, ledger's and
DBOS's tables. The PostgreSQL password is one no other output contains, and every output is searched for it.
"""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pyarrow.parquet as pq
import pytest

from support.cli_harness import WAP, Reader, checksum, env, setup_run, unique_catalog, wap, write_config
from support.data import TRIPS_CHECKS, write_parquet
from support.pg_server import PASSWORD
from support.s3_server import REGION, S3Env, start_s3_env
from wapflow._dev.pg_server import Urls
from wapflow.config import parse_config
from wapflow.demo.generate import generate_trips
from wapflow.errors import ConfigError, LockTimeout
from wapflow.lakehouse import jvm
from wapflow.lakehouse.processes import free_port
from wapflow.redact import redact
from wapflow.runs.databases import check_dbos_database, check_jdbc_catalog
from wapflow.runs.ledger import Ledger, file_key
from wapflow.runs.store import RunRecord, RunStore
from wapflow.storage.files import FileIdentity


@pytest.fixture(scope="session")
def s3env() -> Iterator[S3Env]:
    """One moto server for this module's tests; stopped at the end."""
    e = start_s3_env()
    try:
        yield e
    finally:
        e.server.stop()


def sql(urls: Urls, query: str, *params: Any) -> list[tuple[Any, ...]]:
    """psycopg on the test's database: no SQLAlchemy, no wapflow code."""
    with psycopg.connect(urls.sqlalchemy.replace("postgresql+psycopg://", "postgresql://")) as conn:
        return list(conn.execute(query, params).fetchall())


def pg_config(tmp: Path, urls: Urls, s3env: S3Env, lake: str, *, catalog: str, extra: str = "") -> Path:
    """A wap.toml of the production profile as a user writes it (postgresql:// URLs, not SQLAlchemy's)."""
    checks = "\n".join("  { " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in c.items()) + " }," for c in TRIPS_CHECKS)
    run_store = urls.sqlalchemy.replace("postgresql+psycopg://", "postgresql://")
    props = f'uri = "{urls.jdbc}", "jdbc.user" = "{urls.user}", "jdbc.password" = "{urls.password}"'
    props += ', "jdbc.schema-version" = "V1"'
    text = textwrap.dedent(
        f"""\
        [lakehouse]
        warehouse = "s3://{lake}/warehouse"
        catalog = "jdbc"
        catalog_name = "{catalog}"
        catalog_properties = {{ {props} }}
        run_store = "{run_store}"
        master = "local[2]"
        driver_memory = "1g"

        [lakehouse.spark_conf]
        "spark.sql.shuffle.partitions" = "2"

        [s3]
        endpoint = "{s3env.endpoint}"
        region = "{REGION}"
        {s3env.admin.toml()}
        """
    )
    text += f'\n[tables."nyc.trips"]\nchecks = [\n{checks}\n]\n' + extra
    p = tmp / "wap.toml"
    p.write_text(text)
    return p


def pg_catalog(urls: Urls, name: str, s3env: S3Env, lake: str) -> Any:
    """PyIceberg's SqlCatalog on the same PostgreSQL tables the Iceberg JDBC catalog writes, with read-only keys."""
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog(
        name,
        uri=urls.sqlalchemy,
        warehouse=f"s3://{lake}/warehouse",
        **{
            "s3.endpoint": s3env.endpoint,
            "s3.region": REGION,
            "s3.access-key-id": s3env.reader.access_key_id,
            "s3.secret-access-key": s3env.reader.secret_access_key,
        },
    )


def main_snapshots(table: Any) -> list[Any]:
    """main's snapshots, newest first."""
    out = []
    snap = table.current_snapshot()
    while snap is not None:
        out.append(snap)
        snap = table.snapshot_by_id(snap.parent_snapshot_id) if snap.parent_snapshot_id else None
    return out


def no_password(*texts: str) -> None:
    for t in texts:
        assert PASSWORD not in t, t


def no_password_in_files(folder: Path) -> None:
    """Only wap.toml holds the password: not Spark's log files, not wapflow's state."""
    leaked = [
        p for p in folder.rglob("*") if p.is_file() and p.name != "wap.toml" and PASSWORD.encode() in p.read_bytes()
    ]
    assert leaked == []


# --- no JVM: configuration, jars, the run store, ledger and locks on PostgreSQL -------------------------------


def test_the_postgresql_driver_is_planned_only_for_a_postgresql_catalog():
    def coords(lakehouse: dict[str, Any]) -> tuple[str, ...]:
        cfg = parse_config({"lakehouse": {"jar_resolution": "ivy", **lakehouse}})
        packages = jvm.plan_for(cfg).packages
        assert [a.coordinate for a in jvm.artifacts_for(cfg)] == list(packages)  # what `wap doctor` compares
        return packages

    pg_props = {"uri": "jdbc:postgresql://db:5432/lake", "jdbc.user": "u", "jdbc.password": "p"}
    assert jvm.POSTGRESQL_JDBC.coordinate in coords({"catalog": "jdbc", "catalog_properties": pg_props})
    assert jvm.POSTGRESQL_JDBC.coordinate.startswith("org.postgresql:postgresql:42.7.")
    assert not any("postgresql" in c for c in coords({}))  # the embedded SQLite catalog
    assert not any("postgresql" in c for c in coords({"catalog": "rest", "catalog_properties": {"uri": "http://x"}}))
    # A driver pinned in extra_packages wins: one version on the classpath.
    pinned = coords(
        {"catalog": "jdbc", "catalog_properties": pg_props, "extra_packages": ["org.postgresql:postgresql:42.7.4"]}
    )
    assert [c for c in pinned if "postgresql" in c] == ["org.postgresql:postgresql:42.7.4"]


def test_bad_database_settings_are_clear_and_never_show_the_password(tmp_path, pg, pg_db):
    """Real `wap` processes (no JVM): each bad setting is one message with a fix and its exit code; the
    password is in none of them."""
    good = pg_db.sqlalchemy.replace("postgresql+psycopg://", "postgresql://")
    cases = [
        ('catalog = "jdbc"\n', 2, 'catalog = "jdbc" needs catalog_properties.uri'),
        (
            f'catalog = "jdbc"\ncatalog_properties = {{ uri = "{pg_db.jdbc}?user=wap&password={PASSWORD}" }}\n',
            2,
            'put it in catalog_properties."jdbc.password"',
        ),
        (
            f'run_store = "{good.replace("postgresql://", "postgresql+psycopg2://")}"\n',
            2,
            "needs the Python driver psycopg2",
        ),
        (f'run_store = "{good.replace(PASSWORD, PASSWORD + "x")}"\n', 3, "refused the connection"),
        (f'run_store = "{good.replace(f":{pg.port}/", f":{free_port()}/")}"\n', 5, "cannot reach the run store"),
    ]
    for lakehouse, code, words in cases:
        cfg = tmp_path / "wap.toml"
        cfg.write_text(f'[lakehouse]\nwarehouse = "{tmp_path / "lake"}"\n{lakehouse}')
        res = wap("runs", "--config", str(cfg), timeout=120)
        assert res.code == code, (lakehouse, res.text)
        assert words in res.stderr and "Traceback" not in res.stderr, res.text
        no_password(res.stdout, res.stderr)
        assert PASSWORD + "x" not in res.stderr
    assert redact(f"postgresql+psycopg://wap:{PASSWORD}@h/db and jdbc:x://h/db?password={PASSWORD}") == (
        "postgresql+psycopg://wap:***@h/db and jdbc:x://h/db?password=***"
    )


def test_run_store_ledger_and_publish_lock_on_postgresql(pg_db):
    """The run store under a postgresql:// URL (psycopg 3), a 128-character run id (PostgreSQL enforces
    VARCHAR lengths), two processes claiming the same 60 files (each won by exactly one), and the publish
    lock: a PostgreSQL advisory lock held by another process blocks, and is freed when that process is killed."""
    url = pg_db.sqlalchemy.replace("postgresql+psycopg://", "postgresql://")
    store = RunStore(url)
    assert store.engine.dialect.name == "postgresql" and store.engine.driver == "psycopg"
    long_id = "r" * 128
    store.save(RunRecord(run_id=long_id, table_name="nyc.trips", status="running", base_snapshot_id=2**62))
    store.save(RunRecord(run_id=long_id, table_name="nyc.trips", status="published", snapshot_id=-(2**63)))
    assert sql(pg_db, "SELECT status, snapshot_id FROM wap_runs WHERE run_id = %s", long_id) == [
        ("published", -(2**63))
    ]

    ledger = Ledger(store.engine)
    files = [FileIdentity(f"/landing/f{i:03d}.parquet", 100 + i, f"v{i}", None) for i in range(60)]
    keys = [file_key("s", f) for f in files]
    assert ledger.add("s", list(zip(keys, files, strict=True))) == 60
    script = textwrap.dedent(
        """
        import json, sys
        from wapflow.runs.ledger import Ledger
        from wapflow.runs.store import RunStore
        keys = json.loads(sys.argv[1])
        ledger = Ledger(RunStore(sys.argv[3]).engine)
        won = []
        for i in range(0, len(keys), 7):  # many small claims, interleaving with the other process
            won += ledger.claim(keys[i : i + 7][:: 1 if sys.argv[2] == "run0" else -1], sys.argv[2] + "_" + str(i))
        print(json.dumps(won))
        """
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, json.dumps(keys if i == 0 else keys[::-1]), f"run{i}", url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    won = [set(json.loads(o)) for o, _ in outs]
    assert not won[0] & won[1] and won[0] | won[1] == set(keys)
    assert sql(pg_db, "SELECT state, count(*) FROM wap_files GROUP BY state") == [("claimed", 60)]

    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom wapflow.runs.store import RunStore\n"
            "with RunStore(sys.argv[1]).publish_lock('nyc.trips'):\n    print('held', flush=True)\n    time.sleep(600)",
            url,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        started = time.monotonic()
        with pytest.raises(LockTimeout), store.publish_lock("nyc.trips", timeout=1.0):
            pass
        assert time.monotonic() - started >= 1.0
        with store.publish_lock("nyc.other", timeout=1.0):  # another table's lock is free
            pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    with store.publish_lock("nyc.trips", timeout=30.0):  # the dead holder's session ended: the lock is free
        assert sql(pg_db, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted") == [(1,)]

    # A weekly anomaly history picks its weekday in PostgreSQL's SQL, in UTC whatever the session's time zone:
    # runs at 02:30 UTC each day for three weeks (a Saturday's run is Friday evening in New York), read back by a
    # session in New York's zone.
    from datetime import UTC, datetime, timedelta

    import sqlalchemy as sa

    from wapflow.runs.metrics import MetricHistory

    saturday = datetime(2026, 11, 28, 2, 30, tzinfo=UTC)
    for day in range(21):
        at = saturday - timedelta(days=day)
        store.save(RunRecord(run_id=f"w{day:02d}", table_name="nyc.weekly", status="published", started_at=at))
        MetricHistory(store.engine).record(f"w{day:02d}", "nyc.weekly", at, {("row_count", ""): float(day)})
    new_york = sa.create_engine(store.engine.url, connect_args={"options": "-c timezone=America/New_York"})
    with new_york.connect() as conn:
        assert conn.exec_driver_sql("SHOW timezone").scalar() == "America/New_York"
    history = MetricHistory(new_york)
    assert history.published("nyc.weekly", "row_count", "", 5, weekday=5) == [0.0, 7.0, 14.0]  # the Saturdays
    assert history.published("nyc.weekly", "row_count", "", 2, weekday=4) == [1.0, 8.0]  # Fridays, the newest 2
    new_york.dispose()
    store.close()


# --- real `wap` processes on the JDBC catalog on PostgreSQL and an S3 warehouse ------------------------------


def upload(s3env: S3Env, bucket: str, key: str, rows: int, *, null_rate: float = 0.0, start_id: int = 1) -> str:
    buf = io.BytesIO()
    pq.write_table(generate_trips(rows, null_rate=null_rate, start_id=start_id, seed=start_id), buf)
    s3env.client().put_object(Bucket=bucket, Key=key, Body=buf.getvalue())
    return f"s3://{bucket}/{key}"


@pytest.mark.slow
def test_wap_run_publishes_and_blocks_on_a_postgresql_catalog_with_an_s3_warehouse(tmp_path, s3env, pg_db, spark):
    """The publishing run is a `wap` process (its own Spark application: the JDBC catalog's first table, Spark's
    log files); the blocked run after it is made on the tests' shared SparkSession (blocking is the same step
    on any catalog; a `wap run` that blocks exits 1 in tests/process/test_rest.py and test_connect.py)."""
    landing, lake = s3env.buckets()
    clean = upload(s3env, landing, "2026/11/clean.parquet", 300)
    dirty = upload(s3env, landing, "2026/11/dirty.parquet", 200, null_rate=0.05, start_id=1000)
    catalog = unique_catalog("pgcat")  # the blocked run registers it on the shared session, which caches catalogs
    cfg = pg_config(tmp_path, pg_db, s3env, lake, catalog=catalog)

    ok = wap("run", "nyc.trips", clean, "--config", str(cfg), "--json", timeout=600)
    assert ok.code == 0, ok.text
    doc = ok.doc
    assert doc["status"] == "published" and doc["rows_written"] == 300
    no_password(ok.stdout, ok.stderr)
    held = setup_run(spark, cfg, "nyc.trips", dirty)
    bdoc = held.to_dict()
    assert (bdoc["status"], bdoc["exit_code"]) == ("blocked", 1) and bdoc["branch"], held.message
    no_password(json.dumps(bdoc, default=str))

    # The Iceberg JDBC catalog's tables are in PostgreSQL (the catalog lives nowhere else) ...
    assert sql(pg_db, "SELECT table_namespace, table_name FROM iceberg_tables WHERE catalog_name = %s", catalog) == [
        ("nyc", "trips")
    ]
    assert not list(tmp_path.rglob("catalog.db")) and not list(tmp_path.rglob("*.sqlite"))
    # ... and PyIceberg reads main from them and from S3: the clean file's rows, the blocked run's rows not.
    table = pg_catalog(pg_db, catalog, s3env, lake).load_table("nyc.trips")
    snaps = main_snapshots(table)
    assert snaps[0].snapshot_id == doc["snapshot_id"]
    assert snaps[0].summary.additional_properties.get("wapflow.run-id") == doc["run_id"]
    expected = pq.read_table(
        io.BytesIO(s3env.client().get_object(Bucket=landing, Key="2026/11/clean.parquet")["Body"].read())
    )
    rows = table.scan().to_arrow().to_pylist()
    assert checksum(rows, "trip_id") == checksum(expected.to_pylist(), "trip_id")
    assert bdoc["branch"] in table.metadata.refs and table.metadata.refs["main"].snapshot_id == doc["snapshot_id"]
    assert all(k.startswith("warehouse/") for k in s3env.keys_in(lake))  # data and metadata on S3

    # The run store is the PostgreSQL database too: both runs, with main's snapshot for the published one.
    runs = {r[0]: r[1:] for r in sql(pg_db, "SELECT run_id, status, table_name, snapshot_id FROM wap_runs")}
    assert {k: v[:2] for k, v in runs.items()} == {
        doc["run_id"]: ("published", "nyc.trips"),
        bdoc["run_id"]: ("blocked", "nyc.trips"),
    }
    assert runs[doc["run_id"]][2] == doc["snapshot_id"] and runs[bdoc["run_id"]][2] != doc["snapshot_id"]
    listed = wap("runs", "--config", str(cfg), "--json")
    assert {(r["run_id"], r["status"]) for r in listed.doc["runs"]} == {
        (doc["run_id"], "published"),
        (bdoc["run_id"], "blocked"),
    }
    # The connection checks a health check (`wap doctor`) runs, without a JVM.
    cat = check_jdbc_catalog(parse_config(_toml(cfg)))
    assert (cat["dialect"], cat["initialized"], cat["tables"]) == ("postgresql", True, 1)
    assert PASSWORD not in json.dumps(cat)
    assert list(tmp_path.rglob("wap-*.log"))  # Spark's log files were written, and hold no password
    no_password_in_files(tmp_path)


def _toml(path: Path) -> dict[str, Any]:
    import tomllib

    return tomllib.loads(path.read_text())


@pytest.mark.slow
def test_two_watch_workers_share_the_catalog_ledger_and_dbos_on_postgresql(tmp_path, s3env, pg_db):
    """Two `wap watch --once` workers (two Spark applications) on one source of 10 files, with the catalog, run
    store, ledger and DBOS on one PostgreSQL and the warehouse on S3: every file's rows on main exactly once,
    every file published in the ledger with a snapshot on main, each file in one run, every DBOS workflow
    (in DBOS's schema of that database) SUCCESS."""
    _, lake = s3env.buckets()
    landing = tmp_path / "landing"
    files = [
        write_parquet(landing / f"f{i:02d}.parquet", generate_trips(15, start_id=1 + 100 * i, seed=i))
        for i in range(10)
    ]
    source = (
        f'\n[sources.trips]\ntable = "nyc.trips"\nlocation = "{landing}"\nsettle_seconds = 0\nmax_files_per_run = 2\n'
    )
    cfg = pg_config(tmp_path, pg_db, s3env, lake, catalog="pgwatch", extra=source)
    procs = [
        subprocess.Popen(
            [WAP, "watch", "trips", "--once", "--worker", worker, "--config", str(cfg), "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env(),
        )
        for worker in ("w1", "w2")
    ]
    try:
        outs = [p.communicate(timeout=600) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    docs = []
    for p, (so, se) in zip(procs, outs, strict=True):
        assert p.returncode == 0, so + se
        assert "Traceback" not in se
        no_password(so, se)
        docs.append(json.loads(so))

    # Main: every row of every file once (PyIceberg on the PostgreSQL catalog, S3 data).
    table = pg_catalog(pg_db, "pgwatch", s3env, lake).load_table("nyc.trips")
    expected = [r for f in files for r in pq.read_table(f).to_pylist()]
    assert checksum(table.scan().to_arrow().to_pylist(), "trip_id") == checksum(expected, "trip_id")
    branches = [
        n for n, r in table.metadata.refs.items() if n != "main" and "branch" in str(r.snapshot_ref_type).lower()
    ]
    assert branches == []
    on_main = {s.snapshot_id: s.summary.additional_properties.get("wapflow.run-id") for s in main_snapshots(table)}

    # The ledger (PostgreSQL): every file published, with its run's snapshot on main.
    ledger = sql(pg_db, "SELECT uri, state, run_id, snapshot_id FROM wap_files WHERE source = 'trips'")
    assert sorted(Path(u).name for u, *_ in ledger) == [f.name for f in files]
    assert {s for _, s, _, _ in ledger} == {"published"}
    assert all(on_main.get(snap) == run for _, _, run, snap in ledger), (ledger, on_main)
    # No duplicate runs: each file in exactly one published run, each published run on main once.
    runs = sql(pg_db, "SELECT run_id, status, snapshot_id, file_ids FROM wap_runs")
    published = [r for r in runs if r[1] == "published"]
    uris = [f["uri"] for r in published for f in json.loads(r[3])]
    assert sorted(uris) == sorted(u for u, *_ in ledger), runs
    assert sorted(r[0] for r in published) == sorted(v for v in on_main.values() if v)
    assert {r[1] for r in runs} <= {"published", "discarded"}

    # DBOS kept its state in that PostgreSQL database (schema dbos), not in a SQLite file: one SUCCESS
    # workflow per claimed batch, run by the two workers.
    dbos_tables = {
        t for (t,) in sql(pg_db, "SELECT table_name FROM information_schema.tables WHERE table_schema = 'dbos'")
    }
    assert {"workflow_status", "operation_outputs"} <= dbos_tables
    wfs = sql(pg_db, "SELECT workflow_uuid, status, executor_id FROM dbos.workflow_status")
    assert {s for _, s, _ in wfs} == {"SUCCESS"} and len(wfs) >= len(published)
    assert {w.rsplit(".c", 1)[0] for w, _, _ in wfs} >= {r[0] for r in published}
    assert {e for _, _, e in wfs} <= {"w1", "w2"}
    assert not list(tmp_path.rglob("*.sqlite")) and not list(tmp_path.rglob("*.db"))
    info = check_dbos_database(parse_config(_toml(cfg)))
    assert info["dialect"] == "postgresql" and info["initialized"] is True
    no_password_in_files(tmp_path)
    by_worker = {e: sum(1 for *_, x in wfs if x == e) for e in ("w1", "w2")}
    print(f"workflows run by each worker: {by_worker}; files claimed: {[len(d['files']) for d in docs]}")


@pytest.mark.slow
def test_wap_run_with_a_wrong_catalog_password_or_the_server_gone(tmp_path, pg, pg_db):
    """The catalog's PostgreSQL named by SQLSTATE in a real `wap run` (its JVM): a refused login is the
    environment (exit 3, someone must act), a server that is not there is transient (exit 5, a retry may
    help); the source stays, nothing is written, the password is in neither message."""
    src = write_parquet(tmp_path / "batch.parquet", generate_trips(20, start_id=1))
    wrong = "Wrong-pw-2b9e"
    cases = [
        (pg_db.jdbc, wrong, 3, "EnvironmentProblem", "environment", "refused the connection"),
        (
            pg_db.jdbc.replace(f":{pg.port}/", f":{free_port()}/"),
            PASSWORD,
            5,
            "Unreachable",
            "transient",
            "could not reach",
        ),
    ]
    for uri, password, code, error, kind, words in cases:
        cfg = tmp_path / "wap.toml"
        cfg.write_text(
            f'[lakehouse]\nwarehouse = "{tmp_path / "lake"}"\nmaster = "local[1]"\ndriver_memory = "1g"\n'
            f'catalog = "jdbc"\ncatalog_properties = {{ uri = "{uri}", "jdbc.user" = "{pg_db.user}", '
            f'"jdbc.password" = "{password}" }}\n\n'
            '[tables."nyc.trips"]\nchecks = [{ check = "not_null", column = "passenger_count" }]\n'
        )
        res = wap("run", "nyc.trips", str(src), "--config", str(cfg), "--json", timeout=300)
        assert res.code == code, res.text
        doc = json.loads(res.stdout)
        assert (doc["error"]["type"], doc["error"]["kind"]) == (error, kind) and words in doc["error"]["message"], doc
        assert "PostgreSQL" in doc["error"]["message"]
        assert password not in res.text and PASSWORD not in res.text
        assert src.exists()


@pytest.mark.slow
def test_the_run_store_server_stopping_mid_run_is_transient_then_the_run_resumes_once(tmp_path, pg, spark):
    """The run store, ledger and publish lock's PostgreSQL stops while a real `wap run` writes: the run ends
    with exit 5 (transient: the server cannot be reached), no traceback and no password, main unchanged and
    the source kept; once the server is back the same run (its run id, on the tests' shared SparkSession: the
    process is not what is tested there) publishes every row exactly once."""
    import shutil
    import tempfile

    from wapflow._dev.pg_server import LocalPostgres

    folder = Path(tempfile.mkdtemp(prefix="wapflow-pg-gone-"))  # its own server: this test stops it
    server = LocalPostgres(folder, password=PASSWORD, fast=True)
    try:
        server.start()
        urls = server.create_database("store")
        catalog = unique_catalog("pgstore")  # the resumed run registers it on the shared session
        cfg = write_config(
            tmp_path,
            '[tables."nyc.trips"]\nchecks = [{ check = "unique", columns = ["trip_id"] }]\n',
            lakehouse=f'run_store = "{urls.sqlalchemy}"\n',
            catalog=catalog,
        )
        src = write_parquet(tmp_path / "landing" / "big.parquet", generate_trips(300_000, start_id=1, seed=7))
        command = [WAP, "run", "nyc.trips", str(src), "--run-id", "r_store_gone", "--config", str(cfg), "--json"]
        p = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(), stdin=subprocess.DEVNULL
        )
        assert p.stderr is not None and p.stdout is not None
        seen = []
        for line in p.stderr:
            seen.append(line)
            if "writing to branch" in line:
                break
        assert server.stop(), "".join(seen)  # fast shutdown: open connections are cut
        out, err = p.communicate(timeout=300)
        err = "".join(seen) + err
        assert p.returncode == 5, out + err
        doc = json.loads(out)
        assert doc["error"]["kind"] == "transient", doc
        assert "PostgreSQL" in doc["error"]["message"] or "postgresql" in doc["error"]["message"], doc
        assert "Traceback" not in err
        no_password(out, err)
        reader = Reader(tmp_path, catalog)
        if reader.exists("nyc.trips"):  # made by the write step, with nothing on main
            assert reader.rows("nyc.trips") == []
        assert src.exists()

        server.start()  # the same port again
        done = setup_run(spark, cfg, "nyc.trips", src, run_id="r_store_gone")
        assert done.status == "published", done.message
        got = reader.rows("nyc.trips")
        assert len(got) == 300_000 and len({r["trip_id"] for r in got}) == 300_000
        assert reader.branches("nyc.trips") == []
        assert sql(urls, "SELECT status FROM wap_runs WHERE run_id = 'r_store_gone'") == [("published",)]
    finally:
        server.stop(immediate=True)
        shutil.rmtree(folder, ignore_errors=True)


def test_a_postgresql_store_from_before_migrations_is_upgraded_once_with_every_row(pg_db):
    """The run store, ledger and alerts as wapflow wrote them on PostgreSQL before its tables had migrations
    (tests/fixtures/stores, made by make_v0.py): three processes open it at once; it is upgraded once (the
    advisory lock), every row reads back as before, and a store stamped by a newer wapflow is refused."""
    from wapflow.runs import schema

    dump = Path(__file__).parent.parent / "fixtures" / "stores" / "store-v0.postgresql.sql"
    with psycopg.connect(pg_db.sqlalchemy.replace("postgresql+psycopg://", "postgresql://")) as conn:
        conn.execute(dump.read_text())
    tables = ("wap_runs", "wap_files", "wap_alerts")
    # The columns each table had before migrations (revisions may add columns; these rows must stay as they were).
    cols = {
        t: ", ".join(
            c
            for (c,) in sql(
                pg_db,
                "SELECT column_name FROM information_schema.columns WHERE table_name = %s ORDER BY ordinal_position",
                t,
            )
        )
        for t in tables
    }
    before = {t: sql(pg_db, f"SELECT {cols[t]} FROM {t} ORDER BY 1") for t in tables}
    url = pg_db.sqlalchemy.replace("postgresql+psycopg://", "postgresql://")
    code = "import sys; from wapflow.runs.store import RunStore\ns = RunStore(sys.argv[1]); print(len(s.list()))\n"
    procs = [subprocess.Popen([sys.executable, "-c", code, url], stdout=subprocess.PIPE, text=True) for _ in range(3)]
    assert [p.communicate(timeout=120)[0].strip() for p in procs] == ["3", "3", "3"]
    assert sql(pg_db, f"SELECT version_num FROM {schema.VERSION_TABLE}") == [(schema.head(),)]
    assert {t: sql(pg_db, f"SELECT {cols[t]} FROM {t} ORDER BY 1") for t in tables} == before
    rec = RunStore(url).get("20261124t120100_bbbbbb")
    assert rec is not None and rec.status == "blocked" and rec.branch_kept and rec.branch == "wap_b"

    with psycopg.connect(url) as conn:
        conn.execute(f"UPDATE {schema.VERSION_TABLE} SET version_num = '9999_newer'")
    schema._done.clear()
    with pytest.raises(ConfigError, match="written by a newer wapflow"):
        RunStore(url)
