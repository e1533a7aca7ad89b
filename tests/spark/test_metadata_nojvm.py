"""`wap history` and `wap branches` without a JVM (issue 24): on tables made by real runs in the shared Spark
session, each command runs as a `wap` process in which pyspark cannot even be imported, and its output, --json
document and exit code are compared with the same command read through Spark (WAP_METADATA=spark, in this
process, as before this change)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from support.cli_harness import WAP
from support.data import trips_file
from support.no_jvm import NO_SPARK_HOME
from support.typer_cli import as_json, clean_env, wap, write_config

# A `wap` process in which any `import pyspark...` fails: a command that needed Spark would end in an error.
NO_PYSPARK = "import sys; sys.modules['pyspark'] = None; sys.argv[0] = 'wap'; from wapflow.cli import main; main()"


def without_spark(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", NO_PYSPARK, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_env(SPARK_HOME=NO_SPARK_HOME),
        stdin=subprocess.DEVNULL,
    )


def through_spark(monkeypatch: pytest.MonkeyPatch, *args: str) -> Any:
    """The command as before: table metadata read through Spark (the shared session, in this process)."""
    with monkeypatch.context() as m:
        m.setenv("WAP_METADATA", "spark")
        return wap(*args)


def _no_log(doc: dict[str, Any]) -> dict[str, Any]:
    """An error document names Spark's log file when Spark ran; without Spark there is none."""
    if isinstance(doc.get("error"), dict):
        doc["error"] = {k: v for k, v in doc["error"].items() if k != "log"}
    return doc


_CATALOGS = iter(range(1000))


@pytest.fixture
def made_by_spark(spark: Any, tmp_path: Path, landing: Path) -> dict[str, Any]:
    """Two published runs and a blocked one (its branch kept) on nyc.trips, made by real runs. A catalog name
    per test: the shared session keeps a catalog it loaded under its name."""
    catalog = f"nojvm{next(_CATALOGS)}"
    cfg = str(write_config(tmp_path, catalog))
    ids = []
    for i, (rows, nulls) in enumerate(((100, 0.0), (60, 0.0), (50, 0.1))):
        f = trips_file(landing, f"f{i}.parquet", rows, null_rate=nulls, start_id=1000 * i, seed=i)
        r = wap("run", "nyc.trips", str(f), "--config", cfg, "--json")
        assert r.exit_code == (1 if nulls else 0), r.output
        ids.append(as_json(r))
    return {"config": cfg, "catalog": catalog, "published": ids[:2], "blocked": ids[2]}


@pytest.mark.spark
def test_history_and_branches_read_without_a_jvm_match_spark(made_by_spark, monkeypatch):
    cfg = made_by_spark["config"]
    blocked = made_by_spark["blocked"]
    commands = [
        ("history", "nyc.trips"),
        ("history", "nyc.trips", "--limit", "1"),
        ("branches",),
        ("branches", "nyc.trips"),
    ]
    for command in commands:
        for as_json_flag in (("--json",), ()):
            args = (*command, "--config", cfg, *as_json_flag)
            old = through_spark(monkeypatch, *args)
            new = without_spark(*args)
            assert (new.returncode, new.stdout) == (old.exit_code, old.stdout), (args, new.stderr)
            assert "Traceback" not in new.stderr and "Spark" not in new.stderr, new.stderr

    history = json.loads(without_spark("history", "nyc.trips", "--config", cfg, "--json").stdout)["snapshots"]
    assert [s["snapshot_id"] for s in history[:2]] == [p["snapshot_id"] for p in reversed(made_by_spark["published"])]
    assert [s["rows_added"] for s in history[:2]] == [60, 100] and history[0]["total_rows"] == 160
    kept = json.loads(without_spark("branches", "--config", cfg, "--json").stdout)["branches"]
    assert [(b["branch"], b["run_id"], b["failed_checks"]) for b in kept] == [
        (blocked["branch"], blocked["run_id"], ["not_null(passenger_count)"])
    ]
    assert kept[0]["head_snapshot_id"] == blocked["snapshot_id"]


@pytest.mark.spark
def test_unknown_tables_are_the_same_error_without_a_jvm(made_by_spark, monkeypatch):
    cfg = made_by_spark["config"]
    for command in (("history", "nyc.trip"), ("branches", "nyc.nothing"), ("history", "other.trips")):
        args = (*command, "--config", cfg, "--json")
        old = through_spark(monkeypatch, *args)
        new = without_spark(*args)
        assert (new.returncode, _no_log(json.loads(new.stdout))) == (old.exit_code, _no_log(as_json(old))), new.stderr
        assert new.returncode == 2
    new = without_spark("history", "nyc.trip", "--config", cfg)
    expected = f"table nyc.trip does not exist in catalog {made_by_spark['catalog']} (did you mean 'nyc.trips'?)"
    assert expected in new.stderr, new.stderr


@pytest.mark.spark
def test_the_wap_console_script_reads_history_with_no_spark_home(made_by_spark):
    """The installed `wap` itself, with no Spark to start (SPARK_HOME points nowhere): history and branches
    still answer, so no JVM was needed."""
    cfg = made_by_spark["config"]
    for args in (("history", "nyc.trips"), ("branches",)):
        p = subprocess.run(
            [WAP, *args, "--config", cfg, "--json"],
            capture_output=True,
            text=True,
            timeout=120,
            env=clean_env(SPARK_HOME=NO_SPARK_HOME, JAVA_HOME=NO_SPARK_HOME),
        )
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout), p.stdout


def test_a_fresh_lakehouse_has_no_tables_and_reading_it_creates_nothing(tmp_path):
    """No catalog file yet (nothing written): `wap history` says the table does not exist (exit 2), as the
    Spark path does, and leaves no catalog.db behind."""
    cfg = write_config(tmp_path, "fresh")
    p = without_spark("history", "nyc.trips", "--config", str(cfg), "--json")
    assert p.returncode == 2, p.stderr
    assert json.loads(p.stdout)["error"]["type"] == "NotFound"
    assert not (tmp_path / "lakehouse" / "catalog.db").exists()
    p = without_spark("branches", "--config", str(cfg), "--json")
    assert (p.returncode, json.loads(p.stdout)) == (0, {"branches": []}), p.stderr


@pytest.mark.spark
def test_nessie_history_and_branches_without_a_jvm_match_spark(nessie_server, spark, tmp_path, landing, monkeypatch):
    """On Nessie: the table's metadataLocation on main (history) and on each Nessie branch (branches TABLE),
    from Nessie's API v2, give what Spark's Nessie catalogs give."""
    catalog = f"nojvm{next(_CATALOGS)}"
    ns = f"meta_{catalog}"
    cfg = tmp_path / "wap.toml"
    cfg.write_text(
        f'[lakehouse]\nwarehouse = "{tmp_path / "lh"}"\ncatalog = "nessie"\nnessie_uri = "{nessie_server.url}"\n'
        f'catalog_name = "{catalog}"\nmaster = "local[2]"\n\n'
        f'[tables."{ns}.trips"]\nchecks = [{{ check = "not_null", column = "passenger_count" }}]\n'
    )
    for i, (rows, nulls) in enumerate(((80, 0.0), (40, 0.1))):
        f = trips_file(landing, f"n{i}.parquet", rows, null_rate=nulls, start_id=1000 * i, seed=i)
        r = wap("run", f"{ns}.trips", str(f), "--config", str(cfg), "--json")
        assert r.exit_code == (1 if nulls else 0), r.output
    blocked = as_json(r)
    for command in (("history", f"{ns}.trips"), ("branches",), ("branches", f"{ns}.trips"), ("history", f"{ns}.nope")):
        args = (*command, "--config", str(cfg), "--json")
        old = through_spark(monkeypatch, *args)
        new = without_spark(*args)
        assert (new.returncode, _no_log(json.loads(new.stdout))) == (old.exit_code, _no_log(as_json(old))), (
            args,
            new.stderr,
        )
    kept = json.loads(without_spark("branches", f"{ns}.trips", "--config", str(cfg), "--json").stdout)["branches"]
    assert [(b["branch"], b["run_id"]) for b in kept] == [(blocked["branch"], blocked["run_id"])]


@pytest.mark.spark
def test_metadata_files_on_s3_are_read_without_a_jvm_with_read_only_keys(spark, s3env, tmp_path, monkeypatch):
    """The embedded catalog with its warehouse on the local S3 server: the metadata files are read through the
    [s3] settings (boto3). Read-only keys are enough, and the output is Spark's."""
    from support.s3_lake import lakehouse, toml_config, upload_trips
    from wapflow.pipeline import run_wap

    catalog = f"nojvm{next(_CATALOGS)}"
    landing, lake = s3env.buckets()
    lh = lakehouse(spark, tmp_path, s3env, lake=lake, catalog=catalog, keys=s3env.admin)
    assert run_wap(lh, "nyc.trips", [upload_trips(s3env, landing, "a.parquet", 100)]).status == "published"
    dirty = upload_trips(s3env, landing, "b.parquet", 50, null_rate=0.1, start_id=500)
    assert run_wap(lh, "nyc.trips", [dirty]).status == "blocked"
    admin = toml_config(tmp_path, s3env, lake=lake, catalog=catalog, keys=s3env.admin)
    reader = toml_config(tmp_path, s3env, lake=lake, catalog=catalog, keys=s3env.reader, name="reader.toml")
    for command in (("history", "nyc.trips"), ("branches", "nyc.trips")):
        old = through_spark(monkeypatch, *command, "--config", str(admin), "--json")
        assert old.exit_code == 0, old.output
        for cfg in (admin, reader):
            new = without_spark(*command, "--config", str(cfg), "--json")
            assert (new.returncode, new.stdout) == (0, old.stdout), new.stderr
