"""S3 end to end on a real S3 API server (moto, 127.0.0.1, SigV4 and IAM policies enforced).

Files land in a landing bucket, WAP writes them into an Iceberg warehouse on a lake bucket through
S3A (reads) and S3FileIO (writes), PyIceberg reads the result; every bad input fails before any
write with exit code 3 (5, transient, when the endpoint cannot be reached); credentials never
appear in output, JSON, the run store or Spark's config.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from support.s3_lake import lakehouse, toml_config, upload_trips
from support.s3_server import REGION, Keys, S3Env
from wapflow.cli import app
from wapflow.demo.generate import generate_trips
from wapflow.lakehouse.processes import free_port
from wapflow.pipeline import run_wap
from wapflow.sql.identifiers import TableName
from wapflow.storage.files import FileIdentity

WAP = str(Path(sys.executable).parent / "wap")
TABLE = TableName.parse("nyc.trips")
runner = CliRunner()


def metadata_location(catalog_db: Path) -> list[tuple[str, str]]:
    """The catalog's pointer to each table's current metadata: it moves with every commit, branch or main."""
    with sqlite3.connect(catalog_db) as con:
        return sorted(con.execute("SELECT table_name, metadata_location FROM iceberg_tables").fetchall())


def etags(env: S3Env, bucket: str) -> dict[str, str]:
    pages = env.client().get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return {o["Key"]: o["ETag"] for p in pages for o in p.get("Contents", []) or []}


def _pyiceberg(name: str, tmp_path: Path, lake: str, s3env: S3Env) -> Any:
    """PyIceberg on the lakehouse's SQLite catalog and its S3 warehouse, as the read-only user: no Spark."""
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog(
        name,
        uri=f"sqlite:///{tmp_path / '.wap' / 'catalog.db'}",
        warehouse=f"s3://{lake}/warehouse",
        **{
            "s3.endpoint": s3env.endpoint,
            "s3.region": REGION,
            "s3.access-key-id": s3env.reader.access_key_id,
            "s3.secret-access-key": s3env.reader.secret_access_key,
        },
    )


# --- Spark: write-audit-publish from a landing bucket into an S3 warehouse --------------------


@pytest.mark.spark
def test_s3_sources_need_s3_switched_on(lakehouse_factory, landing):
    """A local lakehouse without [s3] has no S3 jars in its JVM: say so instead of a Hadoop stack trace."""
    lh = lakehouse_factory({"nyc.trips": {"checks": []}})  # about S3, not checks
    res = run_wap(lh, "nyc.trips", ["s3://landing-bucket/2026/11/*.parquet"])
    assert res.status == "failed" and res.exit_code == 2
    assert "add an [s3] section to wap.toml" in res.error["hint"]
    assert not lh.tables.exists(TABLE)


@pytest.mark.spark
def test_landing_bucket_to_s3_warehouse_publish_block_and_pyiceberg(spark, s3env, tmp_path):
    landing, lake = s3env.buckets()
    upload_trips(s3env, landing, "2026/11/clean/part-1.parquet", 300)
    upload_trips(s3env, landing, "2026/11/clean/part-2.parquet", 200, start_id=1000)
    s3env.client().put_object(Bucket=landing, Key="2026/11/clean/_SUCCESS", Body=b"")
    dirty = upload_trips(s3env, landing, "2026/11/dirty.parquet", 400, null_rate=0.05, start_id=5000)
    landed = etags(s3env, landing)
    lh = lakehouse(spark, tmp_path, s3env, lake=lake, catalog="s3_e2e", keys=s3env.admin)

    clean = run_wap(lh, "nyc.trips", [f"s3://{landing}/2026/11/clean/*.parquet"])
    assert clean.status == "published", clean.message
    assert clean.rows_written == 500
    assert clean.files == [
        f"s3://{landing}/2026/11/clean/part-1.parquet",
        f"s3://{landing}/2026/11/clean/part-2.parquet",
    ]
    main = lh.tables.head(TABLE)
    assert main == clean.snapshot_id and lh.tables.row_count(TABLE) == 500
    written = s3env.keys_in(lake)
    assert any(k.startswith("warehouse/nyc/trips/data/") and k.endswith(".parquet") for k in written)
    assert any(k.startswith("warehouse/nyc/trips/metadata/") and k.endswith(".metadata.json") for k in written)
    assert not any(".wapflow-probe-" in k for k in written)
    assert (tmp_path / ".wap" / "catalog.db").is_file() and not (tmp_path / "lakehouse").exists()

    blocked = run_wap(lh, "nyc.trips", [dirty])
    assert blocked.status == "blocked" and blocked.exit_code == 1
    assert "not_null(passenger_count)" in [c["name"] for c in blocked.checks if c["status"] == "failed"]
    assert lh.tables.head(TABLE) == main and lh.tables.row_count(TABLE) == 500
    assert blocked.branch in [b.name for b in lh.iceberg.list(TABLE)]
    assert lh.tables.row_count(TABLE, blocked.branch) == 900
    assert etags(s3env, landing) == landed  # the landing files are read, never moved or changed

    # PyIceberg reads the same catalog and the same S3 objects, without Spark.
    catalog = _pyiceberg("s3_e2e", tmp_path, lake, s3env)
    table = catalog.load_table("nyc.trips")
    assert table.current_snapshot().snapshot_id == main
    arrow = table.scan().to_arrow()
    assert arrow.num_rows == 500 and arrow.column("passenger_count").null_count == 0
    assert set(table.refs()) == {"main", blocked.branch}


@pytest.mark.spark
def test_a_landed_object_whose_columns_are_the_tables_is_adopted_by_a_server_side_copy(spark, s3env, tmp_path):
    """wapflow.pipeline.steps.adopt on S3: the object is copied within S3 (on the condition that its ETag is
    the listed one) and committed as it is; PyIceberg finds its columns through the table's name mapping."""
    landing, lake = s3env.buckets()
    first = upload_trips(s3env, landing, "2026/11/a.parquet", 300)
    second = upload_trips(s3env, landing, "2026/11/b.parquet", 200, start_id=1000)
    lh = lakehouse(spark, tmp_path, s3env, lake=lake, catalog="s3_adopt", keys=s3env.admin)
    runs = [run_wap(lh, "nyc.trips", [uri]) for uri in (first, second)]
    assert [r.status for r in runs] == ["published", "published"], [r.message for r in runs]
    client = s3env.client()
    for run, uri in zip(runs, (first, second), strict=True):
        adopted = [k for k in s3env.keys_in(lake) if k.endswith(f"/{run.run_id}-adopted-00000.parquet")]
        assert len(adopted) == 1, s3env.keys_in(lake)
        key = uri.removeprefix(f"s3://{landing}/")
        landed_bytes = client.get_object(Bucket=landing, Key=key)["Body"].read()
        assert client.get_object(Bucket=lake, Key=adopted[0])["Body"].read() == landed_bytes
    catalog = _pyiceberg("s3_adopt", tmp_path, lake, s3env)
    arrow = catalog.load_table("nyc.trips").scan().to_arrow()
    assert arrow.num_rows == 500
    assert sorted(arrow.column("trip_id").to_pylist()) == [*range(1, 301), *range(1000, 1200)]


@pytest.mark.spark
def test_a_local_file_is_adopted_into_a_table_on_s3_and_an_object_into_a_local_table(spark, s3env, tmp_path):
    """Adoption across stores: a landed local file is uploaded as it is into a table on S3, and a landed object
    downloaded as it is into a local table (on the condition that its ETag is the listed one); PyIceberg reads
    both back."""
    from pyiceberg.catalog.sql import SqlCatalog

    landing, lake = s3env.buckets()
    client = s3env.client()
    local = tmp_path / "landing" / "a.parquet"
    local.parent.mkdir()
    pq.write_table(generate_trips(300, seed=3), local)
    up = lakehouse(spark, tmp_path / "up", s3env, lake=lake, catalog="s3_up", keys=s3env.admin)
    run = run_wap(up, "nyc.trips", [str(local)])
    assert run.status == "published", run.message
    adopted = [k for k in s3env.keys_in(lake) if k.endswith(f"/{run.run_id}-adopted-00000.parquet")]
    assert len(adopted) == 1, s3env.keys_in(lake)
    assert client.get_object(Bucket=lake, Key=adopted[0])["Body"].read() == local.read_bytes()
    rows = _pyiceberg("s3_up", tmp_path / "up", lake, s3env).load_table("nyc.trips").scan().to_arrow()
    assert sorted(rows.column("trip_id").to_pylist()) == pq.read_table(local).column("trip_id").to_pylist()

    uri = upload_trips(s3env, landing, "2026/11/b.parquet", 200, start_id=1000)
    folder = tmp_path / "down"
    down = lakehouse(spark, folder, s3env, lake=lake, catalog="s3_down", keys=s3env.admin, warehouse=str(folder / "wh"))
    run = run_wap(down, "nyc.trips", [uri])
    assert run.status == "published", run.message
    copies = list((folder / "wh").rglob(f"{run.run_id}-adopted-00000.parquet"))
    assert len(copies) == 1, sorted(str(p) for p in (folder / "wh").rglob("*.parquet"))
    landed = client.get_object(Bucket=landing, Key="2026/11/b.parquet")["Body"].read()
    assert copies[0].read_bytes() == landed
    # An object replaced since it was listed is not downloaded: its listed ETag no longer matches.
    from wapflow.pipeline.steps import adopt

    listed = next(f for f in down.storage.list(uri))
    upload_trips(s3env, landing, "2026/11/b.parquet", 5, start_id=9000)
    target = folder / "wh" / "stale.parquet"
    assert adopt._copy(SimpleNamespace(lh=down), listed, str(target)) is False and not target.exists()
    fresh = next(f for f in down.storage.list(uri))
    assert fresh.version != listed.version and adopt._copy(SimpleNamespace(lh=down), fresh, str(target)) is True
    assert target.read_bytes() == client.get_object(Bucket=landing, Key="2026/11/b.parquet")["Body"].read()
    db = next(folder.rglob("catalog.db"))
    catalog = SqlCatalog("s3_down", uri=f"sqlite:///{db}", warehouse=f"file://{folder / 'wh'}")
    got = catalog.load_table("nyc.trips").scan().to_arrow()
    assert sorted(got.column("trip_id").to_pylist()) == list(range(1000, 1200))


@pytest.mark.spark
def test_cli_on_s3_with_temporary_credentials_never_shows_them(spark, s3env, tmp_path, capfd):
    """Every way out of wapflow is grepped for the access key id, secret key and session token."""
    landing, lake = "landing-cli", "lake-cli"
    keys = s3env.temporary
    cfg = str(toml_config(tmp_path, s3env, lake=lake, catalog="s3_cli", keys=keys, landing=landing))
    outputs: list[str] = []

    def wap(*args: str) -> Any:
        r = runner.invoke(app, [*args, "--config", cfg])
        outputs.extend([r.stdout, r.stderr])
        return r

    assert wap("storage", "init").exit_code == 0
    clean = upload_trips(s3env, landing, "2026/11/clean.parquet", 100)
    dirty = upload_trips(s3env, landing, "2026/11/dirty.parquet", 100, null_rate=0.1, start_id=500)
    r = wap("storage", "ls", f"s3://{landing}/2026/11/", "--json")
    assert [f["uri"] for f in json.loads(r.stdout)["files"]] == [clean, dirty]

    r = wap("run", "nyc.trips", clean, "--json")
    assert r.exit_code == 0, r.output
    published = json.loads(r.stdout)
    assert published["status"] == "published" and published["files"] == [clean]
    r = wap("run", "nyc.trips", dirty)
    assert r.exit_code == 1 and "BLOCKED" in r.stdout
    r = wap("query", "SELECT count(*) FROM nyc.trips", "--json")
    assert json.loads(r.stdout)["rows"] == [[100]]
    assert wap("history", "nyc.trips").exit_code == 0
    assert wap("runs", "--json").exit_code == 0

    # The wrong secret for the same key id: refused before any write, and still nothing leaks.
    wrong = Keys(keys.access_key_id, "wrong-secret-5f2a9c", keys.session_token)
    bad = str(toml_config(tmp_path, s3env, lake=lake, catalog="s3_cli", keys=wrong, name="bad.toml"))
    r = runner.invoke(app, ["run", "nyc.trips", clean, "--config", bad, "--json"])
    outputs.extend([r.stdout, r.stderr])
    assert r.exit_code == 3 and "SignatureDoesNotMatch" in json.loads(r.stdout)["error"]["message"]

    jvm = spark.sparkContext._jvm
    dump = jvm.java.io.StringWriter()
    jvm.org.apache.hadoop.conf.Configuration.dumpConfiguration(spark.sparkContext._jsc.hadoopConfiguration(), dump)
    outputs.append(dump.toString())
    outputs.append(repr(spark.sparkContext.getConf().getAll()))
    outputs.append(repr(spark.conf.getAll))
    captured = capfd.readouterr()  # what the JVM and anything else wrote to the real stdout/stderr
    outputs.extend([captured.out, captured.err])
    stores = [p.read_bytes().decode("latin-1") for p in (tmp_path / ".wap").iterdir() if p.is_file()]
    assert any("wapflow_runs" in p.name for p in (tmp_path / ".wap").iterdir())

    text = "\n".join(outputs + stores)
    assert published["run_id"] in text  # the grep does see the outputs and the run store
    for secret in [*keys.secrets(), wrong.secret_access_key]:
        assert secret not in text


# --- bad input: refused before any write, exit 3, main unchanged -----------------------------


@pytest.fixture(scope="module")
def published_on_s3(spark, s3env, tmp_path_factory) -> dict[str, Any]:
    """A table with one published run, plus a corrupt and an empty file in the landing bucket."""
    tmp = tmp_path_factory.mktemp("s3-bad-input")
    landing, lake = s3env.buckets()
    clean = upload_trips(s3env, landing, "2026/11/clean.parquet", 50)
    s3env.client().put_object(Bucket=landing, Key="2026/11/corrupt.parquet", Body=b"this is not parquet" * 10)
    s3env.client().put_object(Bucket=landing, Key="2026/11/empty.parquet", Body=b"")
    cfg = toml_config(tmp, s3env, lake=lake, catalog="s3_bad", keys=s3env.admin)
    r = runner.invoke(app, ["run", "nyc.trips", clean, "--config", str(cfg), "--json"])
    assert r.exit_code == 0, r.output
    snapshot = json.loads(r.stdout)["snapshot_id"]
    return {"tmp": tmp, "landing": landing, "lake": lake, "clean": clean, "snapshot": snapshot}


LANDED = "s3://{landing}/2026/11/"
BAD_INPUT = {
    # case: (keys, source, endpoint, lake, expected message); "clean" is the published file
    "wrong secret key": ("wrong_secret", "clean", None, None, "SignatureDoesNotMatch"),
    "unknown access key": ("unknown_key", "clean", None, None, "InvalidAccessKeyId"),
    "invalid session token": ("bad_token", "clean", None, None, "session token was rejected"),
    "missing landing bucket": (
        "admin",
        "s3://landing-missing/2026/11/clean.parquet",
        None,
        None,
        "bucket 'landing-missing' does not exist",
    ),
    "missing lake bucket": ("admin", "clean", None, "lake-missing", "bucket 'lake-missing' does not exist"),
    "no permission to write the lake": ("reader", "clean", None, None, "may not write s3://{lake}/warehouse/"),
    "no permission to read the landing bucket": ("lake_only", "clean", None, None, "may not read " + LANDED + "clean"),
    "no permission to list the landing bucket": (
        "lake_only",
        LANDED + "*.parquet",
        None,
        None,
        "may not list " + LANDED,
    ),
    "wrong endpoint": ("admin", "clean", "free_port", None, "cannot reach the S3 endpoint http://127.0.0.1:"),
    "no object matches the glob": ("admin", "s3://{landing}/2026/12/*.parquet", None, None, "no object matches"),
    "missing file": ("admin", LANDED + "clen.parquet", None, None, "(did you mean " + LANDED + "clean.parquet?)"),
    "corrupt parquet": ("admin", LANDED + "corrupt.parquet", None, None, "not a valid parquet file"),
    "empty file": ("admin", LANDED + "empty.parquet", None, None, "is empty (0 bytes)"),
}


@pytest.mark.spark
@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_s3_input_fails_before_any_write(case, published_on_s3, s3env):
    key_kind, source, endpoint, lake, expected = BAD_INPUT[case]
    p = published_on_s3
    names = {"landing": p["landing"], "lake": p["lake"]}
    keys = {
        "admin": s3env.admin,
        "reader": s3env.reader,
        "lake_only": s3env.lake_only,
        "wrong_secret": Keys(s3env.admin.access_key_id, "not-the-secret-8c1e"),
        "unknown_key": Keys("AKIAWAPFLOWUNKNOWN01", "whatever-secret-3b7d"),
        "bad_token": Keys(s3env.temporary.access_key_id, s3env.temporary.secret_access_key, "not-a-token-9d4f"),
    }[key_kind]
    source = p["clean"] if source == "clean" else source.format(**names)
    cfg = toml_config(
        p["tmp"],
        s3env,
        lake=lake or p["lake"],
        catalog="s3_bad",
        keys=keys,
        endpoint=f"http://127.0.0.1:{free_port()}" if endpoint == "free_port" else None,
        name="case.toml",
    )
    catalog_db = p["tmp"] / ".wap" / "catalog.db"
    lake_before, landing_before = etags(s3env, p["lake"]), etags(s3env, p["landing"])
    pointer_before = metadata_location(catalog_db)

    # --again: the clean file is published already; each case is about what is wrong besides.
    r = runner.invoke(app, ["run", "nyc.trips", source, "--again", "--config", str(cfg), "--json"])
    # An endpoint that refuses connections is transient; a name that names nothing is usage.
    code = 5 if endpoint == "free_port" else 2 if case in ("no object matches the glob", "missing file") else 3
    assert r.exit_code == code, r.output
    doc = json.loads(r.stdout)
    assert doc["status"] == "failed" and doc["error"]["exit_code"] == code
    assert doc["error"]["retryable"] is (code == 5)
    assert expected.format(**names) in doc["error"]["message"]
    assert doc["error"]["hint"]
    # Nothing half-written: no object added or changed in either bucket, main and refs unchanged.
    assert etags(s3env, p["lake"]) == lake_before
    assert etags(s3env, p["landing"]) == landing_before
    assert metadata_location(catalog_db) == pointer_before
    r = runner.invoke(app, ["runs", "--config", str(cfg), "--json"])
    assert json.loads(r.stdout)["runs"][0]["run_id"] == doc["run_id"]
    assert json.loads(r.stdout)["runs"][0]["status"] == "failed"
    for secret in keys.secrets():
        assert secret not in r.stdout + json.dumps(doc)


@pytest.mark.spark
def test_main_is_unchanged_after_the_bad_inputs(spark, published_on_s3, s3env):
    """Read back through Spark: the published snapshot is still main's head, with its rows, and no branch."""
    p = published_on_s3
    lh = lakehouse(spark, p["tmp"], s3env, lake=p["lake"], catalog="s3_bad", keys=s3env.admin)
    assert lh.tables.head(TABLE) == p["snapshot"]
    assert lh.tables.row_count(TABLE) == 50
    assert lh.iceberg.list(TABLE) == []


# --- real processes: the standard AWS credential chain, and `wap demo --s3` ------------------


def _env(**extra: str) -> dict[str, str]:
    from support import cli_harness

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK", "AWS_"))}
    env["AWS_EC2_METADATA_DISABLED"] = "true"
    env.setdefault("JAVA_TOOL_OPTIONS", cli_harness.fast_start_jvm())  # the tests' `wap` JVMs: they start sooner
    env.update(extra)
    return env


def test_credentials_from_the_environment_in_a_fresh_process(s3env, tmp_path):
    """No keys in wap.toml: boto3 and the JVM (S3A, S3FileIO) both take them from AWS_* variables."""
    landing, lake = s3env.buckets()
    clean = upload_trips(s3env, landing, "2026/11/clean.parquet", 60)
    cfg = toml_config(tmp_path, s3env, lake=lake, catalog="lakehouse", keys=None)
    keys = s3env.temporary
    env = _env(
        AWS_ACCESS_KEY_ID=keys.access_key_id,
        AWS_SECRET_ACCESS_KEY=keys.secret_access_key,
        AWS_SESSION_TOKEN=keys.session_token or "",
    )
    p = subprocess.run(
        [WAP, "run", "nyc.trips", clean, "--config", str(cfg), "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["status"] == "published" and doc["rows_written"] == 60
    assert any(k.startswith("warehouse/nyc/trips/data/") for k in s3env.keys_in(lake))
    for secret in keys.secrets():
        assert secret not in p.stdout + p.stderr

    # Without any credentials the check fails fast and says where credentials come from.
    p = subprocess.run(
        [WAP, "run", "nyc.trips", clean, "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=300,
        env=_env(AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"), AWS_CONFIG_FILE=str(tmp_path / "none")),
        cwd=tmp_path,
    )
    assert p.returncode == 3
    assert "no S3 credentials found" in p.stderr and "AWS_ACCESS_KEY_ID" in p.stderr
    assert "Traceback" not in p.stderr


def test_wap_demo_s3_in_a_fresh_process(tmp_path):
    p = subprocess.run(
        [WAP, "demo", "--s3", "--dir", str(tmp_path / "demo"), "--rows", "1000", "--json"],
        capture_output=True,
        text=True,
        timeout=900,
        env=_env(),
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["as_expected"]
    assert doc["clean"]["status"] == "published" and doc["dirty"]["status"] == "blocked"
    assert doc["clean"]["files"] == ["s3://landing/2026/11/trips_2026-11-01.parquet"]
    assert doc["main_snapshot_before_dirty"] == doc["main_snapshot_after_dirty"]
    assert doc["main_rows_after_dirty"] == 1000
    storage = doc["storage"]
    assert storage["endpoint"].startswith("http://127.0.0.1:") and storage["warehouse"] == "s3://lake/warehouse"
    landed = [FileIdentity.from_dict(f) for f in storage["landing_files"]]
    assert [f.key for f in landed] == ["2026/11/trips_2026-11-01.parquet", "2026/11/trips_2026-11-02.parquet"]
    assert all(f.bucket == "landing" and f.version and len(f.version) == 32 for f in landed)
    assert {b["bucket"]: b["created"] for b in storage["buckets"]} == {"lake": True, "landing": True}
    assert "starting a local S3 server" in p.stderr
    with pytest.raises(httpx.HTTPError):  # the demo stopped its server
        httpx.get(storage["endpoint"], timeout=2.0)
