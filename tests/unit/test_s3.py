"""S3 without Spark, on a real S3 API server (moto, 127.0.0.1, SigV4 and IAM policies enforced): the [s3]
settings Iceberg and S3A get (credentials never in Spark's config), config errors that never echo a secret, glob
rules, one listing interface for folders and buckets, `wap storage init`. With Spark: tests/spark/test_s3.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from support.s3_lake import toml_config
from wapflow.cli import app
from wapflow.config import parse_config
from wapflow.errors import ConfigError, InputError
from wapflow.lakehouse import spark_s3 as s3_spark
from wapflow.lakehouse.catalog_props import catalog_properties
from wapflow.storage import Storage
from wapflow.storage.files import FileIdentity, glob_regex

runner = CliRunner()


def test_s3_settings_reach_iceberg_and_s3a_but_credentials_stay_out_of_spark_conf(tmp_path):
    cfg = parse_config(
        {
            "lakehouse": {"warehouse": "s3://lake-bucket/warehouse"},
            "s3": {"endpoint": "http://127.0.0.1:9000", "access_key_id": "AKIAEXAMPLE", "secret_access_key": "sekrit"},
        }
    )
    cfg.base_dir = tmp_path
    props = catalog_properties(cfg)
    assert props["io-impl"] == "org.apache.iceberg.aws.s3.S3FileIO"
    assert props["warehouse"] == "s3://lake-bucket/warehouse"
    assert props["s3.endpoint"] == "http://127.0.0.1:9000" and props["s3.path-style-access"] == "true"
    assert props["client.region"] == "us-east-1"
    # The embedded SQLite catalog stays on local disk next to the config.
    assert props["uri"].startswith(f"jdbc:sqlite:{tmp_path / '.wap' / 'catalog.db'}")
    hadoop = s3_spark.hadoop_settings(cfg.s3)
    assert hadoop["fs.s3a.endpoint"] == "http://127.0.0.1:9000" and hadoop["fs.s3a.path.style.access"] == "true"
    assert hadoop["fs.s3.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"
    everything = json.dumps(props) + json.dumps(hadoop) + repr(cfg) + cfg.model_dump_json()
    assert "AKIAEXAMPLE" not in everything and "sekrit" not in everything
    assert s3_spark.uses_s3(cfg)
    # AWS proper: no endpoint, virtual-host addressing, region left to the SDKs' own chain.
    aws = parse_config({"lakehouse": {"warehouse": "s3://b/w"}})
    assert aws.s3 is None and s3_spark.uses_s3(aws)
    assert s3_spark.iceberg_properties(aws)["s3.path-style-access"] == "false"
    assert "s3.endpoint" not in s3_spark.iceberg_properties(aws)
    local = parse_config({})
    assert not s3_spark.uses_s3(local) and s3_spark.iceberg_properties(local) == {}


def test_s3_config_errors_name_the_key_and_never_echo_a_secret():
    with pytest.raises(ConfigError) as e:
        parse_config({"s3": {"access_key_id": "AKIAONLYKEY"}})
    assert "access_key_id and secret_access_key go together" in str(e.value)
    with pytest.raises(ConfigError) as e:
        parse_config({"s3": {"access_key_id": "x", "secret_access_key": 987654321}})
    assert "[s3].secret_access_key" in str(e.value) and "987654321" not in str(e.value)
    with pytest.raises(ConfigError) as e:
        parse_config({"s3": {"endpoint": "http://user:pw@127.0.0.1:9000"}})
    assert "must not carry credentials" in str(e.value) and "pw@" not in str(e.value)
    with pytest.raises(ConfigError) as e:
        parse_config({"s3": {"secret_key": "x"}})
    assert "unknown key 'secret_key'" in str(e.value) and "secret_access_key" in str(e.value)
    with pytest.raises(ConfigError) as e:
        parse_config({"s3": {"landing": "s3://Not_A_Bucket/x"}})
    assert "not a valid bucket name" in str(e.value)
    with pytest.raises(ConfigError) as e:
        keys = {"access_key_id": "a", "secret_access_key": "b"}
        s3_spark.check_master(parse_config({"lakehouse": {"master": "spark://h:7077"}, "s3": keys}))
    assert "only reach the driver" in str(e.value) and e.value.exit_code == 2


def test_glob_matching_follows_shell_rules():
    rx = glob_regex("2026/11/*.parquet")
    assert rx.match("2026/11/a.parquet") and not rx.match("2026/11/sub/a.parquet")
    assert glob_regex("2026/**/*.csv").match("2026/11/sub/b.csv")
    assert glob_regex("2026/**/b.csv").match("2026/b.csv")
    assert glob_regex("day=0[1-3]/f?.json").match("day=02/f1.json")
    assert not glob_regex("day=0[!1-3]/f?.json").match("day=02/f1.json")
    assert not glob_regex("*.parquet").match("a.parquet.tmp")


def test_one_listing_interface_for_local_folders_and_s3(s3env, tmp_path):
    landing, _ = s3env.buckets()
    c = s3env.client()
    c.put_object(Bucket=landing, Key="2026/11/a.parquet", Body=b"a" * 10)
    c.put_object(Bucket=landing, Key="2026/11/deep/b.parquet", Body=b"b" * 20)
    c.put_object(Bucket=landing, Key="2026/11/_SUCCESS", Body=b"")
    c.put_object(Bucket=landing, Key="2026/12/c.parquet", Body=b"c")
    local = tmp_path / "landing"
    (local / "deep").mkdir(parents=True)
    (local / "a.parquet").write_bytes(b"a" * 10)
    (local / "deep" / "b.parquet").write_bytes(b"b" * 20)
    (local / "_SUCCESS").write_bytes(b"")

    st = Storage(parse_config({"s3": {"endpoint": s3env.endpoint, **s3env.admin.as_dict()}}).s3)
    remote = st.list(f"s3://{landing}/2026/11/")
    assert [(f.key, f.size) for f in remote] == [("2026/11/a.parquet", 10), ("2026/11/deep/b.parquet", 20)]
    head = c.head_object(Bucket=landing, Key="2026/11/a.parquet")
    assert remote[0].version == head["ETag"].strip('"') and remote[0].bucket == landing
    assert remote[0].uri == f"s3://{landing}/2026/11/a.parquet"
    assert [f.key for f in st.list(f"s3://{landing}/2026/*/*.parquet")] == ["2026/11/a.parquet", "2026/12/c.parquet"]
    assert [f.key for f in st.list(f"s3://{landing}/2026/11/a.parquet")] == ["2026/11/a.parquet"]
    assert [f.uri for f in st.list(f"s3a://{landing}/2026/11/a*")] == [f"s3a://{landing}/2026/11/a.parquet"]
    assert st.list(f"s3://{landing}/2027/") == []  # an empty prefix is empty, as an empty folder is
    with pytest.raises(InputError, match=r"does not exist \(did you mean s3://.*/2026/11/a.parquet\?\)"):
        st.list(f"s3://{landing}/2026/11/b.parquet")

    here = st.list(str(local))
    relative = [(Path(f.uri).relative_to(local).as_posix(), f.size) for f in here]
    assert relative == [("a.parquet", 10), ("deep/b.parquet", 20)]
    before = here[0].version
    os.utime(local / "a.parquet", ns=(1, 1_700_000_000_000_000_000))
    assert st.list(str(local / "a.parquet"))[0].version != before  # replaced content changes the id
    assert [Path(f.uri).name for f in st.list(str(local / "**" / "*.parquet"))] == ["a.parquet", "b.parquet"]

    cfg = str(toml_config(tmp_path, s3env, lake="lake-unused", catalog="ls", keys=s3env.reader))
    r = runner.invoke(app, ["storage", "ls", f"s3://{landing}/2026/11/", "--config", cfg, "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert [FileIdentity.from_dict(f) for f in doc["files"]] == remote
    assert [(f["uri"], f["size"], f["version"]) for f in doc["files"]] == [(f.uri, f.size, f.version) for f in remote]
    r = runner.invoke(app, ["storage", "ls", str(local), "--config", cfg])
    assert r.exit_code == 0 and "2 file(s)" in r.stdout
    r = runner.invoke(app, ["storage", "ls", "s3://landing-no-such-bucket/", "--config", cfg])
    assert r.exit_code == 3 and "bucket 'landing-no-such-bucket' does not exist" in r.stderr


def test_storage_init_creates_buckets_and_proves_access(s3env, tmp_path):
    landing, lake = "landing-init", "lake-init"
    cfg = toml_config(tmp_path, s3env, lake=lake, catalog="init", keys=s3env.admin, landing=landing)
    r = runner.invoke(app, ["storage", "init", "--config", str(cfg), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert [(b["role"], b["bucket"], b["created"], b["checked"]) for b in doc["buckets"]] == [
        ("lake", lake, True, "write"),
        ("landing", landing, True, "read"),
    ]
    assert s3env.keys_in(lake) == set()  # the write probe cleaned up after itself
    r = runner.invoke(app, ["storage", "init", "--config", str(cfg)])
    assert r.exit_code == 0 and r.stdout.count("existed") == 2

    # A reader cannot create the buckets, nor write the lake: exit 3, naming bucket and permission.
    cfg = toml_config(tmp_path, s3env, lake="lake-init-new", catalog="init", keys=s3env.reader, landing=landing)
    r = runner.invoke(app, ["storage", "init", "--config", str(cfg)])
    assert r.exit_code == 3 and "may not create bucket s3://lake-init-new" in r.stderr
    cfg = toml_config(tmp_path, s3env, lake=lake, catalog="init", keys=s3env.reader, landing=landing)
    r = runner.invoke(app, ["storage", "init", "--config", str(cfg), "--json"])
    assert r.exit_code == 3
    err = json.loads(r.stdout)["error"]
    assert err["kind"] == "environment" and f"may not write s3://{lake}/warehouse/" in err["message"]
    assert "s3:PutObject" in err["hint"]
    cfg = toml_config(tmp_path, s3env, lake=lake, catalog="init", keys=s3env.lake_only, landing=landing)
    r = runner.invoke(app, ["storage", "init", "--config", str(cfg)])
    assert r.exit_code == 3 and f"may not access bucket s3://{landing}" in r.stderr
